package admin

import (
	"sync"

	"github.com/switchyard/switchyard/engine"
)

// recentEvents keeps the last events added, for /api/events: a fixed ring,
// so a flapping pool costs bounded memory.
type recentEvents struct {
	mu   sync.Mutex
	ring []engine.Event // guarded by mu; fixed length
	next int            // guarded by mu; where the next event goes
	n    int            // guarded by mu; events held, up to len(ring)
}

func newRecentEvents(capacity int) *recentEvents {
	return &recentEvents{ring: make([]engine.Event, capacity)}
}

func (r *recentEvents) capacity() int { return len(r.ring) }

// add keeps e, dropping the oldest event when the ring is full.
func (r *recentEvents) add(e engine.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = e
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))
}

// newest returns up to limit events, newest first.
func (r *recentEvents) newest(limit int) []engine.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]engine.Event, 0, min(limit, r.n))
	for i := 1; i <= r.n && len(out) < limit; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}

package admin

import (
	"encoding/json"
	"sync"

	"github.com/switchyard/switchyard/engine"
)

// apiEvent is an event as /api/events shows it: the engine's JSON form
// (engine.Event.MarshalJSON), which leaves out zero fields, so that a
// state change from or to candidate, the zero state, would have no from
// or to. Here a state change always has both.
type apiEvent engine.Event

func (e apiEvent) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(engine.Event(e))
	if err != nil || e.Kind != engine.EventState && e.Kind != engine.EventTier || len(b) < 2 || b[0] != '{' {
		return b, err
	}
	var missing []byte
	switch {
	case e.Kind == engine.EventTier:
		if e.FromTier == 0 {
			missing = append(missing, `"from_tier":0,`...)
		}
		if e.ToTier == 0 {
			missing = append(missing, `"to_tier":0,`...)
		}
	default:
		if e.From == engine.Candidate {
			missing = append(missing, `"from":"candidate",`...)
		}
		if e.To == engine.Candidate {
			missing = append(missing, `"to":"candidate",`...)
		}
	}
	if missing == nil {
		return b, nil
	}
	out := append([]byte{'{'}, missing...)
	if b[1] == '}' {
		out = out[:len(out)-1] // no other field: drop the trailing comma
	}
	return append(out, b[1:]...), nil
}

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

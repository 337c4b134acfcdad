package fetchapi

import (
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
)

// attempts remembers the answered attempts of recent fetches, so that a
// late verdict can name one by its id (docs/design/009-fetch-api.md). It
// is bounded twice: an entry lives ttl, and past max entries the oldest
// goes first. Every entry lives the same ttl, so insertion order is expiry
// order and one FIFO serves both bounds. Nothing survives a restart.
type attempts struct {
	ttl time.Duration
	max int

	mu    sync.Mutex
	byID  map[string]*attempt // guarded by mu
	order []string            // guarded by mu: ids, oldest first; order[head:] are live
	head  int                 // guarded by mu
}

// attempt is what a verdict needs of one attempt.
type attempt struct {
	user    string // who fetched it: only they may judge it
	route   string
	target  string
	gens    engine.Generations // a verdict after the records moved on is evidence only
	sub     gateway.SubExit    // the sub-exit it went through, retired by a content_invalid verdict
	latency time.Duration      // an ok verdict reports it, as the attempt's own report did
	expires time.Time
	verdict engine.Class // the last verdict given; Canceled for none
	// node is the cluster node that ran the attempt, for one forwarded
	// there: its verdict is that node's to take. "" for this node.
	node string
}

func newAttempts(ttl time.Duration, max int) *attempts {
	return &attempts{ttl: ttl, max: max, byID: make(map[string]*attempt)}
}

// add remembers attempt id at now.
func (t *attempts) add(id string, a attempt, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	for len(t.byID) >= t.max {
		t.pop()
	}
	a.expires, a.verdict = now.Add(t.ttl), engine.Canceled
	t.byID[id] = &a
	t.order = append(t.order, id)
}

// judge records verdict c on attempt id by user, at now. It returns the
// attempt, and whether the verdict is new: a verdict given twice is
// reported once. ok is false when the id is unknown, expired or another
// user's.
func (t *attempts) judge(id, user string, c engine.Class, now time.Time) (a attempt, fresh, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	p := t.byID[id]
	if p == nil || p.user != user {
		return attempt{}, false, false
	}
	fresh = p.verdict != c
	p.verdict = c
	return *p, fresh, true
}

// expire forgets the entries expired at now. The caller holds t.mu.
func (t *attempts) expire(now time.Time) {
	for t.head < len(t.order) {
		if a := t.byID[t.order[t.head]]; a != nil && a.expires.After(now) {
			return
		}
		t.pop()
	}
}

// pop forgets the oldest entry, and compacts order once half of it is
// spent. The caller holds t.mu.
func (t *attempts) pop() {
	delete(t.byID, t.order[t.head])
	t.order[t.head] = ""
	t.head++
	if t.head > len(t.order)/2 {
		t.order = append(t.order[:0], t.order[t.head:]...)
		t.head = 0
	}
}

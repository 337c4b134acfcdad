package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Pacing learned from 429s. A site that rate-limits each exit answers 429
// when one gets more than its share; cooling the pair for the Retry-After
// is right, but the traffic it sheds lands on the other exits, which then
// trip their limits too. So the engine also learns a rate per route×target
// from its 429s — PaceStart at the first, halved at each one after, grown
// back slowly while none comes — and passes over a pair that has used its
// rate, as it does a route at max_inflight: the load spreads instead of
// piling up (the rate-limited scenario: 77% → 100% completion). The rates
// are this process's own, not shared through a store.

// targetPace is the pacing learned for one target's pairs. It is allocated
// on the target's first 429: most sites never send one. Picks read the map
// without a lock (copy-on-write): most pairs of even a paced target were
// never limited, and a shared lock would be contended on every draw.
type targetPace struct {
	mu    sync.Mutex                          // serializes writers
	pairs atomic.Pointer[map[int32]*pairPace] // by route slot; only pairs that had a 429
}

// pairPace is a token bucket (burst 1) at a learned rate.
type pairPace struct {
	mu     sync.Mutex
	rate   float64 // guarded by mu: requests/s allowed right after the last 429
	cut    int64   // guarded by mu: when that 429 came, Unix ns
	tokens float64 // guarded by mu
	last   int64   // guarded by mu: when tokens was last refilled
}

// current is the rate allowed at ns: the rate after the last 429, grown by
// PaceGrowth a minute since, capped at PaceMax. Caller holds mu.
func (p *pairPace) current(c *Config, ns int64) float64 {
	minutes := float64(ns-p.cut) / float64(time.Minute)
	return min(p.rate*math.Pow(c.PaceGrowth, max(minutes, 0)), c.PaceMax)
}

// ready refills the bucket to ns and reports whether the pair may take a
// request. Caller holds mu.
func (p *pairPace) ready(c *Config, ns int64) bool {
	if ns > p.last {
		p.tokens = min(1, p.tokens+p.current(c, ns)*float64(ns-p.last)/float64(time.Second))
		p.last = ns
	}
	return p.tokens >= 1
}

// wait is how long after ns the bucket holds a token again. Caller holds
// mu and has refilled it to ns (ready).
func (p *pairPace) wait(c *Config, ns int64) time.Duration {
	if p.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - p.tokens) / p.current(c, ns) * float64(time.Second))
}

// PacedError is ErrPaced with how long until the first of the target's
// routes may take a request again.
type PacedError struct {
	RetryAfter time.Duration
}

func (e *PacedError) Error() string {
	return ErrPaced.Error() + "; one is ready in " + e.RetryAfter.Round(time.Millisecond).String()
}

// Is makes errors.Is(err, ErrPaced) hold.
func (e *PacedError) Is(target error) bool { return target == ErrPaced }

// pair returns route slot's pacing toward the target, or nil.
func (tp *targetPace) pair(slot int32) *pairPace { return (*tp.pairs.Load())[slot] }

// newTargetPace returns an empty targetPace.
func newTargetPace() *targetPace {
	tp := &targetPace{}
	empty := map[int32]*pairPace{}
	tp.pairs.Store(&empty)
	return tp
}

// edit replaces the pairs with a copy changed by fn. Caller holds mu.
func (tp *targetPace) edit(fn func(map[int32]*pairPace)) {
	old := *tp.pairs.Load()
	next := make(map[int32]*pairPace, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	fn(next)
	tp.pairs.Store(&next)
}

// learnPace cuts the rate of route slot toward t after a 429 at ns: to
// PaceStart the first time, by half each time after, down to PaceFloor.
func (e *Engine) learnPace(t *target, slot int32, ns int64) {
	if e.cfg.PaceStart < 0 {
		return
	}
	tp := t.pace.Load()
	if tp == nil {
		t.pace.CompareAndSwap(nil, newTargetPace())
		tp = t.pace.Load()
	}
	p := tp.pair(slot)
	if p == nil {
		tp.mu.Lock()
		if p = tp.pair(slot); p == nil {
			tp.edit(func(m map[int32]*pairPace) { m[slot] = &pairPace{rate: e.cfg.PaceStart, cut: ns, last: ns} })
			tp.mu.Unlock()
			return
		}
		tp.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate = max(p.current(&e.cfg, ns)/2, e.cfg.PaceFloor)
	p.cut, p.tokens, p.last = ns, 0, ns
}

// paceWait is how long route slot must wait before it may take a request
// toward t at ns: 0 when it may now.
func (e *Engine) paceWait(t *target, slot int32, ns int64) time.Duration {
	tp := t.pace.Load()
	if tp == nil {
		return 0
	}
	p := tp.pair(slot)
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready(&e.cfg, ns) {
		return 0
	}
	return max(p.wait(&e.cfg, ns), time.Nanosecond)
}

// takePace spends route slot's token toward t for a lease at ns.
func (e *Engine) takePace(t *target, slot int32, ns int64) {
	tp := t.pace.Load()
	if tp == nil {
		return
	}
	if p := tp.pair(slot); p != nil {
		p.mu.Lock()
		p.ready(&e.cfg, ns)
		p.tokens--
		p.mu.Unlock()
	}
}

// evict forgets the pairs whose rate has grown back to PaceMax, at Sweep's
// eviction pass, so a site's record of exits it once limited does not grow
// for ever.
func (tp *targetPace) evict(c *Config, ns int64) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var grown []int32
	for slot, p := range *tp.pairs.Load() {
		p.mu.Lock()
		if p.current(c, ns) >= c.PaceMax {
			grown = append(grown, slot)
		}
		p.mu.Unlock()
	}
	if len(grown) > 0 {
		tp.edit(func(m map[int32]*pairPace) {
			for _, slot := range grown {
				delete(m, slot)
			}
		})
	}
}

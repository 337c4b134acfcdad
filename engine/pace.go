package engine

import (
	"math"
	"sync"
	"time"
)

// Pacing learned from 429s. A site that rate-limits each
// exit answers 429 when one gets more than its share; cooling the pair for
// the Retry-After is right, but the traffic it sheds lands on the other
// exits, which then trip their limits too. So the engine also learns a
// rate per route×target from its 429s — PaceStart at the first, halved at
// each one after, grown back slowly while none comes — and passes over a
// pair that has used its rate, as it does a route at max_inflight: the load
// spreads instead of piling up.

// targetPace is the pacing learned for one target's pairs. It is allocated
// on the target's first 429: most sites never send one.
type targetPace struct {
	mu    sync.RWMutex
	pairs map[int32]*pairPace // guarded by mu; by route slot; only pairs that had a 429
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

// pair returns route slot's pacing toward the target, or nil.
func (tp *targetPace) pair(slot int32) *pairPace {
	tp.mu.RLock()
	defer tp.mu.RUnlock()
	return tp.pairs[slot]
}

// learnPace cuts the rate of route slot toward t after a 429 at ns: to
// PaceStart the first time, by half each time after, down to PaceFloor.
func (e *Engine) learnPace(t *target, slot int32, ns int64) {
	if e.cfg.PaceStart < 0 {
		return
	}
	tp := t.pace.Load()
	if tp == nil {
		t.pace.CompareAndSwap(nil, &targetPace{pairs: make(map[int32]*pairPace)})
		tp = t.pace.Load()
	}
	p := tp.pair(slot)
	if p == nil {
		tp.mu.Lock()
		if p = tp.pairs[slot]; p == nil {
			p = &pairPace{rate: e.cfg.PaceStart, cut: ns, last: ns}
			tp.pairs[slot] = p
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

// paceReady reports whether route slot may take a request toward t at ns.
func (e *Engine) paceReady(t *target, slot int32, ns int64) bool {
	tp := t.pace.Load()
	if tp == nil {
		return true
	}
	p := tp.pair(slot)
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready(&e.cfg, ns)
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
	for slot, p := range tp.pairs {
		p.mu.Lock()
		grown := p.current(c, ns) >= c.PaceMax
		p.mu.Unlock()
		if grown {
			delete(tp.pairs, slot)
		}
	}
}

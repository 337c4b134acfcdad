package engine

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// latency is route slot's latency estimate at ns, in seconds, as its cost
// reads it.
func (e *Engine) latency(slot int32, ns int64) float64 {
	h, _ := e.store.Read(Key{Route: slot})
	return h.latencyEstimate(e.typical(), &e.cfg, ns)
}

// cost is a route's expected time to a valid answer, in seconds (docs/
// design/005-cost.md): its latency estimate × (in-flight + 1) ÷ its
// success probability^Gamma, both shrunk toward the pool's typical values
// while its own evidence is thin. Only ratios of costs matter, so a route
// with no latency evidence in a pool with none either takes 1.
func (e *Engine) cost(h *Health, inflight int32, ns int64) float64 {
	l := h.latencyEstimate(e.typical(), &e.cfg, ns)
	if l <= 0 {
		l = 1
	}
	return l * float64(1+inflight) / pow(h.selectionScore(&e.cfg, e.typicalScore()), e.cfg.Gamma)
}

// pow is math.Pow, with the whole exponents of the default configuration
// (γ 2, sharpness 6: 2, 6, -6, 12) and of its usual neighbours done by
// multiplication, as it runs on every weight refresh and every draw's
// target factor.
func pow(x, y float64) float64 {
	switch y {
	case 1:
		return x
	case 2:
		return x * x
	case -2:
		return 1 / (x * x)
	case 4:
		x *= x
		return x * x
	case -4:
		x *= x
		return 1 / (x * x)
	case 6:
		x2 := x * x
		return x2 * x2 * x2
	case -6:
		x2 := x * x
		return 1 / (x2 * x2 * x2)
	case 8:
		x *= x
		x *= x
		return x * x
	case 12:
		x2 := x * x
		x6 := x2 * x2 * x2
		return x6 * x6
	}
	return math.Pow(x, y)
}

// typical is the pool's typical latency in seconds, 0 before any sample.
func (e *Engine) typical() float64 { return math.Float64frombits(e.typicalLatency.Load()) }

// typicalScore is the typical success probability of the pool's usable
// routes that have evidence, 0 before Sweep has seen one.
func (e *Engine) typicalScore() float64 { return math.Float64frombits(e.typicalSuccess.Load()) }

// poolSweep is Sweep's rotating pass over the routes. Each Sweep refreshes
// a slice of them, so that the weights of routes without traffic follow
// their latency estimates as they age toward the typical (LatencyForget),
// and measures the pool's typical latency, success and time to an answer
// on them.
type poolSweep struct {
	mu      sync.Mutex  // serializes passes
	next    int32       // guarded by mu: the next route slot to visit
	lat     []float64   // guarded by mu: scratch for the typical latency
	success []float64   // guarded by mu: scratch for the typical success
	ttfb    []LogNormal // guarded by mu: scratch for the typical time to an answer
}

// A pass visits 1/sweepShare of the routes (at least sweepMin), so every
// route is refreshed at least every sweepShare sweeps, and measures the
// typical values on at most typicalSamples of them.
const (
	sweepShare     = 8
	sweepMin       = 64
	typicalSamples = 256
)

// sweepPool runs one pass at ns.
func (e *Engine) sweepPool(ns int64) {
	n := e.routes.len()
	if n == 0 {
		return
	}
	p := &e.sweep
	p.mu.Lock()
	defer p.mu.Unlock()
	count := min(n, max(sweepMin, n/sweepShare))
	step := max(1, count/typicalSamples)
	p.lat, p.success, p.ttfb = p.lat[:0], p.success[:0], p.ttfb[:0]
	for i := int32(0); i < count; i += step {
		// The typical latency is that of routes that can carry traffic:
		// silent exits cut at their deadline are not the pool's pace.
		if h, _ := e.store.Read(Key{Route: (p.next + i) % n}); h.State.Usable() {
			if h.LatencyAt != 0 {
				p.lat = append(p.lat, h.Latency)
			}
			if h.TTFB.Known() {
				p.ttfb = append(p.ttfb, h.TTFB)
			}
			// Success as the routes with evidence of their own show it:
			// shrunk scores would pull the typical toward the prior.
			if float64(h.Samples) >= e.cfg.PriorSamples {
				p.success = append(p.success, h.Success)
			}
		}
	}
	smoothMedian(&e.typicalLatency, p.lat)
	smoothMedian(&e.typicalSuccess, p.success)
	if len(p.ttfb) > 0 {
		slices.SortFunc(p.ttfb, func(a, b LogNormal) int {
			return cmp.Compare(a.Quantile(zP99), b.Quantile(zP99))
		})
		e.typicalTTFB.store(p.ttfb[len(p.ttfb)/2])
	}
	// Refreshed after the typicals are measured, so that a route without
	// evidence of its own is weighed at the pool's typical from the pass
	// that first measured it, not the one after.
	for i := range count {
		e.refresh(e.routes.get((p.next+i)%n), ns)
	}
	p.next = (p.next + count) % n
}

// smoothMedian stores into v (float64 bits) the median of samples, averaged
// with v's old value, since each pass samples another slice of the pool; it
// leaves v alone without samples. It sorts samples.
func smoothMedian(v *atomic.Uint64, samples []float64) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	m := samples[len(samples)/2]
	if old := math.Float64frombits(v.Load()); old > 0 {
		m = (old + m) / 2
	}
	v.Store(math.Float64bits(m))
}

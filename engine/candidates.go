package engine

import (
	"errors"
	"math"
	"time"
)

// Candidates is what a Picker chooses from: the routes matching a request's
// hard constraints, weighted for its target. It lives on the caller's stack
// for one pick.
type Candidates struct {
	e      *Engine
	ns     int64
	t      *target
	labels Labels   // the request's hard constraints
	avoid  []string // the request's routes to avoid
	index  drawIndex
	tier   int  // the cost tier drawn from; -1: every tier
	floor  int  // the lowest cost tier the request takes (TierKey)
	all    bool // draw from fallback weights (panic or fallback)
	// ignorePairs lifts route×target exclusions: the target has too few
	// routes left (target panic) or nothing was eligible.
	ignorePairs bool

	Panic    bool // exclusions lifted because too few routes are eligible
	Fallback bool // nothing was eligible: drawing the least bad
	// Paced is set when a draw passed over a route held to the rate it
	// learned from the target's 429s; PacedWait is the shortest wait of
	// those it passed over, and PacedSlot that route.
	Paced     bool
	PacedWait time.Duration
	PacedSlot int32
}

// errTierExhausted: a cost tier has too few eligible routes to carry a
// target's traffic; the draw climbs to the next tier instead of panicking.
var errTierExhausted = errors.New("engine: tier exhausted")

// candidates prepares c for req, choosing the index of the most selective
// required label (or of the cost tier, when tier > 0) and deciding panic
// mode. A draw from one tier (tier ≥ 0) never panics: errTierExhausted
// sends it to the next tier, and panic is the last draw's, from every tier.
func (e *Engine) candidates(c *Candidates, ns int64, t *target, req *Request, tier, floor int) error {
	*c = Candidates{e: e, ns: ns, t: t, labels: req.Labels, avoid: req.Avoid, index: drawIndex{a: e.pool}, tier: tier, floor: floor}
	best := math.MaxInt
	if tier > 0 {
		// Tier 0 draws from the pool, passing over costlier routes.
		if c.index.a = e.tierIndex(tier, false); c.index.a == nil {
			return ErrNoRoute
		}
		if _, _, best = c.index.counts(); best == 0 {
			return ErrNoRoute // the tier's last route left it
		}
	}
	if len(req.Labels) > 0 {
		for _, l := range req.Labels {
			if l.Key == TierKey {
				continue // not a route's label: floor and tier say it
			}
			// Routes taking any value of the key (AnyValue) match too:
			// the draw is from the union of the two indexes.
			x := drawIndex{a: e.labelIndex(l, false), b: e.labelIndex(Label{Key: l.Key, Value: AnyValue}, false)}
			if x.a == nil {
				x.a, x.b = x.b, nil
			}
			if x.a == nil {
				return ErrNoMatch
			}
			if _, _, n := x.counts(); n < best {
				c.index, best = x, n
			}
		}
	}
	eligible, all, slots := c.index.counts()
	if slots == 0 {
		return ErrNoMatch
	}
	if all == 0 {
		return ErrNoRoute
	}
	// Routes waiting for their first check are not judged yet: they count
	// neither way, unless nothing else is left (a gateway just started).
	// Withheld ones (half-open, ejected) are judged and count against the
	// pool, though panic does not draw them.
	judged := all + c.index.marks(withheld) - c.index.marks(pending)
	if judged <= 0 {
		judged = all
	}
	if p := e.cfg.PanicThreshold; p > 0 {
		switch few := float64(eligible) < p*float64(judged); {
		case few && tier >= 0:
			return errTierExhausted
		case few:
			c.Panic, c.all, c.ignorePairs = true, true, true
		case tier < 0 && float64(eligible-int(t.excluded.Load())) < p*float64(judged):
			// Not within a tier: t.excluded counts the target's pairs of
			// every tier.
			c.Panic, c.ignorePairs = true, true
		}
	}
	return nil
}

// fallback switches c to the least-bad mode: every route that may carry
// traffic, exclusions lifted.
func (c *Candidates) fallback() {
	c.all, c.ignorePairs, c.Fallback = true, true, true
}

// Draw returns a route drawn with probability proportional to its weight
// for this request's target, and that weight. It fails when maxDraws draws
// found nothing acceptable and the pool is too large to scan.
func (c *Candidates) Draw() (slot int32, weight float64, ok bool) {
	for range maxDraws {
		s, w, all, ok := c.index.sample(c.e.rng.Uint64(), c.all)
		if !ok {
			return 0, 0, false
		}
		if c.all {
			w = all
		}
		f, acceptable := c.factor(s)
		if !acceptable {
			continue
		}
		// Rejection sampling (docs/design/003-selection.md): accepting with
		// probability f makes the draw proportional to weight × f without a
		// per-target index. The least-bad fallback accepts every draw and
		// compares w × f instead.
		if !c.Fallback && f < 1 && unitFloat(c.e.rng.Uint64()) >= f {
			continue
		}
		return s, w * f, true
	}
	if c.e.routes.len() <= maxScan {
		return c.scan()
	}
	return 0, 0, false
}

// maxScan is the largest pool whose draw falls back to a scan when
// rejection sampling fails. Failing draws mean the acceptable routes carry
// a tiny share of the weight: in a pool of three, the two fast exits the
// request already tried. A large pool rarely has so few acceptable routes
// left, and scanning it would cost more than the pick is worth.
const maxScan = 1024

// factor is what route slot's weight is multiplied by for this request:
// its target factor, ok false when it may not carry the request at all
// (its labels, avoided, excluded for the target, or paced).
func (c *Candidates) factor(s int32) (f float64, ok bool) {
	if !c.matches(c.e.routes.get(s)) {
		return 0, false
	}
	if f = c.e.targetFactor(s, c.t, c.ignorePairs, c.ns); f <= 0 {
		return 0, false
	}
	// A pair at the rate it learned from 429s stays out even in panic and
	// fallback: sending it more only earns another 429.
	if wait := c.e.paceWait(c.t, s, c.ns); wait > 0 {
		if !c.Paced || wait < c.PacedWait {
			c.Paced, c.PacedWait, c.PacedSlot = true, wait, s
		}
		return 0, false
	}
	return f, true
}

// scan draws by weight × factor over every route in the index: exact, and
// O(pool), for small pools only.
func (c *Candidates) scan() (slot int32, weight float64, ok bool) {
	total := 0.0
	for s := range c.e.routes.len() {
		w, all := c.index.weight(s)
		if c.all {
			w = all
		}
		if w <= 0 {
			continue
		}
		f, acceptable := c.factor(s)
		if !acceptable {
			continue
		}
		// A one-slot weighted reservoir keeps the draw proportional.
		total += w * f
		if unitFloat(c.e.rng.Uint64())*total < w*f {
			slot, weight, ok = s, w*f, true
		}
	}
	return slot, weight, ok
}

// best draws a few routes and keeps the heaviest: the least-bad fallback.
func (c *Candidates) best() (int32, bool) {
	var slot int32
	var bw float64
	found := false
	for range 4 {
		if s, w, ok := c.Draw(); ok && (!found || w > bw) {
			slot, bw, found = s, w, true
		}
	}
	return slot, found
}

// Slot returns the i-th route modulo the number of routes, for blind
// pickers.
func (c *Candidates) Slot(i int) (int32, bool) {
	n := int(c.e.routes.len())
	if n == 0 {
		return 0, false
	}
	return int32(i % n), true
}

// Inflight returns route slot's leases in flight.
func (c *Candidates) Inflight(slot int32) int32 { return c.e.store.Inflight(slot) }

// Allowed reports whether route slot meets the request's hard constraints:
// its labels, not avoided, not drained, not at max_inflight.
func (c *Candidates) Allowed(slot int32) bool {
	r := c.e.routes.get(slot)
	if r == nil || !c.matches(r) {
		return false
	}
	_, all := c.e.pool.weight(slot)
	return all > 0
}

// matches checks labels and avoided routes; weights say the rest. The
// label check stays even though the index already holds only routes with
// the labels: a route that UpdateRoute is moving out of the index must not
// be drawn in the moment before it leaves. Unconstrained requests skip the
// config load.
func (c *Candidates) matches(r *route) bool {
	if len(c.labels) > 0 || c.tier >= 0 {
		rc := r.config.Load()
		if len(c.labels) > 0 && !rc.labels.Matches(c.labels) || c.tier >= 0 && int(rc.tier) != c.tier || int(rc.tier) < c.floor {
			return false
		}
	}
	for _, id := range c.avoid {
		if id == r.id {
			return false
		}
	}
	return true
}

// liftedPairFactor is the least target factor of an excluded pair whose
// exclusion a panic lifted.
const liftedPairFactor = 0.05

// targetFactor is route slot's weight factor for target t: 1 without a
// pair record, 0 while the pair is excluded (unless ignorePairs),
// otherwise its success term^(Gamma·Sharpness) with suspect and slow-start
// terms, and the ratio of the route's latency to the pair's when the pair
// is slower than the route (docs/design/005-cost.md). A pair faster than
// its route gets no bonus: rejection sampling cannot raise a weight.
func (e *Engine) targetFactor(slot int32, t *target, ignorePairs bool, ns int64) float64 {
	h, ok := e.store.Read(Key{Route: slot, Target: t.n})
	if !ok {
		return 1
	}
	f := pow(h.targetFactor(&e.cfg), e.cfg.Gamma*e.cfg.Sharpness) * h.slowStart(&e.cfg, ns)
	if h.LatencyAt != 0 {
		g, _ := e.store.Read(Key{Route: slot})
		route := g.latencyEstimate(e.typical(), &e.cfg, ns)
		// The pair's own estimate ages toward its route's, not the pool's.
		if pair := h.latencyEstimate(route, &e.cfg, ns); pair > route && route > 0 {
			f *= pow(route/pair, e.cfg.Sharpness)
		}
	}
	switch {
	case !h.State.Usable():
		if !ignorePairs || h.State == Cooling && h.Cause == RateLimited {
			// A site's Retry-After is not a verdict that panic may doubt:
			// sending before it ends only earns another 429.
			return 0
		}
		// Lifted exclusions still rank below usable pairs, but not so far
		// below that rejection sampling could never accept them.
		f = max(f*e.cfg.SuspectWeight, liftedPairFactor)
	case h.State == Suspect:
		f *= e.cfg.SuspectWeight
	}
	return f
}

// drawIndex is the weight index a draw picks from, or the union of two
// that share no route: a label value's and its key's AnyValue routes'.
type drawIndex struct{ a, b *weightIndex } // b nil: a alone

func (d drawIndex) counts() (eligible, all, slots int) {
	eligible, all, slots = d.a.counts()
	if d.b != nil {
		e, a, s := d.b.counts()
		eligible, all, slots = eligible+e, all+a, slots+s
	}
	return eligible, all, slots
}

func (d drawIndex) marks(m mark) int {
	if d.b == nil {
		return d.a.marks(m)
	}
	return d.a.marks(m) + d.b.marks(m)
}

// sample draws from a or b in proportion to their totals, then in it as
// weightIndex.sample does, from the same random bits: the point r gives in
// the union's span, rescaled to the index it falls in.
func (d drawIndex) sample(r uint64, all bool) (slot int32, w, wAll float64, ok bool) {
	if d.b == nil {
		return d.a.sample(r, all)
	}
	ta, tb := d.a.total(all), d.b.total(all)
	if ta+tb == 0 {
		return -1, 0, 0, false
	}
	x, u := d.a, float64(r>>11)*0x1p-53*(ta+tb)
	if u >= ta {
		x, u, ta = d.b, u-ta, tb
	}
	return x.sample(uint64(min(u/ta, 1-0x1p-53)*0x1p53)<<11, all)
}

func (d drawIndex) weight(slot int32) (w, all float64) {
	if w, all = d.a.weight(slot); d.b != nil && w == 0 && all == 0 {
		return d.b.weight(slot)
	}
	return w, all
}

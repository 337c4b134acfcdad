package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// oracleDraws bounds the random draws that look for a usable route in a
// group before the group is scanned.
const oracleDraws = 16

var (
	_ Policy      = (*oracle)(nil)
	_ retryHinter = (*oracle)(nil)
	_ retrier     = (*oracle)(nil)
)

// oracle is the bound on what routing can achieve: it reads the world's
// ground truth.
type oracle struct {
	// Immutable after construction.
	world World
	truth groundTruth
	start time.Time // the run's start: World times are offsets from it

	// learns makes it the learning oracle (NewLearningOracle): a site's
	// limits are hidden from it until that site first pushes back.
	learns bool

	// Owner goroutine only.
	rng      *rand.Rand
	inflight []int32       // by route: attempts picked and not yet reported
	limited  []bool        // by target, when learns: a 429 or a ban came from it
	tiers    []tier        // scratch: the groups by expected time
	retryIn  time.Duration // after a Pick that offered nothing: when a route is ready
}

// tier is one group with the expected time to a valid answer through it.
type tier struct {
	group int
	cost  float64 // median latency ÷ chance of a valid answer, in seconds
}

// NewOracle returns the policy that knows ground truth: each attempt goes
// to the route with the least expected time to a valid answer now — the
// fastest of the routes that will succeed, by their median latency over
// their chance of success — among those not avoided, under their
// max_inflight and not about to trip a site's rate limit or burst ban,
// equally good ones drawn at random. When every such route must wait for
// a limit, it offers none and says when one is ready, as a gateway that
// paces does. When no route can succeed it picks uniformly among those not
// avoided. It is the bound the throughput ratio divides by; w must
// implement groundTruth (scenario worlds do). start is the run's start, to
// turn now into the World's offsets.
func NewOracle(w World, start time.Time, seed uint64) Policy {
	return &oracle{
		world:    w,
		truth:    w.(groundTruth),
		start:    start,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		inflight: make([]int32, w.Routes()),
	}
}

// NewLearningOracle returns the oracle with one thing hidden: a site's
// rate limits and ban tolerance, until that site first answers an attempt
// with a 429 or a ban. Until then it sends as though the site had none;
// from then on it knows them exactly. No policy that must learn a site's
// limits from its answers knows them sooner, and none learns them better,
// so it is the reference for a cold start against sites that limit: what
// the first push-back costs even when everything is known from then on.
// Not a bound: a learner may spread its first requests more thinly than
// the fastest routes with room, and so be pushed back later.
func NewLearningOracle(w World, start time.Time, seed uint64) Policy {
	o := NewOracle(w, start, seed).(*oracle)
	o.learns = true
	o.limited = make([]bool, w.Targets())
	return o
}

// Pick implements Policy. The ticket is the route and the target (take).
func (o *oracle) Pick(now time.Time, target int, _ string, avoid []int) (Attempt, bool) {
	o.retryIn = 0
	if o.world.Routes() == 0 {
		return Attempt{}, false
	}
	at := now.Sub(o.start)
	o.tiers = o.tiers[:0]
	for g := range o.truth.Groups() {
		if lat, p := o.truth.Expect(g, target, at); p > 0 {
			o.tiers = append(o.tiers, tier{group: g, cost: lat.Seconds() / p})
		}
	}
	slices.SortStableFunc(o.tiers, func(a, b tier) int {
		switch {
		case a.cost < b.cost:
			return -1
		case a.cost > b.cost:
			return 1
		}
		return 0
	})
	wait := time.Duration(0)
	for len(o.tiers) > 0 {
		// Groups as good as each other share the load by their size.
		n := 1
		for n < len(o.tiers) && o.tiers[n].cost <= o.tiers[0].cost*(1+1e-9) {
			n++
		}
		i := o.drawGroup(o.tiers[:n])
		route, w, ok := o.find(o.tiers[i].group, target, at, avoid)
		if ok {
			return o.take(route, target), true
		}
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
		o.tiers = slices.Delete(o.tiers, i, i+1)
	}
	if wait > 0 {
		o.retryIn = wait
		return Attempt{}, false
	}
	// Nothing can succeed: any route not avoided is as bad as another.
	n := o.world.Routes()
	start := o.rng.IntN(n)
	for i := range n {
		if route := (start + i) % n; !slices.Contains(avoid, route) {
			return o.take(route, target), true
		}
	}
	return Attempt{}, false
}

// drawGroup returns the index in tiers of a group drawn by its size.
func (o *oracle) drawGroup(tiers []tier) int {
	total := 0
	for _, t := range tiers {
		_, count, _ := o.truth.Group(t.group)
		total += count
	}
	x := o.rng.IntN(total)
	for i, t := range tiers {
		_, count, _ := o.truth.Group(t.group)
		if x < count {
			return i
		}
		x -= count
	}
	return len(tiers) - 1
}

// find returns a route of group g that may take a request to target now:
// not avoided, under its max_inflight, no limit to wait for. Otherwise wait
// is the shortest wait for a limit among the routes it saw, 0 if none.
func (o *oracle) find(g, target int, at time.Duration, avoid []int) (route int, wait time.Duration, ok bool) {
	first, count, limit := o.truth.Group(g)
	usable := func(r int) bool {
		if slices.Contains(avoid, r) || limit > 0 && int(o.inflight[r]) >= limit {
			return false
		}
		if o.knowsLimits(target) {
			if w := o.truth.Wait(r, target, at); w > 0 {
				if wait == 0 || w < wait {
					wait = w
				}
				return false
			}
		}
		return true
	}
	for range oracleDraws {
		if r := first + o.rng.IntN(count); usable(r) {
			return r, 0, true
		}
	}
	// A scan from a random start, so no route is favoured.
	start := o.rng.IntN(count)
	for i := range count {
		if r := first + (start+i)%count; usable(r) {
			return r, 0, true
		}
	}
	return 0, wait, false
}

// take leases route for an attempt to target. The ticket holds both.
func (o *oracle) take(route, target int) Attempt {
	o.inflight[route]++
	return Attempt{Route: route, Ticket: uint64(target)<<32 | uint64(route)}
}

// knowsLimits reports whether the oracle reads target's limits.
func (o *oracle) knowsLimits(target int) bool { return !o.learns || o.limited[target] }

// Report implements Policy: the oracle counts the attempts in flight, and
// the learning oracle learns which sites have pushed back.
func (o *oracle) Report(_ time.Time, ticket uint64, r Result) {
	o.inflight[uint32(ticket)]--
	if o.learns && (r.Class == engine.RateLimited || r.Class == engine.Blocked) {
		o.limited[ticket>>32] = true
	}
}

// Tick implements Policy. It does nothing.
func (o *oracle) Tick(time.Time, Prober) {}

// RetryIn implements retryHinter.
func (o *oracle) RetryIn() time.Duration { return o.retryIn }

// Request implements retrier.
func (o *oracle) Request(time.Time) {}

// Retry implements retrier: another route is tried when one can succeed,
// never into a site that is down for all.
func (o *oracle) Retry(now time.Time, target int, _ engine.Class) bool {
	at := now.Sub(o.start)
	for g := range o.truth.Groups() {
		if _, p := o.truth.Expect(g, target, at); p > 0 {
			return true
		}
	}
	return false
}

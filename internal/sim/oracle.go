package sim

import (
	"math/rand/v2"
	"slices"
	"time"
)

// oracleDraws bounds the rejection sampling of one pick before it falls
// back to a scan of the pool.
const oracleDraws = 64

var _ Policy = (*oracle)(nil)

// oracle is the upper bound: it reads the world's ground truth.
type oracle struct {
	// Immutable after construction.
	world World
	start time.Time // the run's start: World times are offsets from it

	// Owner goroutine only.
	rng *rand.Rand
}

// NewOracle returns the policy that knows ground truth: it picks uniformly
// among the routes not Bad for the target at now and not in avoid, so it
// never wastes an attempt that could have been avoided. It is an upper
// bound on completion, not on latency: it ignores how fast the good routes
// are. When no route is good it picks uniformly among those not avoided.
// start is the run's start, to turn now into the World's offsets.
func NewOracle(w World, start time.Time, seed uint64) Policy {
	return &oracle{
		world: w,
		start: start,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Pick implements Policy. The ticket is always 0: the oracle learns nothing.
func (o *oracle) Pick(now time.Time, target int, _ string, avoid []int) (int, uint64, bool) {
	if o.world.Routes() == 0 {
		return 0, 0, false
	}
	at := now.Sub(o.start)
	if route, ok := o.draw(target, at, avoid, true); ok {
		return route, 0, true
	}
	route, ok := o.draw(target, at, avoid, false)
	return route, 0, ok
}

// draw returns a uniform route among those not in avoid and, if good, not
// Bad for target at at. Rejection sampling finds one cheaply when they are
// common; a scan with a one-slot reservoir finds one when they are rare.
func (o *oracle) draw(target int, at time.Duration, avoid []int, good bool) (int, bool) {
	n := o.world.Routes()
	eligible := func(route int) bool {
		return !slices.Contains(avoid, route) && !(good && o.world.Bad(route, target, at))
	}
	for range oracleDraws {
		if route := o.rng.IntN(n); eligible(route) {
			return route, true
		}
	}
	chosen, seen := 0, 0
	for route := range n {
		if eligible(route) {
			seen++
			if o.rng.IntN(seen) == 0 {
				chosen = route
			}
		}
	}
	return chosen, seen > 0
}

// Report implements Policy. It does nothing: the oracle needs no feedback.
func (o *oracle) Report(time.Time, uint64, Result) {}

// Tick implements Policy. It does nothing.
func (o *oracle) Tick(time.Time, func(route, target int) Result) {}

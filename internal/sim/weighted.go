package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// weightedDraws bounds the rejection of avoided routes in one pick before
// it falls back to a scan of the pool.
const weightedDraws = 64

var _ Policy = (*weighted)(nil)

// weighted is the static weighted-random baseline.
type weighted struct {
	// Immutable after construction.
	weights    []float64
	cumulative []float64 // cumulative[i] = weights[0] + … + weights[i]

	// Owner goroutine only.
	rng *rand.Rand
}

// NewWeighted returns the "weighted" baseline: a user's fixed weights per
// route (by provider price, say), drawn at random and blind to outcomes.
// weights has one entry per route; nil means all 1. It panics on a length
// mismatch or a weight that is negative, NaN or infinite: scenarios
// validate weights before they get here.
func NewWeighted(w World, weights []float64, seed uint64) Policy {
	routes := w.Routes()
	if weights == nil {
		weights = make([]float64, routes)
		for i := range weights {
			weights[i] = 1
		}
	}
	if len(weights) != routes {
		panic(fmt.Sprintf("sim: %d weights for %d routes", len(weights), routes))
	}
	p := &weighted{
		weights:    slices.Clone(weights),
		cumulative: make([]float64, routes),
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	sum := 0.0
	for i, wt := range p.weights {
		if wt < 0 || math.IsNaN(wt) || math.IsInf(wt, 0) {
			panic(fmt.Sprintf("sim: weight %v for route %d", wt, i))
		}
		sum += wt
		p.cumulative[i] = sum
	}
	return p
}

// Pick implements Policy. ok is false when every route not in avoid has
// weight 0. The ticket is always 0: the policy learns nothing.
func (p *weighted) Pick(_ time.Time, _ int, _ string, avoid []int) (Attempt, bool) {
	n := len(p.cumulative)
	if n == 0 || p.cumulative[n-1] == 0 {
		return Attempt{}, false
	}
	total := p.cumulative[n-1]
	for range weightedDraws {
		u := p.rng.Float64() * total
		// The first strictly greater sum: a zero-weight route is never hit.
		route := sort.Search(n, func(i int) bool { return p.cumulative[i] > u })
		// route == n only when rounding made u reach total.
		if route < n && !slices.Contains(avoid, route) {
			return Attempt{Route: route}, true
		}
	}
	return p.scan(avoid)
}

// scan draws by weight among the routes not in avoid, for picks whose
// rejection sampling kept hitting avoided routes (heavy ones, or most of a
// small pool).
func (p *weighted) scan(avoid []int) (Attempt, bool) {
	total := 0.0
	for route, wt := range p.weights {
		if wt > 0 && !slices.Contains(avoid, route) {
			total += wt
		}
	}
	if total == 0 {
		return Attempt{}, false
	}
	u := p.rng.Float64() * total
	last := 0
	for route, wt := range p.weights {
		if wt == 0 || slices.Contains(avoid, route) {
			continue
		}
		if u < wt {
			return Attempt{Route: route}, true
		}
		u -= wt
		last = route
	}
	// Rounding left u at or past the last eligible weight.
	return Attempt{Route: last}, true
}

// Report implements Policy. It does nothing: the policy is blind to
// outcomes.
func (p *weighted) Report(time.Time, uint64, Result) {}

// Tick implements Policy. It does nothing.
func (p *weighted) Tick(time.Time, Prober) {}

package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// policyWorld is a small ground truth for policy tests: route r always fails
// target r%3 (routes with r%3 == 2 are good on both targets), and an outage
// takes outageTarget down for every route during [outageStart, outageEnd).
type policyWorld struct {
	routes                 int
	outageTarget           int
	outageStart, outageEnd time.Duration
}

func (w policyWorld) Routes() int                  { return w.routes }
func (w policyWorld) Targets() int                 { return 2 }
func (w policyWorld) RouteID(route int) string     { return "r" + strconv.Itoa(route) }
func (w policyWorld) TargetName(target int) string { return "t" + strconv.Itoa(target) }
func (w policyWorld) Faults() []Fault              { return nil }

func (w policyWorld) Bad(route, target int, at time.Duration) bool {
	if target == w.outageTarget && at >= w.outageStart && at < w.outageEnd {
		return true
	}
	return route%3 == target
}

// Check implements World: every exit accepts connections.
func (w policyWorld) Check(int, time.Duration) Result {
	return Result{Class: engine.OK, Latency: time.Millisecond}
}

// The ground truth the oracle reads: every route is a group of its own.
func (w policyWorld) Groups() int                                { return w.routes }
func (w policyWorld) Group(g int) (first, count, limit int)      { return g, 1, 0 }
func (w policyWorld) Wait(int, int, time.Duration) time.Duration { return 0 }
func (w policyWorld) Expect(g, target int, at time.Duration) (time.Duration, float64) {
	if w.Bad(g, target, at) {
		return 0, 0
	}
	return 200 * time.Millisecond, 0.95
}

// Attempt fails Bad pairs always and good ones 5% of the time.
func (w policyWorld) Attempt(route, target int, at time.Duration, rng *rand.Rand) Result {
	switch {
	case w.Bad(route, target, at):
		return Result{Class: engine.Blocked, Latency: 50 * time.Millisecond}
	case rng.Float64() < 0.05:
		return Result{Class: engine.TargetTimeout, Latency: time.Second}
	}
	return Result{Class: engine.OK, Latency: 200 * time.Millisecond}
}

var policyStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// drivePolicy runs picks attempts 100 ms apart, alternating between the two
// targets, reports each result, and returns the routes picked per target.
func drivePolicy(t *testing.T, p Policy, w World, picks int, avoid []int, seed uint64) [2][]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var picked [2][]int
	for i := range picks {
		now := policyStart.Add(time.Duration(i) * 100 * time.Millisecond)
		target := i % 2
		pick, ok := p.Pick(now, target, "", avoid)
		route, ticket := pick.Route, pick.Ticket
		if !ok {
			t.Fatalf("pick %d: no route", i)
		}
		picked[target] = append(picked[target], route)
		p.Report(now, ticket, w.Attempt(route, target, now.Sub(policyStart), rng))
	}
	return picked
}

func TestPairEvidenceDecay(t *testing.T) {
	t.Parallel()
	type outcome struct {
		at      time.Duration
		success bool
	}
	tests := []struct {
		desc     string
		outcomes []outcome
		read     time.Duration
	}{
		{
			desc:     "successes in order",
			outcomes: []outcome{{0, true}, {10 * time.Second, true}, {time.Hour, true}, {2 * time.Hour, true}, {3 * time.Hour, true}},
			read:     5 * time.Hour,
		},
		{
			desc:     "mixed outcomes",
			outcomes: []outcome{{time.Second, false}, {time.Minute, true}, {time.Minute, false}, {90 * time.Minute, true}, {4 * time.Hour, false}},
			read:     4*time.Hour + 30*time.Second,
		},
		{
			desc:     "late reports",
			outcomes: []outcome{{time.Hour, true}, {10 * time.Minute, false}, {2 * time.Hour, false}, {30 * time.Minute, true}},
			read:     3 * time.Hour,
		},
		{
			desc:     "read at the last outcome",
			outcomes: []outcome{{time.Second, true}, {2 * time.Second, false}},
			read:     2 * time.Second,
		},
		{
			desc:     "read after a day",
			outcomes: []outcome{{0, true}, {time.Minute, false}, {2 * time.Minute, true}},
			read:     24 * time.Hour,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var e pairEvidence
			var wantAlpha, wantBeta float64
			for _, o := range tt.outcomes {
				e.record(o.at, o.success)
				age := (tt.read - o.at).Seconds()
				if o.success {
					wantAlpha += math.Exp(-0.0002 * age)
				} else {
					wantBeta += 1.5 * math.Exp(-0.0003*age)
				}
			}
			alpha, beta := e.evidence(tt.read)
			if math.Abs(alpha-wantAlpha) > 1e-9 || math.Abs(beta-wantBeta) > 1e-9 {
				t.Errorf("evidence(%v) = (%.12f, %.12f), want (%.12f, %.12f)", tt.read, alpha, beta, wantAlpha, wantBeta)
			}
			if want := min(len(tt.outcomes), proxyOpsMinSamples); int(e.samples) != want {
				t.Errorf("samples = %d, want %d", e.samples, want)
			}
		})
	}
}

func TestProxyOpsPrior(t *testing.T) {
	t.Parallel()
	// Route 0 gets k results on target 0, route 1 none; then both compete.
	// P(Beta(a,1) draw > Beta(b,1) draw) = a/(a+b), so two prior pairs split
	// evenly and 3 successes (Beta(4, 1)) win 4/14 against the prior.
	tests := []struct {
		desc  string
		class engine.Class
		k     int
		want  float64 // share of picks going to route 0
	}{
		{"no evidence", engine.OK, 0, 0.5},
		{"2 failures keep the prior", engine.Blocked, 2, 0.5},
		{"3 failures leave the prior", engine.Blocked, 3, 0},
		{"5 timeouts are failures", engine.TargetTimeout, 5, 0},
		{"3 successes leave the prior", engine.OK, 3, 4.0 / 14},
		{"client errors are no evidence", engine.ClientError, 3, 0.5},
		{"cancels are no evidence", engine.Canceled, 5, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewProxyOps(policyWorld{routes: 2}, 7)
			for range tt.k {
				pick, _ := p.Pick(policyStart, 0, "", []int{1})
				ticket := pick.Ticket
				p.Report(policyStart, ticket, Result{Class: tt.class})
			}
			const n = 4000
			hits := 0
			for range n {
				pick, _ := p.Pick(policyStart, 0, "", nil)
				route, ticket := pick.Route, pick.Ticket
				if route == 0 {
					hits++
				}
				p.Report(policyStart, ticket, Result{Class: engine.Canceled})
			}
			// Five binomial standard deviations, plus slack for shares near 0.
			tol := 5*math.Sqrt(tt.want*(1-tt.want)/n) + 0.005
			if got := float64(hits) / n; math.Abs(got-tt.want) > tol {
				t.Errorf("route 0 share = %.4f, want %.4f ± %.4f", got, tt.want, tol)
			}
		})
	}
}

func TestProxyOpsConverges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		routes int
		seed   uint64
	}{
		{"3 routes", 3, 1},
		{"9 routes", 9, 2},
		{"10 routes", 10, 3},
		{"10 routes, other seed", 10, 4},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w := policyWorld{routes: tt.routes}
			picked := drivePolicy(t, NewProxyOps(w, tt.seed), w, 4000, nil, tt.seed)
			for target, routes := range picked {
				if share := goodShare(w, target, routes[len(routes)-500:]); share <= 0.9 {
					t.Errorf("target %d: good share of the last 500 picks = %.3f, want > 0.9", target, share)
				}
			}
		})
	}
}

// goodShare returns the share of routes that are good for target outside
// any outage.
func goodShare(w policyWorld, target int, routes []int) float64 {
	good := 0
	for _, r := range routes {
		if !w.Bad(r, target, 0) {
			good++
		}
	}
	return float64(good) / float64(len(routes))
}

func TestProxyOpsCandidateCap(t *testing.T) {
	t.Parallel()
	w := policyWorld{routes: 2000}
	avoid := []int{2, 5, 1999}
	p := NewProxyOps(w, 11)
	picked := drivePolicy(t, p, w, 20000, avoid, 11)

	seen := make(map[int]bool)
	for _, routes := range picked {
		for _, r := range routes {
			if slices.Contains(avoid, r) {
				t.Fatalf("picked avoided route %d", r)
			}
			seen[r] = true
		}
	}
	// The sample is redrawn per pick, so picks are not confined to any
	// fixed proxyOpsMaxCandidates routes.
	if len(seen) <= proxyOpsMaxCandidates {
		t.Errorf("picked %d distinct routes, want > %d", len(seen), proxyOpsMaxCandidates)
	}
	order := slices.Clone(p.(*proxyOps).order)
	slices.Sort(order)
	for i, r := range order {
		if int(r) != i {
			t.Fatalf("candidate order is no longer a permutation: sorted[%d] = %d", i, r)
		}
	}
	for target, routes := range picked {
		if share := goodShare(w, target, routes[len(routes)-500:]); share <= 0.9 {
			t.Errorf("target %d: good share of the last 500 picks = %.3f, want > 0.9", target, share)
		}
	}
}

func TestProxyOpsTickets(t *testing.T) {
	t.Parallel()
	p := NewProxyOps(policyWorld{routes: 3}, 1)
	a, _ := p.Pick(policyStart, 0, "", nil)
	b, _ := p.Pick(policyStart, 0, "", nil)
	first, second := a.Ticket, b.Ticket
	if first == second {
		t.Fatalf("two attempts in flight share ticket %d", first)
	}
	p.Report(policyStart, first, Result{Class: engine.OK})
	p.Report(policyStart, first, Result{Class: engine.OK}) // a duplicate: ignored
	p.Report(policyStart, 99, Result{Class: engine.OK})    // never issued: ignored
	if free := p.(*proxyOps).free; len(free) != 1 {
		t.Fatalf("free list = %v, want one ticket", free)
	}
	if pick, _ := p.Pick(policyStart, 0, "", nil); pick.Ticket != first {
		t.Errorf("ticket %d not recycled: got %d", first, pick.Ticket)
	}
}

func TestPoliciesDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		routes int
		policy func(w World, seed uint64) Policy
	}{
		{"proxyops", 9, NewProxyOps},
		{"proxyops, capped", 2000, NewProxyOps},
		{"oracle", 9, func(w World, seed uint64) Policy { return NewOracle(w, policyStart, seed) }},
		{"weighted", 9, func(w World, seed uint64) Policy { return NewWeighted(w, nil, seed) }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w := policyWorld{routes: tt.routes}
			run := func(seed uint64) [2][]int { return drivePolicy(t, tt.policy(w, seed), w, 1000, []int{0}, 5) }
			first, again, other := run(42), run(42), run(43)
			if !slices.Equal(first[0], again[0]) || !slices.Equal(first[1], again[1]) {
				t.Errorf("same seed, different picks")
			}
			if slices.Equal(first[0], other[0]) && slices.Equal(first[1], other[1]) {
				t.Errorf("different seeds, same picks")
			}
		})
	}
}

// TestPoliciesNoAllocs is not parallel: AllocsPerRun counts every
// goroutine's allocations.
func TestPoliciesNoAllocs(t *testing.T) {
	tests := []struct {
		desc   string
		routes int
		policy func(w World) Policy
	}{
		{"proxyops", 9, func(w World) Policy { return NewProxyOps(w, 1) }},
		{"proxyops, capped", 2000, func(w World) Policy { return NewProxyOps(w, 1) }},
		{"oracle", 9, func(w World) Policy { return NewOracle(w, policyStart, 1) }},
		{"oracle, scan", 2000, func(w World) Policy { return NewOracle(w, policyStart, 1) }},
		{"weighted", 9, func(w World) Policy { return NewWeighted(w, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			w := policyWorld{routes: tt.routes, outageTarget: 1, outageEnd: time.Hour}
			p := tt.policy(w)
			rng := rand.New(rand.NewPCG(1, 2))
			avoid := []int{1, 2}
			now, target := policyStart, 0
			step := func() {
				pick, ok := p.Pick(now, target, "", avoid)
				route, ticket := pick.Route, pick.Ticket
				if !ok {
					t.Fatal("no route")
				}
				p.Report(now, ticket, w.Attempt(route, target, now.Sub(policyStart), rng))
				now, target = now.Add(time.Millisecond), 1-target
			}
			for range 100 { // past the first allocations of in-flight slots
				step()
			}
			if allocs := testing.AllocsPerRun(500, step); allocs != 0 {
				t.Errorf("%v allocations per Pick+Report, want 0", allocs)
			}
		})
	}
}

func TestSampleBeta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		a, b float64
	}{
		{"prior", 10, 1},
		{"uniform", 1, 1},
		{"arcsine", 0.5, 0.5},
		{"small a", 0.3, 2},
		{"small b", 3, 0.7},
		{"concentrated", 50, 5},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(3, 4))
			const n = 200000
			var sum, sumSq float64
			for range n {
				x := sampleBeta(rng, tt.a, tt.b)
				if !(x >= 0 && x <= 1) {
					t.Fatalf("draw %v outside [0, 1]", x)
				}
				sum += x
				sumSq += x * x
			}
			ab := tt.a + tt.b
			wantMean := tt.a / ab
			wantVar := tt.a * tt.b / (ab * ab * (ab + 1))
			mean := sum / n
			variance := sumSq/n - mean*mean
			// Five standard errors. On [0, 1], (x−μ)⁴ ≤ (x−μ)², so the
			// sample variance's standard error is at most √(σ²/n).
			if tol := 5 * math.Sqrt(wantVar/n); math.Abs(mean-wantMean) > tol {
				t.Errorf("mean = %.5f, want %.5f ± %.5f", mean, wantMean, tol)
			}
			if tol := 5 * math.Sqrt(wantVar/n); math.Abs(variance-wantVar) > tol {
				t.Errorf("variance = %.5f, want %.5f ± %.5f", variance, wantVar, tol)
			}
		})
	}
}

// allGoodExcept returns the routes of w good for target, except keep.
func allGoodExcept(w policyWorld, target, keep int) []int {
	var avoid []int
	for r := range w.routes {
		if r != keep && !w.Bad(r, target, 0) {
			avoid = append(avoid, r)
		}
	}
	return avoid
}

func TestOracle(t *testing.T) {
	t.Parallel()
	small := policyWorld{routes: 9, outageTarget: 0, outageStart: 10 * time.Second, outageEnd: 20 * time.Second}
	large := policyWorld{routes: 1000}
	tests := []struct {
		desc   string
		world  policyWorld
		target int
		at     time.Duration
		avoid  []int
		want   []int // the routes the oracle may pick, each at least once in 500 picks; none: ok false
	}{
		{desc: "good routes only", world: small, target: 0, want: []int{1, 2, 4, 5, 7, 8}},
		{desc: "other target", world: small, target: 1, want: []int{0, 2, 3, 5, 6, 8}},
		{desc: "avoid honoured", world: small, target: 0, avoid: []int{1, 2, 4, 5}, want: []int{7, 8}},
		{desc: "all good avoided", world: small, target: 0, avoid: []int{1, 2, 4, 5, 7, 8}, want: []int{0, 3, 6}},
		{desc: "outage: all bad", world: small, target: 0, at: 15 * time.Second, avoid: []int{0, 1}, want: []int{2, 3, 4, 5, 6, 7, 8}},
		{desc: "after the outage", world: small, target: 0, at: 20 * time.Second, want: []int{1, 2, 4, 5, 7, 8}},
		{desc: "outage on the other target", world: small, target: 1, at: 15 * time.Second, want: []int{0, 2, 3, 5, 6, 8}},
		{desc: "one good route in 1,000 (scan)", world: large, target: 0, avoid: allGoodExcept(large, 0, 500), want: []int{500}},
		{desc: "everything avoided", world: small, target: 0, avoid: []int{0, 1, 2, 3, 4, 5, 6, 7, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewOracle(tt.world, policyStart, 9)
			seen := make(map[int]bool)
			for range 500 {
				pick, ok := p.Pick(policyStart.Add(tt.at), tt.target, "", tt.avoid)
				route := pick.Route
				if ok != (len(tt.want) > 0) {
					t.Fatalf("ok = %v, want %v", ok, !ok)
				}
				if !ok {
					return
				}
				if !slices.Contains(tt.want, route) {
					t.Fatalf("picked route %d, want one of %v", route, tt.want)
				}
				seen[route] = true
			}
			for _, r := range tt.want {
				if !seen[r] {
					t.Errorf("route %d never picked in 500 picks", r)
				}
			}
		})
	}
}

// limitedWorld is policyWorld with a rate limit that every route must
// wait for at target 0, and none at target 1.
type limitedWorld struct{ policyWorld }

func (limitedWorld) Wait(_, target int, _ time.Duration) time.Duration {
	if target == 0 {
		return 300 * time.Millisecond
	}
	return 0
}

// TestLearningOracle: the learning oracle sends to a site as though it had
// no limits until the site answers a 429 or a ban, then waits for them as
// the oracle does; other answers, and other sites' push-back, teach it
// nothing of the site.
func TestLearningOracle(t *testing.T) {
	t.Parallel()
	w := limitedWorld{policyWorld{routes: 9}}
	tests := []struct {
		desc    string
		answers []Result // reported, in turn, for attempts at target answered
		// answered is the target of those attempts.
		answered int
		wantWait bool // a pick at target 0 then offers nothing and says when
	}{
		{desc: "nothing heard", wantWait: false},
		{desc: "ok and timeouts teach nothing", answers: []Result{{Class: engine.OK}, {Class: engine.TargetTimeout}, {Class: engine.Target5xx}}, wantWait: false},
		{desc: "a 429", answers: []Result{{Class: engine.OK}, {Class: engine.RateLimited, RetryAfter: time.Second}}, wantWait: true},
		{desc: "a ban", answers: []Result{{Class: engine.Blocked}}, wantWait: true},
		{desc: "another site's 429", answers: []Result{{Class: engine.RateLimited}}, answered: 1, wantWait: false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewLearningOracle(w, policyStart, 3)
			for _, r := range tt.answers {
				a, ok := p.Pick(policyStart, tt.answered, "", nil)
				if !ok {
					t.Fatalf("no route for target %d before its limits are known", tt.answered)
				}
				p.Report(policyStart, a.Ticket, r)
			}
			a, ok := p.Pick(policyStart, 0, "", nil)
			if ok == tt.wantWait {
				t.Fatalf("pick at the limited site: ok = %v, want %v", ok, !tt.wantWait)
			}
			if ok && w.Bad(a.Route, 0, 0) {
				t.Errorf("picked route %d, which fails the site", a.Route)
			}
			if got := p.(retryHinter).RetryIn(); tt.wantWait && got != 300*time.Millisecond {
				t.Errorf("RetryIn %v, want the limit's 300ms", got)
			}
			if _, ok := p.Pick(policyStart, 1, "", nil); !ok {
				t.Error("no route for the site without limits")
			}
		})
	}
	// The oracle itself waits from the start.
	if _, ok := NewOracle(w, policyStart, 3).Pick(policyStart, 0, "", nil); ok {
		t.Error("the oracle sent into the limit")
	}
}

func TestWeighted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		routes  int
		weights []float64
		avoid   []int
		want    []float64 // pick probability per route; nil: ok false
	}{
		{desc: "nil weights: uniform", routes: 5, want: []float64{0.2, 0.2, 0.2, 0.2, 0.2}},
		{desc: "weights", routes: 5, weights: []float64{1, 2, 3, 0, 4}, want: []float64{0.1, 0.2, 0.3, 0, 0.4}},
		{desc: "avoid renormalises", routes: 5, weights: []float64{1, 2, 3, 0, 4}, avoid: []int{4}, want: []float64{1.0 / 6, 2.0 / 6, 3.0 / 6, 0, 0}},
		{desc: "heavy route avoided (scan)", routes: 3, weights: []float64{1000, 1, 1}, avoid: []int{0}, want: []float64{0, 0.5, 0.5}},
		{desc: "only zero weights left", routes: 2, weights: []float64{0, 1}, avoid: []int{1}},
		{desc: "all weights zero", routes: 2, weights: []float64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewWeighted(policyWorld{routes: tt.routes}, tt.weights, 21)
			const n = 100000
			counts := make([]int, tt.routes)
			for range n {
				pick, ok := p.Pick(policyStart, 0, "", tt.avoid)
				route := pick.Route
				if ok != (tt.want != nil) {
					t.Fatalf("ok = %v, want %v", ok, !ok)
				}
				if !ok {
					return
				}
				counts[route]++
			}
			for r, want := range tt.want {
				got := float64(counts[r]) / n
				if tol := 5 * math.Sqrt(want*(1-want)/n); math.Abs(got-want) > tol {
					t.Errorf("route %d: share %.4f, want %.4f ± %.4f", r, got, want, tol)
				}
			}
		})
	}
}

func TestWeightedRejectsBadWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		weights []float64
	}{
		{"too few", []float64{1, 1}},
		{"negative", []float64{1, -1, 1}},
		{"NaN", []float64{1, math.NaN(), 1}},
		{"infinite", []float64{1, math.Inf(1), 1}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			NewWeighted(policyWorld{routes: 3}, tt.weights, 1)
		})
	}
}

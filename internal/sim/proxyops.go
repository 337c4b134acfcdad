package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// ProxyOps' published parameters.
const (
	proxyOpsSuccessDecay  = 0.0002 // λs per second: a success's weight halves in about 58 minutes
	proxyOpsFailureDecay  = 0.0003 // λe per second: a failure's weight halves in about 39 minutes
	proxyOpsFailureWeight = 1.5    // a failure counts 1.5 successes
	proxyOpsMinSamples    = 3      // below this many outcomes a pair draws from the prior
	proxyOpsPriorAlpha    = 10     // optimistic prior Beta(10, 1): untried pairs get tried
	proxyOpsPriorBeta     = 1

	// proxyOpsMaxCandidates is our deviation, not ProxyOps': the most
	// routes one pick evaluates (see NewProxyOps).
	proxyOpsMaxCandidates = 128
)

var _ Policy = (*proxyOps)(nil)

// proxyOps is the ProxyOps baseline: time-decayed Thompson sampling per
// (route, target), with no cooldowns and no probes.
type proxyOps struct {
	// Immutable after construction.
	routes, targets int

	// Owner goroutine only.
	rng      *rand.Rand
	origin   time.Time // the first Pick's now; evidence times are offsets from it
	started  bool      // origin is set
	pairs    []pairEvidence
	order    []int32 // a permutation of the routes whose prefix is the candidate sample; nil when the pool fits the cap
	attempts []proxyOpsAttempt
	free     []uint64 // tickets of attempts not in flight
}

// pairEvidence is the decayed evidence of one (route, target) pair. Both
// sums are exact as of at: under exponential decay one timestamp stands for
// every past outcome, since Σ e^(−λ(t−tᵢ)) = e^(−λ(t−at)) · Σ e^(−λ(at−tᵢ)).
type pairEvidence struct {
	success float64       // Σ e^(−λs·age) over successes, as of at
	failure float64       // Σ e^(−λe·age) over failures, as of at, before the 1.5 weight
	at      time.Duration // offset from the policy's origin
	samples uint32        // outcomes recorded, saturating at proxyOpsMinSamples
}

// proxyOpsAttempt is an attempt in flight, named by its ticket (its index).
type proxyOpsAttempt struct {
	route, target int32
	live          bool // picked and not yet reported; guards the free list against double reports
}

// NewProxyOps returns a reimplementation of ProxyOps' published route
// selection, the learning baseline the engine is measured against. Per
// (route, target) it keeps success evidence α = Σ e^(−λs·Δt) and failure
// evidence β = 1.5 · Σ e^(−λe·Δt), draws one Beta sample per candidate
// (Beta(10, 1) below 3 outcomes) and picks the highest. OK is a success;
// Canceled and ClientError are no evidence; every other class is a failure.
//
// One deviation: ProxyOps evaluates every route per pick; for pools of more
// than 128 routes this evaluates a fresh uniform random subset of 128. Two
// Beta draws cost about 150 ns, so evaluating all 10,000 routes of the
// large scenario would take 1.5 ms a pick; 128 keeps it within the bench's
// time budget and only makes ProxyOps slightly less greedy.
func NewProxyOps(w World, seed uint64) Policy {
	routes := w.Routes()
	p := &proxyOps{
		routes:   routes,
		targets:  w.Targets(),
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		pairs:    make([]pairEvidence, routes*w.Targets()),
		attempts: make([]proxyOpsAttempt, 0, 64),
		free:     make([]uint64, 0, 64),
	}
	if routes > proxyOpsMaxCandidates {
		p.order = make([]int32, routes)
		for i := range p.order {
			p.order[i] = int32(i)
		}
	}
	return p
}

// Pick implements Policy: the argmax of one Beta draw per candidate.
func (p *proxyOps) Pick(now time.Time, target int, _ string, avoid []int) (Attempt, bool) {
	if !p.started {
		p.origin, p.started = now, true
	}
	at := now.Sub(p.origin)
	best, bestDraw := -1, math.Inf(-1)
	for i, evaluated := 0, 0; i < p.routes && evaluated < proxyOpsMaxCandidates; i++ {
		route := i
		if p.order != nil {
			// One step of a partial Fisher–Yates shuffle: the prefix is a
			// uniform sample whatever order earlier picks left behind.
			j := i + p.rng.IntN(p.routes-i)
			p.order[i], p.order[j] = p.order[j], p.order[i]
			route = int(p.order[i])
		}
		if slices.Contains(avoid, route) {
			continue
		}
		evaluated++
		if d := p.draw(route, target, at); d > bestDraw {
			best, bestDraw = route, d
		}
	}
	if best < 0 {
		return Attempt{}, false
	}
	return Attempt{Route: best, Ticket: p.open(best, target)}, true
}

// draw samples the pair's success probability from its posterior at at.
func (p *proxyOps) draw(route, target int, at time.Duration) float64 {
	e := &p.pairs[route*p.targets+target]
	if e.samples < proxyOpsMinSamples {
		return sampleBeta(p.rng, proxyOpsPriorAlpha, proxyOpsPriorBeta)
	}
	alpha, beta := e.evidence(at)
	// +1 on each side (a uniform prior under the evidence) keeps the
	// distribution proper when one side has no evidence at all.
	return sampleBeta(p.rng, alpha+1, beta+1)
}

// open records an attempt in flight and returns its ticket, reusing a free
// slot so that steady state does not allocate.
func (p *proxyOps) open(route, target int) uint64 {
	a := proxyOpsAttempt{route: int32(route), target: int32(target), live: true}
	if n := len(p.free); n > 0 {
		ticket := p.free[n-1]
		p.free = p.free[:n-1]
		p.attempts[ticket] = a
		return ticket
	}
	p.attempts = append(p.attempts, a)
	return uint64(len(p.attempts) - 1)
}

// Report implements Policy. Tickets not in flight are ignored.
func (p *proxyOps) Report(now time.Time, ticket uint64, r Result) {
	if ticket >= uint64(len(p.attempts)) || !p.attempts[ticket].live {
		return
	}
	a := &p.attempts[ticket]
	a.live = false
	p.free = append(p.free, ticket)
	if r.Class == engine.Canceled || r.Class == engine.ClientError {
		return
	}
	p.pairs[int(a.route)*p.targets+int(a.target)].record(now.Sub(p.origin), r.Class == engine.OK)
}

// Tick implements Policy. It does nothing: ProxyOps has no cooldowns and
// no probes.
func (p *proxyOps) Tick(time.Time, Prober) {}

// evidence returns α and β as of at.
func (e *pairEvidence) evidence(at time.Duration) (alpha, beta float64) {
	age := (at - e.at).Seconds()
	return e.success * math.Exp(-proxyOpsSuccessDecay*age),
		proxyOpsFailureWeight * e.failure * math.Exp(-proxyOpsFailureDecay*age)
}

// record adds one outcome observed at at. A late outcome (at before e.at)
// enters already decayed to e.at, so the sums stay exact in any order.
func (e *pairEvidence) record(at time.Duration, success bool) {
	if elapsed := (at - e.at).Seconds(); elapsed > 0 {
		e.success *= math.Exp(-proxyOpsSuccessDecay * elapsed)
		e.failure *= math.Exp(-proxyOpsFailureDecay * elapsed)
		e.at = at
	}
	age := (e.at - at).Seconds()
	if success {
		e.success += math.Exp(-proxyOpsSuccessDecay * age)
	} else {
		e.failure += math.Exp(-proxyOpsFailureDecay * age)
	}
	if e.samples < proxyOpsMinSamples {
		e.samples++
	}
}

// sampleBeta draws from Beta(a, b) as X/(X+Y) with X ~ Gamma(a), Y ~
// Gamma(b), since math/rand/v2 has no Beta. a and b must be positive; below
// about 0.01 both Gamma draws can underflow to 0 and the result is NaN.
func sampleBeta(rng *rand.Rand, a, b float64) float64 {
	x := sampleGamma(rng, a)
	return x / (x + sampleGamma(rng, b))
}

// sampleGamma draws from Gamma(a, 1) by Marsaglia and Tsang's method (ACM
// TOMS 26(3), 2000), which needs a ≥ 1; smaller shapes use their boost
// Gamma(a) = Gamma(a+1) · U^(1/a).
func sampleGamma(rng *rand.Rand, a float64) float64 {
	if a < 1 {
		return sampleGamma(rng, a+1) * math.Pow(rng.Float64(), 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v *= v * v
		u := rng.Float64()
		// The squeeze accepts most draws without a logarithm.
		if u < 1-0.0331*x*x*x*x || math.Log(u) < x*x/2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

package livebench

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/sim"
)

// The simulator beside the fleet: each pool is also run through
// `switchyard bench`'s simulator, on a scenario made from the same shapes,
// sites and crawler, by the policies that stand for the live contenders.
// Where the two disagree, the simulator is wrong until shown otherwise:
// the table says where to look.

// simStandIns are the simulator's policies for the live contenders, in
// report order, the oracle first: HAProxy's leastconn is least_loaded, the
// client's blind rotation round_robin making one attempt a request
// (clientSide), as the client's own rotation does, the gateway's retries
// not being its. Last, with no live contender, the oracle that learns
// each site's limits at its first 429 or ban: what the pool's cold start
// costs a learner that knows everything from then on.
var simStandIns = []struct {
	live, policy string
	clientSide   bool
}{
	{"oracle", "oracle", false},
	{"switchyard", "switchyard", false},
	{"haproxy", "least_loaded", false},
	{"round_robin", "round_robin", true},
	{"", "oracle_learning", false},
}

// simulate runs p's scenario (scenario) through the stand-ins and returns
// their summaries, in simStandIns order, each ratio to the oracle's
// throughput.
func simulate(p pool, opts Options) ([]sim.Summary, error) {
	sc, err := p.scenario(opts, opts.Duration/time.Duration(opts.Rounds))
	if err != nil {
		return nil, err
	}
	clientSide := *sc
	clientSide.MaxAttempts = 1
	out := make([]sim.Summary, len(simStandIns))
	for i, s := range simStandIns {
		run := sc
		if s.clientSide {
			run = &clientSide
		}
		got, err := sim.Bench(run, sim.Options{Policies: []string{s.policy}})
		if err != nil {
			return nil, err
		}
		out[i] = got[0]
		out[i].ThroughputRatio = out[i].Throughput / out[0].Throughput
	}
	return out, nil
}

// scenario is p as the simulator's scenario for one run of d (a round of a
// contender: a fresh fleet and gateway each): an exit group per distinct
// shape, the sites in the mix's proportions, the crawler's workers,
// attempts and timeout, and the quick start's gateway (config.Default).
// The live crawler counts a refused request as a failed try and sends its
// next at once, so the scenario's does (retry_refusals). Two
// approximations: an exit's latency, uniform within ±Jitter live, is the
// simulator's lognormal with the same spread (σ = Jitter/√3); and a
// captcha page, which the gateway's built-in signatures mark, is a ban (a
// page no signature marks, the simulator's softban, is not what the fleet
// serves), the gateway holding both against the pair.
func (p pool) scenario(opts Options, d time.Duration) (*sim.Scenario, error) {
	gw := config.Default()
	sc := &sim.Scenario{
		Name: p.name, Description: p.about, Seed: opts.Seed, Duration: d, Workers: opts.Workers,
		AttemptTimeout: gw.Retry.AttemptTimeout, MaxAttempts: gw.Retry.MaxAttempts,
		ClientTimeout: opts.Timeout, ClientAttempts: opts.Attempts, TaskDeadline: time.Duration(opts.Attempts) * opts.Timeout,
		RetryRefusals: true,
	}
	for _, s := range siteMix {
		sc.Targets = append(sc.Targets, sim.TargetSpec{Name: s.host, Weight: float64(s.weight)})
	}
	var kept []Shape // one of each group's, by group
	sites := siteNames()
	for _, s := range p.shapes {
		if i := slices.IndexFunc(kept, func(k Shape) bool { return reflect.DeepEqual(k, s) }); i >= 0 {
			sc.Routes[i].Count++
			continue
		}
		kept = append(kept, s)
		g := s.routeGroup(sites, d)
		g.Name = s.kind(sites) + "-" + strconv.Itoa(len(sc.Routes)+1)
		sc.Routes = append(sc.Routes, g)
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("pool %s as a scenario: %w", p.name, err)
	}
	return sc, nil
}

// routeGroup is one exit of shape s as a simulator route group (a count
// of 1), over sites, for a run of d.
func (s Shape) routeGroup(sites []string, d time.Duration) sim.RouteGroup {
	g := sim.RouteGroup{Count: 1, Latency: s.Latency, Jitter: s.Jitter / math.Sqrt(3), Weight: 1}
	if g.Latency <= 0 {
		g.Latency = time.Millisecond // the simulator's latencies are positive
	}
	add := func(b sim.Behaviour) { g.Behaviours = append(g.Behaviours, b) }
	switch {
	case s.Dead:
		add(sim.Behaviour{Kind: sim.KindDead})
	case s.Blackhole:
		add(sim.Behaviour{Kind: sim.KindBlackhole})
	case s.Auth407:
		add(sim.Behaviour{Kind: sim.KindAuth})
	}
	if s.BlackholeFrom != s.BlackholeTo {
		add(sim.Behaviour{Kind: sim.KindBlackhole, From: fraction(d, s.BlackholeFrom), Until: fraction(d, s.BlackholeTo)})
	}
	if s.Flaky > 0 {
		add(sim.Behaviour{Kind: sim.KindErrors, P: s.Flaky})
	}
	for _, site := range sites {
		r := s.Sites[site]
		if r.Banned || r.Captcha {
			add(sim.Behaviour{Kind: sim.KindBan, Target: site, P: 1})
		}
		if l := r.RateLimit; l != nil {
			add(sim.Behaviour{Kind: sim.KindRatelimit, Target: site, RPS: float64(l.PerSecond), RetryAfter: l.Penalty})
		}
		if b := r.BurstBan; b != nil {
			add(sim.Behaviour{Kind: sim.KindBurstban, Target: site, Limit: b.Requests, Window: b.Window, Penalty: b.Penalty})
		}
	}
	return g
}

// fraction is f of d, as the fleet places a window on its run.
func fraction(d time.Duration, f float64) time.Duration {
	return time.Duration(f * float64(d))
}

package livebench

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/sim"
)

// TestPoolScenarios: every pool becomes a valid scenario with one route
// per exit, grouped by shape, and the faults land where the fleet puts
// them.
func TestPoolScenarios(t *testing.T) {
	t.Parallel()
	opts := Options{Duration: 10 * time.Second, Rounds: 2}.withDefaults()
	const d = 5 * time.Second
	byName := make(map[string]*sim.Scenario)
	for _, p := range pools() {
		sc, err := p.scenario(opts, d)
		if err != nil {
			t.Fatal(err)
		}
		routes := 0
		for _, g := range sc.Routes {
			routes += g.Count
		}
		if routes != len(p.shapes) || sc.Duration != d || sc.Workers != opts.Workers || !sc.RetryRefusals {
			t.Errorf("%s: %d routes over %v, %d workers, retry_refusals %v; want %d, %v, %d, true",
				p.name, routes, sc.Duration, sc.Workers, sc.RetryRefusals, len(p.shapes), d, opts.Workers)
		}
		byName[p.name] = sc
	}
	// behaviours finds the group of count routes with the behaviour kind.
	behaviour := func(pool string, count int, kind sim.Kind) sim.Behaviour {
		for _, g := range byName[pool].Routes {
			for _, b := range g.Behaviours {
				if b.Kind == kind && g.Count == count {
					return b
				}
			}
		}
		t.Errorf("%s: no group of %d with %s", pool, count, kind)
		return sim.Behaviour{}
	}
	if b := behaviour("c_blackhole_window", 8, sim.KindBlackhole); b.From != d/5 || b.Until != 3*d/5 {
		t.Errorf("c's blackholes from %v to %v, want %v to %v", b.From, b.Until, d/5, 3*d/5)
	}
	if b := behaviour("d_rate_limited", 9, sim.KindRatelimit); b.RPS != 4 || b.RetryAfter != 5*time.Second {
		t.Errorf("d's limit %+v", b)
	}
	if b := behaviour("i_roomy_limits", 9, sim.KindRatelimit); b.RPS != 12 || b.RetryAfter != 5*time.Second {
		t.Errorf("i's limit %+v", b)
	}
	if b := behaviour("e_ban_and_limit", 10, sim.KindBurstban); b.Target != "news.test" || b.Limit != 40 || b.Window != 10*time.Second || b.Penalty != 20*time.Second {
		t.Errorf("e's burst ban %+v", b)
	}
	if b := behaviour("b_auth_slow", 4, sim.KindAuth); b.Kind != sim.KindAuth {
		t.Errorf("b's 407s %+v", b)
	}
	if b := behaviour("a_everyday_bad", 2, sim.KindErrors); b.P != 0.3 {
		t.Errorf("a's flaky exits %+v", b)
	}
}

// TestSimulate runs the stand-ins over the smallest pool, as the fleet
// benchmark does beside its live table.
func TestSimulate(t *testing.T) {
	t.Parallel()
	opts := Options{Duration: 20 * time.Second}.withDefaults()
	i := len(pools()) - 1
	for pools()[i].name != "f_three_exits" {
		i--
	}
	got, err := simulate(pools()[i], opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(simStandIns) || got[0].ThroughputRatio != 1 || got[1].Completed == 0 {
		t.Fatalf("summaries %+v", got)
	}
	// One of three exits blackholed: the engine avoids it, blind rotation
	// does not.
	if sw, rr := got[1].ThroughputRatio, got[3].ThroughputRatio; sw < 0.8 || rr > 0.5 {
		t.Errorf("switchyard %.2f, round_robin %.2f of the oracle", sw, rr)
	}
	// No site limits anything: learning the limits costs nothing.
	if l := got[len(got)-1]; l.Policy != "oracle_learning" || l.ThroughputRatio != 1 {
		t.Errorf("%s %v of the oracle, want oracle_learning at 1", l.Policy, l.ThroughputRatio)
	}
}

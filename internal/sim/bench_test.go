package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// boundMargin is how far a policy's throughput may exceed the oracle's
// before the oracle is wrong: the noise of a short run, which the policies
// share the task stream of but not the world's draws.
const boundMargin = 0.02

// boundRun shortens a built-in scenario for TestOracleIsAnUpperBound,
// keeping what it changes on a schedule: its timeline is cut so that the
// first change after the start (a behaviour's or a down window's from)
// comes at 20 s, and it runs 30 s past that, or 30 s past a flap's first
// down phase, or 30 s when nothing changes. large runs for 5 s: its pool
// is most of the cost, and by then round-robin is past the good routes its
// file lists first (at 3 s it still matches the oracle).
func boundRun(t *testing.T, sc *Scenario) {
	t.Helper()
	const lead, after = 20 * time.Second, 30 * time.Second
	if sc.Name == "large" {
		sc.Duration = 5 * time.Second
		return
	}
	var first time.Duration // 0: nothing changes after the start
	for _, tg := range sc.Targets {
		for _, d := range tg.Down {
			if d.From > 0 && (first == 0 || d.From < first) {
				first = d.From
			}
		}
	}
	for _, g := range sc.Routes {
		for _, b := range g.Behaviours {
			if b.From > 0 && (first == 0 || b.From < first) {
				first = b.From
			}
		}
	}
	by := max(first-lead, 0)
	// Cutting [0, by) off the timeline: what ended in it is gone, the
	// rest comes by earlier.
	over := func(until time.Duration) bool { return until != 0 && until <= by }
	shift := func(from, until *time.Duration) {
		*from = max(*from-by, 0)
		if *until != 0 {
			*until -= by
		}
	}
	for i := range sc.Targets {
		tg := &sc.Targets[i]
		tg.Down = slices.DeleteFunc(tg.Down, func(d DownWindow) bool { return over(d.Until) })
		for j := range tg.Down {
			shift(&tg.Down[j].From, &tg.Down[j].Until)
		}
	}
	end := after
	if first > 0 {
		end = first - by + after
	}
	for i := range sc.Routes {
		g := &sc.Routes[i]
		g.Behaviours = slices.DeleteFunc(g.Behaviours, func(b Behaviour) bool { return over(b.Until) })
		for j := range g.Behaviours {
			b := &g.Behaviours[j]
			shift(&b.From, &b.Until)
			if b.Kind == KindFlap {
				end = max(end, b.From+b.Period+after)
			}
		}
	}
	sc.Duration = min(sc.Duration-by, end)
	if err := sc.Validate(); err != nil {
		t.Fatalf("shortened %s: %v", sc.Name, err)
	}
}

// TestOracleIsAnUpperBound: on every built-in scenario, no policy gets
// meaningfully more work done than the oracle, which knows the ground
// truth and sends each attempt where it will be answered soonest. A
// policy that does points at a flaw in the oracle or the world.
func TestOracleIsAnUpperBound(t *testing.T) {
	t.Parallel()
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			boundRun(t, sc)
			out, err := Bench(sc, Options{Parallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			oracle := out[slices.IndexFunc(out, func(s Summary) bool { return s.Policy == oracleName })]
			if oracle.Throughput <= 0 || oracle.ThroughputRatio != 1 {
				t.Fatalf("oracle %+v", oracle)
			}
			for _, s := range out {
				if s.ThroughputRatio > 1+boundMargin {
					t.Errorf("%s did %.1f tasks/s, %.3f of the oracle's %.1f", s.Policy, s.Throughput, s.ThroughputRatio, oracle.Throughput)
				}
				if s.Scenario != name || s.SimulatedSeconds != sc.Duration.Seconds() {
					t.Errorf("summary %+v", s)
				}
			}
		})
	}
}

func TestParseSweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, in string
		want     *Sweep
		err      bool
	}{
		{"one value", "gamma=2", &Sweep{Param: "gamma", Values: []float64{2}}, false},
		{"several", "cool_after=2, 3,4", &Sweep{Param: "cool_after", Values: []float64{2, 3, 4}}, false},
		{"no values", "gamma=", nil, true},
		{"no equals", "gamma", nil, true},
		{"unknown", "beta=1", nil, true},
		{"not a number", "alpha=x", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSweep(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("error %v, want error %v", err, tt.err)
			}
			if tt.want != nil && (got.Param != tt.want.Param || len(got.Values) != len(tt.want.Values)) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSweepPaceStart: sweeping pace_start moves pace_max only where it
// must, past its default; below, it keeps the default (a sweep that capped
// it at the start rate measured another engine).
func TestSweepPaceStart(t *testing.T) {
	t.Parallel()
	def := engine.DefaultConfig().PaceMax
	for _, tt := range []struct{ start, wantMax float64 }{
		{3, def},
		{def, def},
		{2 * def, 2 * def},
	} {
		var es EngineSettings
		sweepParams["pace_start"](&es, tt.start)
		es.Engine.UncheckedCandidates = true
		e, err := engine.New(es.Engine, nil)
		if err != nil {
			t.Fatalf("pace_start=%v: %v", tt.start, err)
		}
		if got := e.Config(); got.PaceStart != tt.start || got.PaceMax != tt.wantMax {
			t.Errorf("pace_start=%v: pace_start %v, pace_max %v; want %v, %v", tt.start, got.PaceStart, got.PaceMax, tt.start, tt.wantMax)
		}
	}
}

// TestRandomBansAreNoTolerance runs sites that answer 403 at random: the
// built-in flaky-403 (3% of the requests through every exit) on seeds
// where the engine took the random bans, which land most on the busiest
// exits, for a burst-ban wave and held every exit under a tolerance for a
// hundred seconds (93–96% of the tasks completed, p95 11–24 s); and five
// exits before a site that 403s 2% of requests, each exit carrying sixty
// a second, where a wave banned at 25 requests with 76 served held the
// site at a third of what it took and each later ban cut it again (1.6%
// of the tasks completed on seed 1).
func TestRandomBansAreNoTolerance(t *testing.T) {
	t.Parallel()
	few, err := ParseScenario("few-exits.toml", []byte(`
name = "few-exits"
duration = "3m"
workers = 32

[[targets]]
name = "shop.example"

[[routes]]
name = "fast"
count = 5
latency = "100ms"
jitter = 0.3
[[routes.behaviours]]
kind = "ban"
target = "shop.example"
p = 0.02
`))
	if err != nil {
		t.Fatal(err)
	}
	flaky, err := Builtin("flaky-403")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		sc    *Scenario
		seeds []uint64
	}{{flaky, []uint64{2, 3, 6}}, {few, []uint64{1, 2}}} {
		for _, seed := range tt.seeds {
			t.Run(fmt.Sprint(tt.sc.Name, "/seed=", seed), func(t *testing.T) {
				t.Parallel()
				sc := *tt.sc
				sc.Seed = seed
				out, err := Bench(&sc, Options{Policies: []string{"switchyard"}, Parallel: 1})
				if err != nil {
					t.Fatal(err)
				}
				if s := out[0]; s.CompletionRate < 0.999 || s.P95ms > 1000 {
					t.Errorf("%.2f%% of tasks completed, p95 %.0f ms: want every task, p95 under a second", 100*s.CompletionRate, s.P95ms)
				}
			})
		}
	}
}

// TestTiersScenario holds the engine to issue 18's target on the built-in
// tier scenario: always-costly's throughput (within 5%) at no more than
// 30% of its cost, where the cheap tier alone fails a site.
func TestTiersScenario(t *testing.T) {
	t.Parallel()
	sc, err := Builtin("tiers")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Bench(sc, Options{Policies: []string{"switchyard", "always_cheap", "always_costly"}, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	sy, cheap, costly := out[0], out[1], out[2]
	if sy.Throughput < 0.95*costly.Throughput || sy.CostPerCompleted > 0.30*costly.CostPerCompleted {
		t.Errorf("switchyard %.1f tasks/s at %.3f a task; always_costly %.1f at %.3f: want ≥ 0.95× the throughput at ≤ 0.30× the cost",
			sy.Throughput, sy.CostPerCompleted, costly.Throughput, costly.CostPerCompleted)
	}
	if cheap.CompletionRate > 0.95 {
		t.Errorf("always_cheap completed %.1f%% of its tasks: the scenario must need the costly tier", 100*cheap.CompletionRate)
	}
	// The one-tier policies run by default where there are tiers, only.
	mixed, err := Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sc   *Scenario
		want bool
	}{{sc, true}, {mixed, false}} {
		jobs, err := c.sc.jobs(Options{})
		if err != nil {
			t.Fatal(err)
		}
		has := slices.ContainsFunc(jobs, func(j job) bool { return j.name == "always_costly" })
		if has != c.want || jobs[len(jobs)-1].name != oracleName {
			t.Errorf("%s: default policies include always_costly %v, want %v, the oracle last", c.sc.Name, has, c.want)
		}
	}
}

// TestRestartedKeepsWhatItLearned: on the live d_rate_limited pool's
// scenario over the 15 s the live bench runs, an engine restarted on what
// a first run taught it of the sites' limits (as a gateway on
// pacing.learned_file) does not trip every exit again to learn them: more
// tasks a second (1.17× before a freeze started its pairs' buckets empty,
// 1.10× since), fewer wasted attempts.
func TestRestartedKeepsWhatItLearned(t *testing.T) {
	t.Parallel()
	sc, err := Builtin("limits-saturated")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration = 15 * time.Second
	out, err := Bench(sc, Options{Policies: []string{"switchyard", restartedName}, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	cold, restarted := out[0], out[1]
	if restarted.Throughput < 1.05*cold.Throughput || restarted.WastedAttempts >= cold.WastedAttempts {
		t.Errorf("restarted: %.1f tasks/s, %d wasted attempts; cold: %.1f, %d: want ≥ 1.05× the tasks, fewer wasted",
			restarted.Throughput, restarted.WastedAttempts, cold.Throughput, cold.WastedAttempts)
	}
}

// clockWorld is a scenario's world that notes when the runner asked it
// for an answer at a time before one it had already asked at.
type clockWorld struct {
	*scenarioWorld
	last time.Duration
	back []string
}

func (w *clockWorld) Attempt(route, target int, now time.Duration, rng *rand.Rand) Result {
	if now < w.last {
		w.back = append(w.back, fmt.Sprintf("%v after %v", now, w.last))
	}
	w.last = now
	return w.scenarioWorld.Attempt(route, target, now, rng)
}

// TestClockOnlyMovesOn: the runner's clock never goes back, here on the
// scenario whose paced requests fill the pile of tasks set aside and
// keep it full (a worker back from an attempt once took a task set aside
// back when it came due, and the world and the engine saw time run
// backwards: sites' rate limits and Retry-After read out of order).
func TestClockOnlyMovesOn(t *testing.T) {
	t.Parallel()
	sc, err := Builtin("limits-saturated")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration = 20 * time.Second
	w := &clockWorld{scenarioWorld: sc.World().(*scenarioWorld)}
	p, err := NewEnginePolicy(w, EngineSettings{Engine: enginePolicies["switchyard"].cfg, Budget: engine.DefaultBudget(), AttemptTimeout: sc.AttemptTimeout}, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	s := Run(w, p, sc.load(), nil)
	if s.Completed == 0 || len(w.back) > 0 {
		t.Errorf("%d tasks completed; the clock went back %d times, first %v", s.Completed, len(w.back), w.back[:min(len(w.back), 1)])
	}
}

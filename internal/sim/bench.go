package sim

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// DefaultPolicies are the policies `switchyard bench` compares: blind
// baselines, the products people use today, the engine, and the bound.
var DefaultPolicies = []string{
	"round_robin", "random", "weighted", "least_loaded", "fastest", "proxyops",
	"switchyard", "switchyard_weighted", "oracle",
}

// enginePolicies are the engine configurations by policy name: the
// defaults and named variants of what the engine exposes.
var enginePolicies = map[string]struct {
	cfg   engine.Config
	blind bool
	only  TierChoice
}{
	"round_robin":         {engine.Config{Picker: &engine.RoundRobin{}}, true, AllTiers},
	"random":              {engine.Config{Picker: engine.Random{}}, true, AllTiers},
	"switchyard":          {engine.Config{}, false, AllTiers},
	"switchyard_weighted": {engine.Config{Picker: engine.WeightedRandom{}}, false, AllTiers},
	"switchyard_gamma1":   {engine.Config{Gamma: 1}, false, AllTiers},
	"switchyard_gamma4":   {engine.Config{Gamma: 4}, false, AllTiers},
	"always_cheap":        {engine.Config{}, false, CheapestTier},
	"always_costly":       {engine.Config{}, false, CostliestTier},
}

// restartedName is the engine with its defaults, restarted: it starts from
// what a first run of the same scenario and seed taught it of the sites'
// limits (EngineSettings.Learned), as a gateway restarted on
// pacing.learned_file. Asked for by name; not a default.
const restartedName = "switchyard_restarted"

// learningOracleName is the oracle that learns each site's limits at its
// first 429 or ban (NewLearningOracle). Asked for by name; not a default.
const learningOracleName = "oracle_learning"

// tierPolicies join DefaultPolicies, before the oracle, on a scenario
// whose routes are of several cost tiers.
var tierPolicies = []string{"always_cheap", "always_costly"}

// Sweep varies one engine parameter over values: each value becomes a
// policy named "switchyard[param=value]".
type Sweep struct {
	Param  string
	Values []float64
}

// sweepParams are the parameters a sweep can vary: the engine's, and the
// gateway's budget of retries and hedges.
var sweepParams = map[string]func(*EngineSettings, float64){
	"alpha":              func(s *EngineSettings, v float64) { s.Engine.Alpha = v },
	"gamma":              func(s *EngineSettings, v float64) { s.Engine.Gamma = v },
	"sharpness":          func(s *EngineSettings, v float64) { s.Engine.Sharpness = v },
	"prior":              func(s *EngineSettings, v float64) { s.Engine.Prior = v },
	"prior_samples":      func(s *EngineSettings, v float64) { s.Engine.PriorSamples = v },
	"suspect_after":      func(s *EngineSettings, v float64) { s.Engine.SuspectAfter = int(v) },
	"cool_after":         func(s *EngineSettings, v float64) { s.Engine.CoolAfter = int(v) },
	"cool_rate":          func(s *EngineSettings, v float64) { s.Engine.CoolRate = v },
	"suspect_weight":     func(s *EngineSettings, v float64) { s.Engine.SuspectWeight = v },
	"panic_threshold":    func(s *EngineSettings, v float64) { s.Engine.PanicThreshold = v },
	"max_removed_share":  func(s *EngineSettings, v float64) { s.Engine.MaxRemovedShare = v },
	"overwhelming_after": func(s *EngineSettings, v float64) { s.Engine.OverwhelmingAfter = int(v) },
	"probe_successes":    func(s *EngineSettings, v float64) { s.Engine.ProbeSuccesses = int(v) },
	"eject_after":        func(s *EngineSettings, v float64) { s.Engine.EjectAfter = int(v) },
	"eject_time_s":       func(s *EngineSettings, v float64) { s.Engine.EjectTime = seconds(v) },
	"cooldown_cap_s":     func(s *EngineSettings, v float64) { s.Engine.CooldownCap = seconds(v) },
	"latency_decay_s":    func(s *EngineSettings, v float64) { s.Engine.LatencyDecay = seconds(v) },
	"latency_forget_s":   func(s *EngineSettings, v float64) { s.Engine.LatencyForget = seconds(v) },
	"deadline_factor":    func(s *EngineSettings, v float64) { s.Engine.DeadlineFactor = v },
	"deadline_floor_s":   func(s *EngineSettings, v float64) { s.Engine.DeadlineFloor = seconds(v) },
	"slow_start_s":       func(s *EngineSettings, v float64) { s.Engine.SlowStart = seconds(v) },
	"slow_start_floor":   func(s *EngineSettings, v float64) { s.Engine.SlowStartFloor = v },
	"pace_start": func(s *EngineSettings, v float64) {
		s.Engine.PaceStart = v
		// PaceMax must stay at least PaceStart; a zero one is its default.
		if v > cmp.Or(s.Engine.PaceMax, engine.DefaultConfig().PaceMax) {
			s.Engine.PaceMax = v
		}
	},
	"pace_growth":        func(s *EngineSettings, v float64) { s.Engine.PaceGrowth = v },
	"budget_ratio":       func(s *EngineSettings, v float64) { s.Budget.BudgetRatio = v },
	"learned_max_wait_s": func(s *EngineSettings, v float64) { s.LearnedMaxWait = seconds(v) },
	"hedge_ratio":        func(s *EngineSettings, v float64) { s.Budget.HedgeRatio = v },
}

func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// ParseSweep parses "param=v1,v2,…".
func ParseSweep(s string) (*Sweep, error) {
	param, list, ok := strings.Cut(s, "=")
	if !ok || list == "" {
		return nil, fmt.Errorf("sweep %q: want param=v1,v2,…", s)
	}
	if _, known := sweepParams[param]; !known {
		names := make([]string, 0, len(sweepParams))
		for n := range sweepParams {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("sweep %q: unknown parameter %q (want one of %s)", s, param, strings.Join(names, ", "))
	}
	sw := &Sweep{Param: param}
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("sweep %q: value %q is not a number", s, f)
		}
		sw.Values = append(sw.Values, v)
	}
	return sw, nil
}

// Options says what Bench runs.
type Options struct {
	Policies []string // nil: DefaultPolicies
	Sweep    *Sweep   // adds one engine policy per swept value
	Parallel int      // policies run at once; 0: GOMAXPROCS
	Progress func(n int)
}

// job is one policy to run: its name and how to build it.
type job struct {
	name  string
	build func(w World) (Policy, error)
}

// Bench runs every policy on the scenario, each on a fresh world from the
// same seed, and returns their summaries in policy order.
func Bench(sc *Scenario, opts Options) ([]Summary, error) {
	jobs, err := sc.jobs(opts)
	if err != nil {
		return nil, err
	}
	load := sc.load()
	out := make([]Summary, len(jobs))
	errs := make([]error, len(jobs))
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w := sc.World()
			p, err := j.build(w)
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", j.name, err)
				return
			}
			out[i] = Run(w, p, load, opts.Progress)
			out[i].Scenario, out[i].Policy = sc.Name, j.name
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if i := slices.IndexFunc(out, func(s Summary) bool { return s.Policy == oracleName }); i >= 0 && out[i].Throughput > 0 {
		for j := range out {
			out[j].ThroughputRatio = out[j].Throughput / out[i].Throughput
		}
	}
	return out, nil
}

// jobs resolves the policy names (and sweep) of opts.
func (sc *Scenario) jobs(opts Options) ([]job, error) {
	names := opts.Policies
	if names == nil {
		names = DefaultPolicies
		if sc.tiered() {
			names = slices.Insert(slices.Clone(names), len(names)-1, tierPolicies...)
		}
	}
	seed := sc.Seed
	timeout := sc.AttemptTimeout
	var jobs []job
	for _, name := range names {
		switch ep, ok := enginePolicies[name]; {
		case ok:
			es := EngineSettings{Engine: ep.cfg, Budget: engine.DefaultBudget(), AttemptTimeout: timeout, Blind: ep.blind, Only: ep.only}
			if rr, isRR := es.Engine.Picker.(*engine.RoundRobin); isRR && rr != nil {
				es.Engine.Picker = &engine.RoundRobin{} // a fresh counter per run
			}
			jobs = append(jobs, engineJob(name, es, seed))
		case name == restartedName:
			es := EngineSettings{Budget: engine.DefaultBudget(), AttemptTimeout: timeout}
			es.Engine.Seed = seed
			load := sc.load()
			jobs = append(jobs, job{name, func(w World) (Policy, error) {
				first := sc.World()
				p, err := NewEnginePolicy(first, es, Epoch)
				if err != nil {
					return nil, err
				}
				Run(first, p, load, nil)
				learned := p.(*enginePolicy).learned()
				restarted := es
				restarted.Learned = &learned
				return NewEnginePolicy(w, restarted, Epoch)
			}})
		case name == "least_loaded":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewLeastLoaded(w, timeout), nil }})
		case name == "fastest":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewFastest(w), nil }})
		case name == "proxyops":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewProxyOps(w, seed), nil }})
		case name == "oracle":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewOracle(w, Epoch, seed), nil }})
		case name == learningOracleName:
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewLearningOracle(w, Epoch, seed), nil }})
		case name == "weighted":
			weights := sc.RouteWeights()
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewWeighted(w, weights, seed), nil }})
		default:
			return nil, fmt.Errorf("unknown policy %q (want one of %s)", name, strings.Join(PolicyNames(), ", "))
		}
	}
	if sw := opts.Sweep; sw != nil {
		for _, v := range sw.Values {
			es := EngineSettings{Budget: engine.DefaultBudget(), AttemptTimeout: timeout}
			sweepParams[sw.Param](&es, v)
			jobs = append(jobs, engineJob(fmt.Sprintf("switchyard[%s=%g]", sw.Param, v), es, seed))
		}
	}
	return jobs, nil
}

func engineJob(name string, s EngineSettings, seed uint64) job {
	s.Engine.Seed = seed
	return job{name, func(w World) (Policy, error) { return NewEnginePolicy(w, s, Epoch) }}
}

// PolicyNames lists every policy Bench knows.
func PolicyNames() []string {
	names := []string{"weighted", "least_loaded", "fastest", "proxyops", "oracle", learningOracleName, restartedName}
	for n := range enginePolicies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ProgressSteps is how many steps Bench reports to Options.Progress per
// policy: simulated seconds, or tasks for a scenario without a duration.
func (sc *Scenario) ProgressSteps() int { return sc.load().ProgressSteps() }

// load is the scenario's client model.
func (sc *Scenario) load() Load {
	weights := make([]float64, len(sc.Targets))
	for i, t := range sc.Targets {
		weights[i] = t.Weight
	}
	return Load{
		Seed: sc.Seed, Duration: sc.Duration, Tasks: sc.Tasks, Workers: sc.Workers,
		AttemptTimeout: sc.AttemptTimeout, MaxAttempts: sc.MaxAttempts,
		ClientTimeout: sc.ClientTimeout, ClientAttempts: sc.ClientAttempts, TaskDeadline: sc.TaskDeadline,
		Think: sc.Think, TargetWeights: weights, SessionTasks: sc.SessionTasks, RetryRefusals: sc.RetryRefusals,
	}
}

// tiered reports whether the scenario's routes are of several cost tiers.
func (sc *Scenario) tiered() bool {
	return slices.ContainsFunc(sc.Routes, func(g RouteGroup) bool { return g.Tier != sc.Routes[0].Tier })
}

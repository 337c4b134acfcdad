package sim

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// DefaultPolicies are the policies `switchyard bench` compares, blind
// baselines first and the upper bound last.
var DefaultPolicies = []string{
	"round_robin", "random", "weighted", "proxyops",
	"switchyard", "switchyard_p2c", "switchyard_gamma1", "switchyard_gamma4",
	"oracle",
}

// enginePolicies are the engine configurations by policy name: the
// defaults and named variants of what the engine exposes.
var enginePolicies = map[string]struct {
	cfg   engine.Config
	blind bool
}{
	"round_robin":       {engine.Config{Picker: &engine.RoundRobin{}}, true},
	"random":            {engine.Config{Picker: engine.Random{}}, true},
	"switchyard":        {engine.Config{}, false},
	"switchyard_p2c":    {engine.Config{Picker: engine.PowerOfTwo{}}, false},
	"switchyard_gamma1": {engine.Config{Gamma: 1}, false},
	"switchyard_gamma4": {engine.Config{Gamma: 4}, false},
}

// Sweep varies one engine parameter over values: each value becomes a
// policy named "switchyard[param=value]".
type Sweep struct {
	Param  string
	Values []float64
}

// sweepParams are the engine parameters a sweep can vary.
var sweepParams = map[string]func(*engine.Config, float64){
	"alpha":              func(c *engine.Config, v float64) { c.Alpha = v },
	"gamma":              func(c *engine.Config, v float64) { c.Gamma = v },
	"prior":              func(c *engine.Config, v float64) { c.Prior = v },
	"prior_samples":      func(c *engine.Config, v float64) { c.PriorSamples = v },
	"suspect_after":      func(c *engine.Config, v float64) { c.SuspectAfter = int(v) },
	"cool_after":         func(c *engine.Config, v float64) { c.CoolAfter = int(v) },
	"cool_rate":          func(c *engine.Config, v float64) { c.CoolRate = v },
	"suspect_weight":     func(c *engine.Config, v float64) { c.SuspectWeight = v },
	"panic_threshold":    func(c *engine.Config, v float64) { c.PanicThreshold = v },
	"max_removed_share":  func(c *engine.Config, v float64) { c.MaxRemovedShare = v },
	"overwhelming_after": func(c *engine.Config, v float64) { c.OverwhelmingAfter = int(v) },
	"probe_successes":    func(c *engine.Config, v float64) { c.ProbeSuccesses = int(v) },
	"eject_after":        func(c *engine.Config, v float64) { c.EjectAfter = int(v) },
	"eject_time_s":       func(c *engine.Config, v float64) { c.EjectTime = time.Duration(v * float64(time.Second)) },
	"cooldown_cap_s":     func(c *engine.Config, v float64) { c.CooldownCap = time.Duration(v * float64(time.Second)) },
	"pace_start":         func(c *engine.Config, v float64) { c.PaceStart = v; c.PaceMax = max(c.PaceMax, v) },
	"pace_growth":        func(c *engine.Config, v float64) { c.PaceGrowth = v },
}

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
	return out, nil
}

// jobs resolves the policy names (and sweep) of opts.
func (sc *Scenario) jobs(opts Options) ([]job, error) {
	names := opts.Policies
	if names == nil {
		names = DefaultPolicies
	}
	seed := sc.Seed
	var jobs []job
	for _, name := range names {
		switch ep, ok := enginePolicies[name]; {
		case ok:
			cfg, blind := ep.cfg, ep.blind
			if rr, isRR := cfg.Picker.(*engine.RoundRobin); isRR && rr != nil {
				cfg.Picker = &engine.RoundRobin{} // a fresh counter per run
			}
			jobs = append(jobs, engineJob(name, cfg, blind, seed))
		case name == "proxyops":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewProxyOps(w, seed), nil }})
		case name == "oracle":
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewOracle(w, Epoch, seed), nil }})
		case name == "weighted":
			weights := sc.RouteWeights()
			jobs = append(jobs, job{name, func(w World) (Policy, error) { return NewWeighted(w, weights, seed), nil }})
		default:
			return nil, fmt.Errorf("unknown policy %q (want one of %s)", name, strings.Join(PolicyNames(), ", "))
		}
	}
	if sw := opts.Sweep; sw != nil {
		for _, v := range sw.Values {
			var cfg engine.Config
			sweepParams[sw.Param](&cfg, v)
			jobs = append(jobs, engineJob(fmt.Sprintf("switchyard[%s=%g]", sw.Param, v), cfg, false, seed))
		}
	}
	return jobs, nil
}

func engineJob(name string, cfg engine.Config, blind bool, seed uint64) job {
	cfg.Seed = seed
	return job{name, func(w World) (Policy, error) { return NewEnginePolicy(w, cfg, Epoch, blind) }}
}

// PolicyNames lists every policy Bench knows.
func PolicyNames() []string {
	names := []string{"weighted", "proxyops", "oracle"}
	for n := range enginePolicies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// load is the scenario's client model.
func (sc *Scenario) load() Load {
	weights := make([]float64, len(sc.Targets))
	for i, t := range sc.Targets {
		weights[i] = t.Weight
	}
	return Load{
		Seed: sc.Seed, Tasks: sc.Tasks, Workers: sc.Workers, AttemptTimeout: sc.AttemptTimeout,
		MaxAttempts: sc.MaxAttempts, TaskDeadline: sc.TaskDeadline, Think: sc.Think, TargetWeights: weights,
		SessionTasks: sc.SessionTasks,
	}
}

// Package demo runs the engine against a small simulated pool on a virtual
// clock and shows how it routes around bad exits, next to blind
// round-robin on the same load. It is the quick look for a newcomer; the
// full simulator with scenarios lives in internal/sim.
package demo

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// exit is a simulated route: how it answers each target.
type exit struct {
	id      string
	latency time.Duration
	answer  func(target string, now time.Time, rng *rand.Rand) engine.Class
}

func always(c engine.Class) func(string, time.Time, *rand.Rand) engine.Class {
	return func(string, time.Time, *rand.Rand) engine.Class { return c }
}

// pool is the demo's exits: four good, one slow, one dead, one banned on
// shop.example, one that fails intermittently.
func pool() []exit {
	return []exit{
		{"good-1", 80 * time.Millisecond, always(engine.OK)},
		{"good-2", 90 * time.Millisecond, always(engine.OK)},
		{"good-3", 100 * time.Millisecond, always(engine.OK)},
		{"good-4", 120 * time.Millisecond, always(engine.OK)},
		{"slow", 1500 * time.Millisecond, always(engine.OK)},
		{"dead", 0, always(engine.ProxyConnectFailed)},
		{"banned-on-shop", 90 * time.Millisecond, func(t string, _ time.Time, _ *rand.Rand) engine.Class {
			if t == "shop.example" {
				return engine.Blocked
			}
			return engine.OK
		}},
		{"flaky", 100 * time.Millisecond, func(_ string, _ time.Time, rng *rand.Rand) engine.Class {
			if rng.Float64() < 0.5 {
				return engine.ProxyTimeout
			}
			return engine.OK
		}},
	}
}

var (
	targets = []string{"shop.example", "news.example", "api.example"}
	start   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Result is one policy's run.
type Result struct {
	Policy    string
	Tasks     int
	Completed int
	Attempts  int
	Share     map[string]int // attempts per exit
	Latency   time.Duration  // mean latency of completed tasks
	Changes   []engine.Event // state changes, in order
}

// Run sends tasks tasks (each up to 3 attempts on different exits) through
// an engine using picker, on a virtual clock at 20 tasks a second.
func Run(name string, picker engine.Picker, tasks int, seed uint64) (Result, error) {
	e, err := engine.New(engine.Config{Picker: picker, Seed: seed}, nil)
	if err != nil {
		return Result{}, err
	}
	exits := pool()
	byID := map[string]exit{}
	now := start
	for _, x := range exits {
		byID[x.id] = x
		if err := e.AddRoute(now, engine.RouteSpec{ID: x.id}); err != nil {
			return Result{}, err
		}
	}
	sub := e.Subscribe(4096)
	defer sub.Close()
	var buf []engine.Event
	rng := rand.New(rand.NewPCG(seed, 1))
	res := Result{Policy: name, Tasks: tasks, Share: map[string]int{}}
	var total time.Duration
	for i := range tasks {
		now = now.Add(50 * time.Millisecond)
		if i%20 == 0 {
			e.Sweep(now)
			for _, job := range e.ProbeJobs(nil) {
				x := byID[job.Route]
				e.ReportProbe(now, job, engine.Outcome{Class: x.answer(job.Target, now, rng), Latency: x.latency})
			}
		}
		req := engine.Request{Target: targets[i%len(targets)]}
		var spent time.Duration
		for range 3 {
			l, err := e.Acquire(now, req)
			if err != nil {
				break
			}
			x := byID[l.Route]
			class := x.answer(req.Target, now, rng)
			lat := x.latency
			if class == engine.ProxyConnectFailed {
				lat = 5 * time.Millisecond
			} else if class == engine.ProxyTimeout {
				lat = 2 * time.Second
			}
			spent += lat
			res.Attempts++
			res.Share[l.Route]++
			e.Report(now, l, engine.Outcome{Class: class, Latency: lat})
			if class == engine.OK {
				res.Completed++
				total += spent
				break
			}
			req.Avoid = append(req.Avoid, l.Route)
		}
		buf = sub.Poll(buf[:0])
		for _, ev := range buf {
			if ev.Kind == engine.EventState || ev.Kind == engine.EventIncident {
				res.Changes = append(res.Changes, ev)
			}
		}
	}
	if res.Completed > 0 {
		res.Latency = total / time.Duration(res.Completed)
	}
	return res, nil
}

// Print runs the engine and round-robin side by side and writes a report.
func Print(w io.Writer, tasks int, seed uint64) error {
	sw, err := Run("switchyard", engine.WeightedRandom{}, tasks, seed)
	if err != nil {
		return err
	}
	rr, err := Run("round_robin", &engine.RoundRobin{}, tasks, seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d tasks over %d exits, up to 3 attempts each, virtual clock\n\n", tasks, len(pool()))
	fmt.Fprintf(w, "%-12s %10s %14s %12s\n", "policy", "completed", "attempts/task", "mean latency")
	for _, r := range []Result{sw, rr} {
		fmt.Fprintf(w, "%-12s %9.1f%% %14.2f %12v\n", r.Policy, 100*float64(r.Completed)/float64(r.Tasks),
			float64(r.Attempts)/float64(r.Completed), r.Latency.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nshare of attempts per exit\n%-16s %10s %12s\n", "exit", "switchyard", "round_robin")
	ids := make([]string, 0, len(pool()))
	for _, x := range pool() {
		ids = append(ids, x.id)
	}
	for _, id := range ids {
		fmt.Fprintf(w, "%-16s %9.1f%% %11.1f%%\n", id,
			100*float64(sw.Share[id])/float64(sw.Attempts), 100*float64(rr.Share[id])/float64(rr.Attempts))
	}
	fmt.Fprintf(w, "\nfirst state changes the engine made (of %d)\n", len(sw.Changes))
	changes := sw.Changes
	for _, ev := range changes[:min(len(changes), 24)] {
		scope := ev.Route
		if ev.Target != "" {
			scope += " × " + ev.Target
		}
		fmt.Fprintf(w, "  +%-7v %-30s %-9v → %-9v %s (%v)\n", ev.Time.Sub(start).Round(100*time.Millisecond),
			scope, ev.From, ev.To, ev.Reason, ev.Class)
	}
	return nil
}

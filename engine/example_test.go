package engine_test

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// A dead exit fails the check every new route gets before users'
// traffic, is probed again as its cooldowns expire and finally ejected,
// while traffic flows through the others; time is passed in, so the
// example runs on a virtual clock.
func Example() {
	e, err := engine.New(engine.Config{Seed: 1, MaxRemovedShare: -1}, nil)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []string{"exit-a", "exit-b", "exit-c"} {
		e.AddRoute(now, engine.RouteSpec{ID: id})
	}
	events := e.Subscribe(1024)
	for range 600 {
		now = now.Add(100 * time.Millisecond)
		e.Sweep(now)
		for _, job := range e.ProbeJobs(nil) { // the prober's work
			probe := engine.Outcome{Class: engine.OK, Latency: 20 * time.Millisecond}
			if job.Route == "exit-c" {
				probe = engine.Outcome{Class: engine.ProxyConnectFailed}
			}
			e.ReportProbe(now, job, probe)
		}
		l, err := e.Acquire(now, engine.Request{Target: "example.com"})
		if err != nil {
			panic(err)
		}
		outcome := engine.Outcome{Class: engine.OK, Latency: 80 * time.Millisecond}
		if l.Route == "exit-c" {
			outcome = engine.Outcome{Class: engine.ProxyConnectFailed}
		}
		e.Report(now, l, outcome)
	}
	for _, ev := range events.Poll(nil) {
		if ev.Kind == engine.EventState && ev.Route == "exit-c" {
			fmt.Printf("%-9v → %-9v %s\n", ev.From, ev.To, ev.Reason)
		}
	}
	// Output:
	// candidate → cooling   probe failed
	// cooling   → half_open cooldown expired
	// half_open → cooling   probe failed
	// cooling   → half_open cooldown expired
	// half_open → ejected   failed recoveries
}

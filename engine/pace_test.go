package engine

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// lease429 leases a route for target at now, avoiding the others, and
// reports a 429 with a Retry-After of ra.
func lease429(t *testing.T, e *Engine, now time.Time, route, target string, avoid []string, ra time.Duration) {
	t.Helper()
	l, err := e.Acquire(now, Request{Target: target, Avoid: avoid})
	if err != nil || l.Route != route {
		t.Fatalf("lease %+v, %v; want %s", l, err, route)
	}
	if err := e.Report(now, l, Outcome{Class: RateLimited, RetryAfter: ra}); err != nil {
		t.Fatal(err)
	}
}

// pairRate is the learned rate of route slot toward target at now (0: not
// held).
func pairRate(e *Engine, slot int32, target string, now time.Time) float64 {
	tp := e.target(target).pace.Load()
	if tp == nil {
		return 0
	}
	p := tp.pair(slot)
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current(&e.cfg, now.UnixNano())
}

func TestPaceLearnedFrom429s(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceFloor: 0.3}, 2)
	now := start
	lease429(t, e, now, "r0", "s.com", []string{"r1"}, time.Second)
	if got := pairRate(e, 0, "s.com", now); got != 4 {
		t.Fatalf("rate after the first 429: %v, want PaceStart 4", got)
	}
	if got := pairRate(e, 1, "s.com", now); got != 0 {
		t.Fatalf("a route that had no 429 is held to %v", got)
	}
	// Each further 429 halves the current rate, grown since the last.
	now = now.Add(30 * time.Second)
	e.learnPace(e.target("s.com"), 0, now.UnixNano())
	if got, want := pairRate(e, 0, "s.com", now), 4*math.Pow(1.1, 0.5)/2; math.Abs(got-want) > 1e-9 {
		t.Fatalf("rate after a second 429: %v, want %v", got, want)
	}
	for range 5 {
		e.learnPace(e.target("s.com"), 0, now.UnixNano())
	}
	if got := pairRate(e, 0, "s.com", now); got != 0.3 {
		t.Fatalf("rate after many 429s: %v, want the floor 0.3", got)
	}
	// It grows back by PaceGrowth a minute, up to PaceMax.
	if got, want := pairRate(e, 0, "s.com", now.Add(10*time.Minute)), 0.3*math.Pow(1.1, 10); math.Abs(got-want) > 1e-9 {
		t.Fatalf("rate 10 minutes on: %v, want %v", got, want)
	}
	if got := pairRate(e, 0, "s.com", now.Add(24*time.Hour)); got != 100 {
		t.Fatalf("rate a day on: %v, want PaceMax", got)
	}
}

// A pair held to its rate is passed over, even in fallback, so requests go
// to the other routes or wait: never to a pair that will answer 429.
func TestPacedPairsArePassedOver(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: 1}, 2)
	lease429(t, e, start, "r0", "s.com", []string{"r1"}, time.Millisecond)
	now := start.Add(time.Second)
	e.Sweep(now) // the Retry-After is over: r0 is half-open for s.com
	for _, job := range e.ProbeJobs(nil) {
		e.ReportProbe(now, job, Outcome{Class: OK})
	}
	for _, job := range e.ProbeJobs(nil) {
		e.ReportProbe(now, job, Outcome{Class: OK})
	}
	// r0 may take one request a second toward s.com: its token is spent by
	// the next lease of it, then it is passed over until refilled.
	counts := map[string]int{}
	for i := range 40 {
		at := now.Add(time.Duration(i) * 50 * time.Millisecond) // 2 s
		l, err := e.Acquire(at, Request{Target: "s.com"})
		if err != nil {
			t.Fatal(err)
		}
		counts[l.Route]++
		e.Report(at, l, Outcome{Class: OK, Latency: time.Millisecond})
	}
	if counts["r0"] > 3 || counts["r0"] == 0 || counts["r1"] < 37 {
		t.Errorf("picks over 2 s: %v; want r0 at most about its 1 request/s", counts)
	}
	// Other targets are not paced.
	for range 20 {
		l, err := e.Acquire(now, Request{Target: "other.com", Avoid: []string{"r1"}})
		if err != nil || l.Route != "r0" {
			t.Fatalf("other.com: %+v %v", l, err)
		}
		e.Report(now, l, Outcome{Class: OK})
	}
	// With every route of the target held, Acquire says so instead of
	// falling back to one of them; strict or not, and for a session.
	lease429(t, e, now, "r1", "s.com", []string{"r0"}, time.Millisecond)
	late := now.Add(time.Second)
	e.Sweep(late)
	for range 2 {
		for _, job := range e.ProbeJobs(nil) {
			e.ReportProbe(late, job, Outcome{Class: OK})
		}
	}
	for _, req := range []Request{{Target: "s.com"}, {Target: "s.com", Strict: true}} {
		for range 4 {
			l, err := e.Acquire(late, req)
			if errors.Is(err, ErrPaced) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			e.Report(late, l, Outcome{Class: OK})
		}
		_, err := e.Acquire(late, req)
		pe, ok := errors.AsType[*PacedError](err)
		if !errors.Is(err, ErrPaced) || !ok || pe.RetryAfter <= 0 || pe.RetryAfter > time.Second {
			t.Errorf("%+v with every pair at its rate: %v, want ErrPaced with a wait under 1 s", req, err)
		}
	}
}

// A 429 from many routes is every exit being told to slow down, not the
// site down: no incident, and every pair honours its Retry-After.
func TestRateLimitsAreNoIncident(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 10)
	for i := range 10 {
		report(t, e, start, fmt.Sprintf("r%d", i), "s.com", RateLimited, 1)
	}
	if inc := e.Incidents(); len(inc) != 0 {
		t.Fatalf("429s opened %+v", inc)
	}
	for i := range 10 {
		if s, _ := pairState(t, e, fmt.Sprintf("r%d", i), "s.com"); s != Cooling {
			t.Fatalf("%s's pair is %v after a 429", fmt.Sprintf("r%d", i), s)
		}
	}
}

func TestPaceDisabled(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{PaceStart: -1, MaxRemovedShare: -1}, 2)
	lease429(t, e, start, "r0", "s.com", []string{"r1"}, time.Millisecond)
	if e.target("s.com").pace.Load() != nil {
		t.Fatal("PaceStart < 0 still learned a rate")
	}
}

func TestPaceEviction(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 3)
	lease429(t, e, start, "r0", "s.com", []string{"r1", "r2"}, time.Millisecond)
	tracked := func() int {
		return len(*e.target("s.com").pace.Load().pairs.Load())
	}
	e.Sweep(start.Add(time.Minute)) // an eviction pass: r0 is still held
	if tracked() != 1 {
		t.Fatalf("%d pairs tracked a minute on, want r0", tracked())
	}
	e.Sweep(start.Add(24 * time.Hour)) // r0's rate has long grown to PaceMax
	if tracked() != 0 {
		t.Fatalf("%d pairs tracked a day on", tracked())
	}
}

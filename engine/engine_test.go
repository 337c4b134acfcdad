package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var start = time.Unix(0, t0).UTC()

// newTestEngine returns a seeded engine with routes r0..r(n-1).
func newTestEngine(t testing.TB, cfg Config, n int) *Engine {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	// Routes serve at once: internal/probe TestCandidatesAreChecked tests the check.
	cfg.UncheckedCandidates = true
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func mustAcquire(t testing.TB, e *Engine, now time.Time, req Request) Lease {
	t.Helper()
	l, err := e.Acquire(now, req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

// report feeds n outcomes of class c for route id and target as feedback
// (no lease, never stale).
func report(t testing.TB, e *Engine, now time.Time, id, target string, c Class, n int) {
	t.Helper()
	o := Outcome{Class: c}
	if c == OK {
		o.Latency = 100 * time.Millisecond
	}
	for range n {
		if err := e.Feedback(now, id, target, o); err != nil {
			t.Fatal(err)
		}
	}
}

func state(t testing.TB, e *Engine, id string) State {
	t.Helper()
	st, ok := e.Route(id)
	if !ok {
		t.Fatalf("no route %s", id)
	}
	return st.Health.State
}

func pairState(t testing.TB, e *Engine, id, target string) (State, bool) {
	t.Helper()
	st, _ := e.Route(id)
	for _, p := range st.Targets {
		if p.Target == target {
			return p.Health.State, true
		}
	}
	return 0, false
}

func TestAcquireReport(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 3)
	l := mustAcquire(t, e, start, Request{Target: "example.com"})
	if l.Route == "" || l.Target != "example.com" || l.Expires.Sub(start) != e.Config().LeaseTTL {
		t.Fatalf("lease %+v", l)
	}
	if st, _ := e.Route(l.Route); st.Inflight != 1 {
		t.Fatalf("in-flight %d, want 1", st.Inflight)
	}
	if err := e.Report(start, l, Outcome{Class: OK, Latency: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := e.Report(start, l, okOutcome); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("second report: %v, want ErrUnknownLease", err)
	}
	if st, _ := e.Route(l.Route); st.Inflight != 0 || st.Health.Samples != 1 {
		t.Fatalf("after report: in-flight %d samples %d", st.Inflight, st.Health.Samples)
	}
}

func TestDeadRouteIsRoutedAround(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 5)
	now := start
	// Its first attempt, so that the rest is about what that taught.
	first, err := e.Acquire(now, Request{Target: "example.com", Avoid: []string{"r1", "r2", "r3", "r4"}, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Report(now, first, Outcome{Class: ProxyConnectFailed}); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i := range 2000 {
		now = now.Add(10 * time.Millisecond)
		l := mustAcquire(t, e, now, Request{Target: "example.com"})
		o := Outcome{Class: OK, Latency: 80 * time.Millisecond}
		if l.Route == "r0" {
			o = Outcome{Class: ProxyConnectFailed}
		}
		if i >= 1000 {
			counts[l.Route]++
		}
		if err := e.Report(now, l, o); err != nil {
			t.Fatal(err)
		}
	}
	if counts["r0"] > 0 {
		t.Errorf("dead route got %d of the last 1000 requests (%v)", counts["r0"], counts)
	}
	// Its first refusal makes it too costly to draw, before a second could
	// cool it: it may stay a candidate, but not one that weighs anything.
	dead, _ := e.Route("r0")
	live, _ := e.Route("r1")
	if s := dead.Health.State; s == Healthy || s == Candidate && dead.Weight > live.Weight/10 {
		t.Errorf("dead route is %v with weight %v against a live one's %v", s, dead.Weight, live.Weight)
	}
}

func TestWakeWithoutReportsAndProbeIdempotency(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 4)
	report(t, e, start, "r1", "", ProxyAuth, 1)
	if s := state(t, e, "r1"); s != Cooling {
		t.Fatalf("r1 %v, want cooling", s)
	}
	st, _ := e.Route("r1")
	deadline := st.Health.UntilTime()
	if jobs := e.ProbeJobs(nil); len(jobs) != 0 {
		t.Fatalf("probe jobs before the deadline: %v", jobs)
	}
	// Nothing reports on r1; an acquire for any target after the deadline
	// wakes it.
	mustAcquire(t, e, deadline.Add(-time.Millisecond), Request{Target: "a.com"})
	if s := state(t, e, "r1"); s != Cooling {
		t.Fatalf("woke early: %v", s)
	}
	for range 5 {
		mustAcquire(t, e, deadline, Request{Target: "a.com"})
		e.Sweep(deadline)
	}
	if s := state(t, e, "r1"); s != HalfOpen {
		t.Fatalf("r1 %v, want half_open", s)
	}
	jobs := e.ProbeJobs(nil)
	if len(jobs) != 1 || jobs[0].Route != "r1" || jobs[0].Target != "" {
		t.Fatalf("probe jobs %+v, want one neutral job for r1", jobs)
	}
	if more := e.ProbeJobs(nil); len(more) != 0 {
		t.Fatalf("jobs issued twice: %+v", more)
	}
	// Half-open routes get no users' traffic.
	for range 200 {
		if l := mustAcquire(t, e, deadline, Request{Target: "a.com"}); l.Route == "r1" {
			t.Fatal("half-open route got users' traffic")
		}
	}
	// A failed probe re-cools (new generation, a new job later); answering
	// the old job again is stale and moves nothing.
	if err := e.ReportProbe(deadline, jobs[0], Outcome{Class: ProxyAuth}); err != nil {
		t.Fatal(err)
	}
	if s := state(t, e, "r1"); s != Cooling {
		t.Fatalf("after failed probe: %v", s)
	}
	e.ReportProbe(deadline, jobs[0], okOutcome)
	e.ReportProbe(deadline, jobs[0], okOutcome)
	if s := state(t, e, "r1"); s != Cooling {
		t.Fatalf("stale probe moved the route to %v", s)
	}
	st, _ = e.Route("r1")
	e.Sweep(st.Health.UntilTime())
	jobs = e.ProbeJobs(nil)
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v, want one for the new generation", jobs)
	}
	now := st.Health.UntilTime()
	// Each job is answered once; a success that does not yet restore the
	// route issues the next job, and answering a job twice counts once.
	for i := range e.Config().ProbeSuccesses {
		if len(jobs) != 1 || int(jobs[0].Seq) != i {
			t.Fatalf("probe %d: jobs %+v", i, jobs)
		}
		e.ReportProbe(now, jobs[0], okOutcome)
		if i == 0 {
			e.ReportProbe(now, jobs[0], okOutcome) // duplicate
			if s := state(t, e, "r1"); s != HalfOpen {
				t.Fatalf("a duplicate probe report restored the route: %v", s)
			}
		}
		jobs = e.ProbeJobs(nil)
	}
	if s := state(t, e, "r1"); s != Healthy {
		t.Fatalf("after probes: %v, want healthy", s)
	}
	if len(jobs) != 0 {
		t.Fatalf("jobs after recovery: %+v", jobs)
	}
}

func TestStaleLeaseDoesNotMoveState(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 1)
	var leases []Lease
	for range 10 {
		leases = append(leases, mustAcquire(t, e, start, Request{Target: "a.com"}))
	}
	for _, l := range leases[:4] {
		e.Report(start, l, Outcome{Class: ProxyTimeout})
	}
	st, _ := e.Route("r0")
	if st.Health.State != Suspect {
		// Leases from before the suspect transition are stale: the route
		// needs fresh failures to cool.
		t.Fatalf("state %v, want suspect", st.Health.State)
	}
	for _, l := range leases[4:] {
		e.Report(start.Add(time.Second), l, Outcome{Class: ProxyTimeout})
	}
	st2, _ := e.Route("r0")
	if st2.Health.State != Suspect || st2.Health.Gen != st.Health.Gen {
		t.Fatalf("stale reports moved the route: %v gen %d→%d", st2.Health.State, st.Health.Gen, st2.Health.Gen)
	}
	if st2.Health.Samples != 10 {
		t.Fatalf("stale evidence not recorded: %d samples", st2.Health.Samples)
	}
	l := mustAcquire(t, e, start.Add(2*time.Second), Request{Target: "a.com"})
	e.Report(start.Add(2*time.Second), l, Outcome{Class: ProxyTimeout})
	if s := state(t, e, "r0"); s != Cooling {
		t.Fatalf("fresh failure: %v, want cooling", s)
	}
}

func TestTargetScopedFailuresStayOnTheirTarget(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 4)
	report(t, e, start, "r2", "shop.com", Blocked, 6)
	if s, ok := pairState(t, e, "r2", "shop.com"); !ok || s != Cooling {
		t.Fatalf("pair r2×shop.com %v (exists %v), want cooling", s, ok)
	}
	if s := state(t, e, "r2"); s != Candidate {
		t.Fatalf("403s moved the route's global state to %v", s)
	}
	st, _ := e.Route("r2")
	if st.Health.Samples != 0 {
		t.Fatalf("403s counted in global evidence")
	}
	for range 300 {
		if l := mustAcquire(t, e, start, Request{Target: "shop.com"}); l.Route == "r2" {
			t.Fatal("banned pair got traffic for its target")
		} else {
			e.Report(start, l, okOutcome)
		}
	}
	// The sweep, as the gateway runs it every second, prices r2, which has
	// no evidence of its own, at the pool's typical success.
	e.Sweep(start)
	got := 0
	for range 300 {
		l := mustAcquire(t, e, start, Request{Target: "news.com"})
		if l.Route == "r2" {
			got++
		}
		e.Report(start, l, okOutcome)
	}
	if got == 0 {
		t.Fatal("route banned on one site got no traffic for another")
	}
	// Pair records exist only for negative evidence.
	if _, ok := pairState(t, e, "r1", "news.com"); ok {
		t.Fatal("a success created a pair record")
	}
}

func TestIncidentGuard(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 10)
	sub := e.Subscribe(1024)
	now := start
	// The site fails every route for 40s.
	for s := range 40 {
		now = start.Add(time.Duration(s) * time.Second)
		report(t, e, now, fmt.Sprintf("r%d", s%10), "down.com", Target5xx, 1)
	}
	inc := e.Incidents()
	if len(inc) != 1 || inc[0].Target != "down.com" || inc[0].Class != Target5xx {
		t.Fatalf("incidents %+v", inc)
	}
	cooled := 0
	for i := range 10 {
		if s, ok := pairState(t, e, fmt.Sprintf("r%d", i), "down.com"); ok && !s.Usable() {
			cooled++
		}
	}
	if cooled > 0 {
		t.Fatalf("%d routes still cooled for a target in incident", cooled)
	}
	l := mustAcquire(t, e, now, Request{Target: "down.com"})
	if !l.Incident {
		t.Error("lease does not flag the incident")
	}
	e.Report(now, l, Outcome{Class: Target5xx})
	// Successes return: the incident closes.
	for i := range 200 {
		report(t, e, now, fmt.Sprintf("r%d", i%10), "down.com", OK, 1)
	}
	if inc := e.Incidents(); len(inc) != 0 {
		t.Fatalf("incident still open: %+v", inc)
	}
	var opened, closed bool
	for _, ev := range sub.Poll(nil) {
		if ev.Kind == EventIncident {
			opened = opened || ev.Open
			closed = closed || !ev.Open
		}
	}
	if !opened || !closed {
		t.Errorf("incident events: opened %v closed %v", opened, closed)
	}
	// One route failing alone is not an incident.
	report(t, e, now, "r3", "fine.com", Blocked, 10)
	if inc := e.Incidents(); len(inc) != 0 {
		t.Fatalf("single-route failures opened %+v", inc)
	}
}

func TestPoolGuards(t *testing.T) {
	t.Parallel()
	t.Run("removals capped at MaxRemovedShare", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 10)
		for i := range 5 {
			report(t, e, start, fmt.Sprintf("r%d", i), "", ProxyTimeout, 5)
		}
		cooling, suspect := 0, 0
		for i := range 5 {
			switch state(t, e, fmt.Sprintf("r%d", i)) {
			case Cooling:
				cooling++
			case Suspect:
				suspect++
			}
		}
		if cooling != 2 || suspect != 3 {
			t.Fatalf("cooling %d suspect %d, want 2 and 3 (20%% of 10)", cooling, suspect)
		}
		// Overwhelming evidence passes the cap.
		report(t, e, start, "r4", "", ProxyTimeout, 5)
		if s := state(t, e, "r4"); s != Cooling {
			t.Fatalf("overwhelming evidence: %v, want cooling", s)
		}
	})
	t.Run("panic spreads load over excluded routes", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{MaxRemovedShare: -1}, 10)
		for i := range 6 {
			report(t, e, start, fmt.Sprintf("r%d", i), "", ProxyAuth, 1)
		}
		seen := map[string]bool{}
		for range 500 {
			l := mustAcquire(t, e, start, Request{Target: "a.com"})
			if !l.Panic {
				t.Fatal("lease not marked panic")
			}
			seen[l.Route] = true
			e.Report(start, l, Outcome{Class: ClientError})
		}
		if !seen["r0"] || !seen["r9"] {
			t.Fatalf("panic did not spread: %v", seen)
		}
	})
	t.Run("panic passes over half-open routes, which still count", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{MaxRemovedShare: -1}, 10)
		for i := range 6 {
			report(t, e, start, fmt.Sprintf("r%d", i), "", ProxyAuth, 1)
		}
		later := start.Add(time.Hour) // every cooldown over: half-open, the probe queue's
		for range 500 {
			l := mustAcquire(t, e, later, Request{Target: "a.com"})
			if !l.Panic {
				t.Fatalf("lease %+v: 4 eligible routes of 10 judged, want panic", l)
			}
			if n, _ := strconv.Atoi(strings.TrimPrefix(l.Route, "r")); n < 6 {
				t.Fatalf("panic drew %s, %v", l.Route, state(t, e, l.Route))
			}
			e.Report(later, l, Outcome{Class: ClientError})
		}
		if s := state(t, e, "r0"); s != HalfOpen {
			t.Fatalf("r0 is %v, want half_open", s)
		}
	})
	t.Run("least-bad fallback and strict mode", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 3)
		for i := range 3 {
			report(t, e, start, fmt.Sprintf("r%d", i), "", ProxyAuth, 1)
		}
		l := mustAcquire(t, e, start, Request{Target: "a.com"})
		if !l.Fallback {
			t.Fatalf("lease %+v, want fallback", l)
		}
		if _, err := e.Acquire(start, Request{Target: "a.com", Strict: true}); !errors.Is(err, ErrNoRoute) {
			t.Fatalf("strict: %v, want ErrNoRoute", err)
		}
	})
	t.Run("target panic lifts pair exclusions", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 4)
		for i := range 3 {
			report(t, e, start, fmt.Sprintf("r%d", i), "hard.com", ContentInvalid, 1)
		}
		l := mustAcquire(t, e, start, Request{Target: "hard.com"})
		if !l.Panic {
			t.Fatalf("lease %+v, want panic for a target with 3 of 4 routes excluded", l)
		}
	})
	t.Run("the site's refusals are no reason to panic", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 10)
		for i := range 8 {
			report(t, e, start, fmt.Sprintf("r%d", i), "picky.com", Blocked, 1)
		}
		for range 500 {
			l := mustAcquire(t, e, start, Request{Target: "picky.com"})
			if l.Panic || (l.Route != "r8" && l.Route != "r9") {
				t.Fatalf("lease %+v: 8 of 10 routes refused by the site, want r8 or r9 and no panic", l)
			}
			e.Report(start, l, okOutcome)
		}
	})
}

func TestSessions(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 5)
	first := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1"})
	e.Report(start, first, okOutcome)
	for i := range 20 {
		now := start.Add(time.Duration(i) * time.Second)
		l := mustAcquire(t, e, now, Request{Target: "a.com", Session: "s1"})
		if l.Route != first.Route {
			t.Fatalf("session moved from %s to %s", first.Route, l.Route)
		}
		e.Report(now, l, okOutcome)
	}
	// The session's route is banned on the target: never a silent switch.
	report(t, e, start, first.Route, "a.com", RateLimited, 1)
	if _, err := e.Acquire(start, Request{Target: "a.com", Session: "s1"}); !errors.Is(err, ErrSessionRestartRequired) {
		t.Fatalf("got %v, want ErrSessionRestartRequired", err)
	}
	// The binding expires after SessionTTL idle.
	later := start.Add(e.Config().SessionTTL + time.Hour)
	e.Sweep(later)
	if _, err := e.Acquire(later, Request{Target: "b.com", Session: "s1"}); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

// A session's first request taken with BindLater is not bound by its
// lease: it may fail over to another route, and the session binds to the
// one whose attempt succeeded; a bound session keeps its route.
func TestSessionBindLater(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		run  func(t *testing.T, e *Engine)
	}{
		{"first exit fails: the session binds where a retry succeeded", func(t *testing.T, e *Engine) {
			first := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true})
			if !first.Unbound || first.Session != "s1" {
				t.Fatalf("first lease %+v, want an Unbound lease of s1", first)
			}
			e.Report(start, first, Outcome{Class: ProxyConnectFailed})
			report(t, e, start, first.Route, "a.com", ProxyConnectFailed, 5)
			retry := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true, Avoid: []string{first.Route}})
			if retry.Route == first.Route || !retry.Unbound {
				t.Fatalf("retry %+v, want another route, Unbound", retry)
			}
			e.Report(start, retry, okOutcome)
			if err := e.Bind(start, retry); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				l := mustAcquire(t, e, start.Add(time.Duration(i)*time.Second), Request{Target: "a.com", Session: "s1", BindLater: true})
				if l.Route != retry.Route || l.Unbound {
					t.Fatalf("request %d: %+v, want bound to %s", i, l, retry.Route)
				}
				e.Report(start, l, okOutcome)
			}
		}},
		{"nothing bound before Bind", func(t *testing.T, e *Engine) {
			l := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true})
			e.Report(start, l, okOutcome)
			// Not bound: a request avoiding that route gets another one
			// rather than ErrSessionRestartRequired or the same route.
			l2 := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true, Avoid: []string{l.Route}})
			if l2.Route == l.Route || !l2.Unbound {
				t.Fatalf("second lease %+v: the session was bound by its lease", l2)
			}
			e.Report(start, l2, okOutcome)
		}},
		{"the first Bind wins", func(t *testing.T, e *Engine) {
			a := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true})
			b := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true, Avoid: []string{a.Route}})
			e.Report(start, a, okOutcome)
			e.Report(start, b, okOutcome)
			if err := e.Bind(start, b); err != nil {
				t.Fatal(err)
			}
			if err := e.Bind(start, a); err != nil {
				t.Fatal(err)
			}
			if l := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1"}); l.Route != b.Route {
				t.Fatalf("session on %s, want %s, the first bound", l.Route, b.Route)
			}
		}},
		{"a bound session fails loudly", func(t *testing.T, e *Engine) {
			l := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1", BindLater: true})
			e.Report(start, l, okOutcome)
			if err := e.Bind(start, l); err != nil {
				t.Fatal(err)
			}
			report(t, e, start, l.Route, "a.com", RateLimited, 1)
			if _, err := e.Acquire(start, Request{Target: "a.com", Session: "s1", BindLater: true}); !errors.Is(err, ErrSessionRestartRequired) {
				t.Fatalf("got %v, want ErrSessionRestartRequired", err)
			}
		}},
		{"without BindLater the lease binds", func(t *testing.T, e *Engine) {
			l := mustAcquire(t, e, start, Request{Target: "a.com", Session: "s1"})
			if l.Unbound {
				t.Fatalf("lease %+v is Unbound without BindLater", l)
			}
			e.Report(start, l, Outcome{Class: ProxyConnectFailed})
			report(t, e, start, l.Route, "a.com", ProxyConnectFailed, 5)
			if _, err := e.Acquire(start, Request{Target: "a.com", Session: "s1", BindLater: true}); !errors.Is(err, ErrSessionRestartRequired) {
				t.Fatalf("got %v, want ErrSessionRestartRequired", err)
			}
		}},
		{"Bind of an unknown route", func(t *testing.T, e *Engine) {
			if err := e.Bind(start, Lease{Route: "gone", Target: "a.com", Session: "s1", Unbound: true}); !errors.Is(err, ErrUnknownRoute) {
				t.Fatalf("got %v, want ErrUnknownRoute", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newTestEngine(t, Config{MaxRemovedShare: -1}, 3))
		})
	}
}

func TestLeaseExpiryIsAnAmbiguousTimeout(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 1)
	l := mustAcquire(t, e, start, Request{Target: "a.com"})
	e.Sweep(l.Expires.Add(-time.Second))
	if st, _ := e.Route("r0"); st.Inflight != 1 {
		t.Fatal("lease reaped early")
	}
	e.Sweep(l.Expires)
	st, _ := e.Route("r0")
	if st.Inflight != 0 {
		t.Fatalf("in-flight %d after expiry", st.Inflight)
	}
	if len(st.Targets) != 1 || st.Targets[0].Health.ConsecFail != 1 {
		t.Fatalf("expired lease not counted against the pair: %+v", st.Targets)
	}
	if err := e.Report(l.Expires, l, okOutcome); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("report after reaping: %v", err)
	}
}

func TestConstraintsAndCapacity(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Seed: 3, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	specs := []struct{ id, labels string }{
		{"us1", "region=us provider=a"}, {"us2", "region=us provider=b"}, {"de1", "region=de provider=a"},
	}
	for _, s := range specs {
		l, err := ParseLabels(s.labels)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AddRoute(start, RouteSpec{ID: s.id, Labels: l, MaxInflight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	us, _ := ParseLabels("region=us")
	usB, _ := ParseLabels("region=us provider=b")
	fr, _ := ParseLabels("region=fr")
	for range 50 {
		l := mustAcquire(t, e, start, Request{Target: "a.com", Labels: usB})
		if l.Route != "us2" {
			t.Fatalf("constraint region=us provider=b got %s", l.Route)
		}
		e.Report(start, l, okOutcome)
	}
	if _, err := e.Acquire(start, Request{Target: "a.com", Labels: fr}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("unknown label: %v, want ErrNoMatch", err)
	}
	a := mustAcquire(t, e, start, Request{Target: "a.com", Labels: us})
	b := mustAcquire(t, e, start, Request{Target: "a.com", Labels: us})
	if a.Route == b.Route {
		t.Fatalf("max_inflight=1 route leased twice: %s", a.Route)
	}
	if _, err := e.Acquire(start, Request{Target: "a.com", Labels: us, Strict: true}); err == nil {
		t.Fatal("third lease on two max_inflight=1 routes succeeded")
	}
	// Avoid: a retry goes to a different route.
	e.Report(start, a, okOutcome)
	c := mustAcquire(t, e, start, Request{Target: "a.com", Labels: us, Avoid: []string{b.Route}})
	if c.Route == b.Route {
		t.Fatal("avoided route chosen")
	}
}

func TestOperatorActions(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 3)
	l := mustAcquire(t, e, start, Request{Target: "a.com"})
	if err := e.Drain(start, l.Route); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if m := mustAcquire(t, e, start, Request{Target: "a.com"}); m.Route == l.Route {
			t.Fatal("draining route got new work")
		} else {
			e.Report(start, m, okOutcome)
		}
	}
	if err := e.Report(start, l, okOutcome); err != nil {
		t.Fatalf("in-flight lease on a draining route: %v", err)
	}
	if err := e.Eject(start, "r0"); err != nil {
		t.Fatal(err)
	}
	e.Sweep(start.Add(1000 * time.Hour))
	if s := state(t, e, "r0"); s != Ejected {
		t.Fatalf("operator ejection expired: %v", s)
	}
	if err := e.Restore(start, "r0"); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Route("r0"); st.Health.State != Healthy || st.Weight <= 0 {
		t.Fatalf("restored route %v weight %v", st.Health.State, st.Weight)
	}
	if err := e.Drain(start, "nope"); !errors.Is(err, ErrUnknownRoute) {
		t.Fatalf("unknown route: %v", err)
	}
}

// TestSelectionHonoursWeights checks, on a seeded engine, that draws follow
// the weights, cost^-Sharpness with cost = latency × (1 + in-flight) ÷
// score^γ.
func TestSelectionHonoursWeights(t *testing.T) {
	t.Parallel()
	// Sharpness 2 rather than the default 4, so that the slow route's
	// share is large enough to measure.
	e := newTestEngine(t, Config{Picker: WeightedRandom{}, Sharpness: 2}, 3)
	// r0 veteran fast, r1 veteran ten times slower: a tenth of the speed,
	// a hundredth of the weight.
	for range 50 {
		e.Feedback(start, "r0", "", Outcome{Class: OK, Latency: 100 * time.Millisecond})
		e.Feedback(start, "r1", "", Outcome{Class: OK, Latency: time.Second})
	}
	// r2 holds 3 leases: its weight is divided by 4.
	var held []Lease
	for len(held) < 3 {
		l := mustAcquire(t, e, start, Request{Target: "a.com"})
		if l.Route == "r2" {
			held = append(held, l)
		} else {
			e.Report(start, l, Outcome{Class: ClientError})
		}
	}
	weights := map[string]float64{}
	total := 0.0
	for _, id := range []string{"r0", "r1", "r2"} {
		st, _ := e.Route(id)
		weights[id] = st.Weight
		total += st.Weight
	}
	if r := weights["r0"] / weights["r1"]; math.Abs(r-100) > 1e-6 {
		t.Fatalf("weights %v: the fast route weighs %v× the slow one, want 100×", weights, r)
	}
	const n = 40000
	counts := map[string]int{}
	for range n {
		l := mustAcquire(t, e, start, Request{Target: "a.com"})
		counts[l.Route]++
		// Release without evidence so weights stay put.
		e.Report(start, l, Outcome{Class: Canceled})
	}
	for id, w := range weights {
		want := w / total
		got := float64(counts[id]) / n
		// 5 standard deviations of a binomial proportion.
		if tol := 5 * math.Sqrt(want*(1-want)/n); math.Abs(got-want) > tol {
			t.Errorf("%s: drawn %.4f, want %.4f ± %.4f", id, got, want, tol)
		}
	}
	for _, l := range held {
		e.Report(start, l, Outcome{Class: Canceled})
	}
}

func TestConcurrentAcquireReport(t *testing.T) {
	t.Parallel()
	e, err := New(Config{UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", i), MaxInflight: 4})
	}
	classes := []Class{OK, OK, OK, OK, ProxyTimeout, Blocked, RateLimited, Target5xx}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				now := start.Add(time.Duration(i) * 10 * time.Millisecond)
				l, err := e.Acquire(now, Request{Target: fmt.Sprintf("t%d.com", i%7), Session: sessionFor(g, i)})
				if err != nil {
					continue
				}
				e.Report(now, l, Outcome{Class: classes[(i+g)%len(classes)], Latency: time.Millisecond})
				if i%100 == 0 {
					e.Sweep(now)
					for _, j := range e.ProbeJobs(nil) {
						e.ReportProbe(now, j, okOutcome)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, st := range e.Routes() {
		if st.Inflight != 0 {
			t.Errorf("%s: %d leases left in flight", st.ID, st.Inflight)
		}
	}
}

func sessionFor(g, i int) string {
	if i%5 != 0 {
		return ""
	}
	return fmt.Sprintf("s%d", g)
}

func TestReplay(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 9, MaxRemovedShare: -1}
	e := newTestEngine(t, cfg, 6)
	sub := e.Subscribe(1 << 16)
	now := start
	for i := range 3000 {
		now = now.Add(50 * time.Millisecond)
		l := mustAcquire(t, e, now, Request{Target: "a.com"})
		o := Outcome{Class: OK, Latency: 30 * time.Millisecond}
		switch {
		case l.Route == "r0":
			o.Class = ProxyConnectFailed
		case l.Route == "r1" && i%3 == 0:
			o.Class = Blocked
		}
		e.Report(now, l, o)
		e.Sweep(now)
		for _, j := range e.ProbeJobs(nil) {
			c := OK
			if j.Route == "r0" {
				c = ProxyConnectFailed
			}
			e.ReportProbe(now, j, Outcome{Class: c})
		}
	}
	events := sub.Poll(nil)
	if sub.Dropped() != 0 {
		t.Fatalf("dropped %d events", sub.Dropped())
	}
	same, err := Replay(events, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if same.Outcomes == 0 || same.Decisions == 0 {
		t.Fatalf("replay did nothing: %+v", same)
	}
	// Same rules: only jitter-timed wake-ups may differ; nearly all agree.
	if len(same.Diffs)*20 > same.Decisions {
		t.Fatalf("same config: %d of %d decisions differ", len(same.Diffs), same.Decisions)
	}
	strict := cfg
	strict.SuspectAfter, strict.CoolAfter = 1, 1
	diff, err := Replay(events, strict)
	if err != nil {
		t.Fatal(err)
	}
	if len(diff.Diffs) <= len(same.Diffs) {
		t.Fatalf("stricter thresholds changed nothing: %d vs %d diffs", len(diff.Diffs), len(same.Diffs))
	}
}

func TestPickers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		picker    Picker
		avoidDead bool // health-aware pickers route around a dead exit
	}{
		{"weighted random", WeightedRandom{}, true},
		{"power of two choices", PowerOfTwo{}, true},
		{"round robin is blind", &RoundRobin{}, false},
		{"random is blind", Random{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{Picker: tt.picker, MaxRemovedShare: -1}, 4)
			dead := 0
			for i := range 1000 {
				now := start.Add(time.Duration(i) * time.Millisecond)
				l := mustAcquire(t, e, now, Request{Target: "a.com"})
				c := OK
				if l.Route == "r0" {
					c = ProxyConnectFailed
					if i >= 500 {
						dead++
					}
				}
				e.Report(now, l, Outcome{Class: c})
			}
			if tt.avoidDead && dead > 5 {
				t.Errorf("dead route got %d of the last 500 picks", dead)
			}
			if !tt.avoidDead && dead < 50 {
				t.Errorf("blind picker sent only %d of 500 picks to the dead route", dead)
			}
		})
	}
}

// TestCrossTargetEjection: failed recoveries at EjectTargets sites eject a
// route that fails by itself too, never one whose only trouble is the
// sites' (an IP several sites ban keeps serving the others).
func TestCrossTargetEjection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc   string
		global bool // the route had a route-scope failure
		want   State
	}{
		{"failing itself too", true, Ejected},
		{"only the sites' verdicts", false, Candidate},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			crossTargetEjection(t, tc.global, tc.want)
		})
	}
}

func crossTargetEjection(t *testing.T, global bool, last State) {
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 20)
	now := start
	if global {
		report(t, e, now, "r0", "", ProxyTimeout, 1)
	}
	first := state(t, e, "r0")
	targets := []string{"a.com", "b.com", "c.com"}
	for n, target := range targets {
		report(t, e, now, "r0", target, Blocked, 1)
		st, _ := e.Route("r0")
		var deadline time.Time
		for _, p := range st.Targets {
			if p.Target == target {
				deadline = p.Health.UntilTime()
			}
		}
		now = deadline
		e.Sweep(now)
		// The pairs cooled before may be half-open again: only this
		// target's probe is answered.
		jobs := e.ProbeJobs(nil)
		i := slices.IndexFunc(jobs, func(j ProbeJob) bool { return j.Target == target })
		if i < 0 {
			t.Fatalf("jobs %+v, want a probe of r0×%s", jobs, target)
		}
		e.ReportProbe(now, jobs[i], Outcome{Class: Blocked})
		want := first
		if n == len(targets)-1 {
			want = last // failed recoveries on EjectTargets distinct targets
		}
		if s := state(t, e, "r0"); s != want {
			t.Fatalf("after %d failed target recoveries: %v, want %v", n+1, s, want)
		}
	}
}

func TestIdlePairsAreEvicted(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 4)
	report(t, e, start, "r1", "a.com", RateLimited, 1)
	report(t, e, start, "r2", "a.com", Blocked, 1)
	e.Sweep(start) // the first pass runs at once; the next after PairTTL/4
	if _, ok := pairState(t, e, "r1", "a.com"); !ok {
		t.Fatal("fresh pair evicted")
	}
	ttl := e.Config().PairTTL
	e.Sweep(start.Add(ttl / 2))
	if _, ok := pairState(t, e, "r2", "a.com"); !ok {
		t.Fatal("pair evicted before PairTTL")
	}
	// The sweep at ttl/2 woke r1's cooldown to half-open, a touch of its
	// own: idle means PairTTL after the last touch.
	e.Sweep(start.Add(ttl/2 + ttl + time.Minute))
	for _, id := range []string{"r1", "r2"} {
		if _, ok := pairState(t, e, id, "a.com"); ok {
			t.Fatalf("%s×a.com still kept after PairTTL idle", id)
		}
	}
	if n := e.target("a.com").excluded.Load(); n != 0 {
		t.Fatalf("target still counts %d excluded pairs", n)
	}
}

func TestSlowStartRampsWithoutTraffic(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 2)
	for range 20 {
		report(t, e, start, "r0", "", OK, 1)
	}
	e.Eject(start, "r0")
	e.Restore(start, "r0")
	st, _ := e.Route("r0")
	first := st.Weight
	e.Sweep(start.Add(e.Config().SlowStart / 2))
	st, _ = e.Route("r0")
	mid := st.Weight
	e.Sweep(start.Add(e.Config().SlowStart))
	st, _ = e.Route("r0")
	if !(first < mid && mid < st.Weight) {
		t.Fatalf("weights %v → %v → %v, want a ramp", first, mid, st.Weight)
	}
}

func TestEventsRecordAndReplayThroughJSON(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 4, MaxRemovedShare: -1}
	e := newTestEngine(t, cfg, 3)
	sub := e.Subscribe(256)
	report(t, e, start, "r1", "", ProxyTimeout, 4)
	var buf bytes.Buffer
	if err := WriteEvents(&buf, sub.Poll(nil)); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`"kind":"state"`, `"to":"cooling"`, `"reason":"failure threshold"`, `"rules":"` + DefaultRules().Version} {
		if !strings.Contains(text, want) {
			t.Errorf("event log lacks %s:\n%s", want, text)
		}
	}
	events, err := ReadEvents(&buf)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CoolAfter = 8
	rep, err := Replay(events, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) == 0 {
		t.Fatal("replay with CoolAfter=8 found no difference")
	}
	last := rep.Diffs[len(rep.Diffs)-1]
	if last.Route != "r1" || last.Recorded != Cooling || last.Replayed != Suspect {
		t.Fatalf("last difference %+v, want r1 cooling → suspect", last)
	}
}

// Regression: a picker concentrating load on a few routes banned by a site
// made their 403s the majority of the site's attempts, which opened an
// incident and froze the bans. Incidents count distinct routes.
func TestIncidentCountsRoutesNotAttempts(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 20)
	for i := 6; i < 20; i++ {
		report(t, e, start, fmt.Sprintf("r%d", i), "shop.com", OK, 1)
	}
	for round := range 20 {
		for i := range 6 {
			report(t, e, start.Add(time.Duration(round)*time.Second), fmt.Sprintf("r%d", i), "shop.com", Blocked, 1)
		}
	}
	if inc := e.Incidents(); len(inc) != 0 {
		t.Fatalf("6 of 20 routes banned opened %+v", inc)
	}
	if s, _ := pairState(t, e, "r0", "shop.com"); s.Usable() {
		t.Fatalf("banned pair is %v", s)
	}
}

// A young guard (younger than half a window) has not seen the successes
// before its first failure: it calls a site down at once only when every
// route of a pool of one tier failed there (as many as it counts) and
// none succeeded, and leaves everything else to the full window.
func TestIncidentOpensEarlyOnlyForEveryone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		cheap, tier1 int // routes c0… of tier 0 (r0… without tiers) and x0… of tier 1
		failing, ok  int // distinct routes failing and succeeding within a second
		open         bool
	}{
		{name: "down for everyone", cheap: 20, failing: 20, open: true},
		{name: "a route still served", cheap: 100, failing: guardRoutes - 1, ok: 1},
		{name: "most routes banned", cheap: 20, failing: 19},
		{name: "as many routes as a guard counts", cheap: 100, failing: guardRoutes, open: true},
		{name: "every tier fails", cheap: 20, tier1: 5, failing: 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e *Engine
			id := func(i int) string { return fmt.Sprintf("r%d", i) }
			if tc.tier1 == 0 {
				e = newTestEngine(t, Config{}, tc.cheap)
			} else {
				e = newTierEngine(t, Config{}, tc.cheap, tc.tier1)
				id = func(i int) string {
					if i < tc.cheap {
						return fmt.Sprintf("c%d", i)
					}
					return fmt.Sprintf("x%d", i-tc.cheap)
				}
			}
			// The first failure makes the guard; the successes come next,
			// so that they count before the failures could call it.
			now := start
			report(t, e, now, id(0), "shop.com", Target5xx, 1)
			for i := range tc.ok {
				report(t, e, now, id(tc.failing+i), "shop.com", OK, 1)
			}
			for i := 1; i < tc.failing; i++ {
				now = now.Add(20 * time.Millisecond)
				report(t, e, now, id(i), "shop.com", Target5xx, 1)
			}
			if _, open := e.store.Incident(e.target("shop.com").n); open != tc.open {
				t.Fatalf("incident open = %v after %v, want %v", open, now.Sub(start), tc.open)
			}
		})
	}
}

// Regression: with every pair of a target excluded, the least-bad fallback
// drew with rejection on a near-zero factor and returned ErrNoRoute.
func TestFallbackWhenEveryPairIsExcluded(t *testing.T) {
	t.Parallel()
	for _, panicThreshold := range []float64{-1, 0} {
		// Blocked pairs, with the incident guard out of the way (a 429 no
		// longer fits: pairs paced by their 429s stay out even in fallback).
		e := newTestEngine(t, Config{PanicThreshold: panicThreshold, IncidentRoutes: 64}, 8)
		for i := range 8 {
			report(t, e, start, fmt.Sprintf("r%d", i), "down.com", Blocked, 200) // evidence near 0
		}
		for range 100 {
			l, err := e.Acquire(start, Request{Target: "down.com"})
			if err != nil {
				t.Fatalf("panic threshold %v: %v", panicThreshold, err)
			}
			if !l.Fallback && !l.Panic {
				t.Fatalf("lease %+v neither fallback nor panic", l)
			}
			e.Report(start, l, Outcome{Class: Canceled})
		}
	}
}

func TestIncidentGuardIsDroppedWhenQuiet(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 3)
	report(t, e, start, "r0", "a.com", Target5xx, 1)
	if e.target("a.com").guard.Load() == nil {
		t.Fatal("a failure created no guard")
	}
	report(t, e, start.Add(time.Second), "r1", "a.com", OK, 1)
	if e.target("a.com").guard.Load() == nil {
		t.Fatal("guard dropped while its failure is in the window")
	}
	report(t, e, start.Add(e.Config().IncidentWindow+time.Minute), "r1", "a.com", OK, 1)
	if e.target("a.com").guard.Load() != nil {
		t.Fatal("guard kept after a window without failures")
	}
}

func TestPowerOfTwoPrefersTheLessLoaded(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{Picker: PowerOfTwo{}}, 2)
	for range 6 { // load r0 only
		if l := mustAcquire(t, e, start, Request{Target: "a.com", Avoid: []string{"r1"}}); l.Route != "r0" {
			t.Fatalf("loading r0, got %s", l.Route)
		}
	}
	r1 := 0
	for range 2000 {
		l := mustAcquire(t, e, start, Request{Target: "a.com"})
		if l.Route == "r1" {
			r1++
		}
		e.Report(start, l, Outcome{Class: Canceled})
	}
	// r0 weighs 7^-Sharpness of r1, at most 1/7: one weighted draw would
	// pick r1 at least 7/8 of the time; two draws and the lighter load
	// pick r0 only when both draws land on it, at most (1/8)^2.
	if got := float64(r1) / 2000; got < 0.97 {
		t.Fatalf("r1 picked %.3f of the time, want ≥ 0.97", got)
	}
}

// A probe that ends without evidence (canceled) issues its job again, so a
// half-open route is never left without a probe.
func TestCanceledProbeIsAskedAgain(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 2)
	report(t, e, start, "r0", "", ProxyAuth, 1)
	st, _ := e.Route("r0")
	e.Sweep(st.Health.UntilTime())
	jobs := e.ProbeJobs(nil)
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v", jobs)
	}
	e.ReportProbe(st.Health.UntilTime(), jobs[0], Outcome{Class: Canceled})
	again := e.ProbeJobs(nil)
	if len(again) != 1 || again[0].Gen != jobs[0].Gen || again[0].Seq != jobs[0].Seq {
		t.Fatalf("after a canceled probe: %+v, want the same job again", again)
	}
	if s := state(t, e, "r0"); s != HalfOpen {
		t.Fatalf("state %v", s)
	}
}

// okOutcome is a success as users' traffic reports it: an answer takes
// time, and a time of 0 would make its route look infinitely fast.
var okOutcome = Outcome{Class: OK, Latency: 100 * time.Millisecond}

// A late verdict under a lease's generations moves state only while the
// record is where the lease found it: a verdict on a page fetched before
// the pair cooled and recovered is evidence only, where one without a
// lease (Feedback) or under the current generation cools it.
func TestFeedbackAtHonoursGenerations(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 1)
	old := mustAcquire(t, e, start, Request{Target: "a.com"})
	if err := e.Report(start, old, okOutcome); err != nil {
		t.Fatal(err)
	}
	pair := func() Health {
		t.Helper()
		st, _ := e.Route("r0")
		for _, p := range st.Targets {
			if p.Target == "a.com" {
				return p.Health
			}
		}
		t.Fatal("no pair r0×a.com")
		return Health{}
	}
	// The pair cools, then recovers through its probes: two generations on.
	report(t, e, start, "r0", "a.com", Blocked, 1)
	cooled := pair()
	now := cooled.UntilTime()
	e.Sweep(now)
	for range e.Config().ProbeSuccesses {
		jobs := e.ProbeJobs(nil)
		if len(jobs) != 1 {
			t.Fatalf("probe jobs %+v", jobs)
		}
		if err := e.ReportProbe(now, jobs[0], okOutcome); err != nil {
			t.Fatal(err)
		}
	}
	recovered := pair()
	if recovered.State != Healthy {
		t.Fatalf("the pair is %v after its probes, want healthy", recovered.State)
	}
	if err := e.FeedbackAt(now, "r0", "a.com", old.Gens, Outcome{Class: ContentInvalid}); err != nil {
		t.Fatal(err)
	}
	if got := pair(); got.State != Healthy || got.Gen != recovered.Gen || got.Samples != recovered.Samples+1 {
		t.Errorf("a verdict from two generations ago: %v gen %d→%d, %d samples; want healthy, unmoved, recorded", got.State, recovered.Gen, got.Gen, got.Samples)
	}
	fresh := mustAcquire(t, e, now, Request{Target: "a.com"})
	if err := e.Report(now, fresh, okOutcome); err != nil {
		t.Fatal(err)
	}
	if err := e.FeedbackAt(now, "r0", "a.com", fresh.Gens, Outcome{Class: ContentInvalid}); err != nil {
		t.Fatal(err)
	}
	if got := pair(); got.State != Cooling {
		t.Errorf("a verdict under the current generation: %v, want cooling", got.State)
	}
	if err := e.FeedbackAt(now, "nope", "a.com", old.Gens, Outcome{Class: ContentInvalid}); !errors.Is(err, ErrUnknownRoute) {
		t.Errorf("a verdict on an unknown route: %v", err)
	}
}

// slowIncidents is a MemoryStore whose first SetIncident waits, as a
// shared store's round trip would, until released.
type slowIncidents struct {
	*MemoryStore
	entered, release chan struct{}
	waited           atomic.Bool
}

func (s *slowIncidents) SetIncident(target int32, c Class, open bool) bool {
	if s.waited.CompareAndSwap(false, true) {
		close(s.entered)
		<-s.release
	}
	return s.MemoryStore.SetIncident(target, c, open)
}

// TestIncidentFlagIsSetOutsideTheGuard checks that the incident guard does
// not hold its lock across the store's SetIncident: while one outcome's
// call to set the flag waits on the store, another outcome for the same
// target is counted, not held behind it.
func TestIncidentFlagIsSetOutsideTheGuard(t *testing.T) {
	t.Parallel()
	store := &slowIncidents{MemoryStore: NewMemoryStore(), entered: make(chan struct{}), release: make(chan struct{})}
	e, err := New(Config{Seed: 1, UncheckedCandidates: true}, store)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	opening := make(chan struct{})
	go func() {
		defer close(opening)
		for s := range 40 { // as TestIncidentGuard: the site fails every route
			report(t, e, start.Add(time.Duration(s)*time.Second), fmt.Sprintf("r%d", s%10), "down.com", Target5xx, 1)
		}
	}()
	<-store.entered // an outcome is setting the flag
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		report(t, e, start.Add(39*time.Second), "r9", "down.com", Target5xx, 1)
	}()
	select {
	case <-counted:
	case <-time.After(10 * time.Second):
		t.Fatal("an outcome waited on another's SetIncident: the guard's lock is held across it")
	}
	close(store.release)
	<-opening
	if inc := e.Incidents(); len(inc) != 1 {
		t.Errorf("incidents %+v, want down.com's", inc)
	}
}

// conflictedSessions is a MemoryStore that found every session bound
// twice.
type conflictedSessions struct{ *MemoryStore }

func (conflictedSessions) Session(string, int64) (int32, bool) { return SessionConflict, true }

// A session the store found bound to two routes fails loudly: the engine
// picks neither.
func TestSessionConflictRestarts(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Seed: 1, UncheckedCandidates: true}, conflictedSessions{NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddRoute(start, RouteSpec{ID: "r0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Acquire(start, Request{Target: "t", Session: "s"}); !errors.Is(err, ErrSessionRestartRequired) {
		t.Errorf("Acquire: %v, want ErrSessionRestartRequired", err)
	}
}

// TestAcquireAnyValue: a route labelled with AnyValue (a provider gateway
// whose template fills the key) takes every value of its key, beside the
// routes labelled with the value itself, and no other key.
func TestAcquireAnyValue(t *testing.T) {
	t.Parallel()
	pool := func() *Engine {
		e := newTestEngine(t, Config{}, 0)
		for _, s := range []struct {
			id     string
			labels Labels
		}{
			{"us", Labels{{"region", "us"}}}, {"de", Labels{{"region", "de"}}}, {"gw", Labels{{"region", AnyValue}}},
		} {
			if err := e.AddRoute(start, RouteSpec{ID: s.id, Labels: s.labels}); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	e := pool()
	for _, tc := range []struct {
		desc  string
		asked Labels
		want  []string
	}{
		{"a value only the gateway expresses", Labels{{"region", "fr"}}, []string{"gw"}},
		{"a value a route has too", Labels{{"region", "us"}}, []string{"gw", "us"}},
	} {
		// Leases are kept, so that in-flight spreads them.
		e := pool()
		got := map[string]bool{}
		for range 20 {
			got[mustAcquire(t, e, start, Request{Target: "a.com", Labels: tc.asked}).Route] = true
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: leased %v, want %v", tc.desc, got, tc.want)
		}
		for _, id := range tc.want {
			if !got[id] {
				t.Fatalf("%s: leased %v, want %v", tc.desc, got, tc.want)
			}
		}
	}
	if _, err := e.Acquire(start, Request{Target: "a.com", Labels: Labels{{"city", "paris"}}}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("a key no route expresses: %v, want ErrNoMatch", err)
	}
}

// TestAcquireAnyValueLargePool: in a pool too large to scan, a label's
// few routes and its AnyValue route are drawn from the union of their
// indexes, every pick one of them, not by rejection over the whole pool.
func TestAcquireAnyValueLargePool(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 0)
	add := func(id string, labels Labels) {
		t.Helper()
		if err := e.AddRoute(start, RouteSpec{ID: id, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 * maxScan {
		add(fmt.Sprintf("de%d", i), Labels{{"region", "de"}})
	}
	add("us1", Labels{{"region", "us"}})
	add("us2", Labels{{"region", "us"}})
	add("gw", Labels{{"region", AnyValue}})
	got := map[string]int{}
	for range 300 {
		l := mustAcquire(t, e, start, Request{Target: "a.com", Labels: Labels{{"region", "us"}}})
		got[l.Route]++
		if err := e.Report(start, l, Outcome{Class: OK, Latency: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if got["us1"]+got["us2"]+got["gw"] != 300 || got["gw"] == 0 || got["us1"]+got["us2"] == 0 {
		t.Fatalf("region=us leased %v, want us1, us2 and gw only, from both indexes", got)
	}
}

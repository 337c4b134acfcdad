package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// recordedPolicy is a policy with its users' attempts recorded; it keeps
// the policy's own retry rules.
type recordedPolicy struct {
	Policy
	picks []recordedPick
}

var _ retrier = (*recordedPolicy)(nil)

func (p *recordedPolicy) Pick(now time.Time, target int, session string, avoid []int) (Attempt, bool) {
	a, ok := p.Policy.Pick(now, target, session, avoid)
	if ok {
		p.picks = append(p.picks, recordedPick{at: now.Sub(Epoch), route: a.Route})
	}
	return a, ok
}

func (p *recordedPolicy) Request(now time.Time) {
	if r, ok := p.Policy.(retrier); ok {
		r.Request(now)
	}
}

func (p *recordedPolicy) Retry(now time.Time, target int, c engine.Class) bool {
	if r, ok := p.Policy.(retrier); ok {
		return r.Retry(now, target, c)
	}
	rules := engine.DefaultRules()
	return rules.Rule(c).Retry
}

// syncProber answers probes at once from w at at, as the runner would:
// a TCP check is World.Check, a page is an attempt at the neutral target,
// and no answer within the probe timeout is a proxy_timeout.
func syncProber(t *testing.T, w World, at time.Duration, want int) Prober {
	return func(route, target int, done func(time.Time, Result)) {
		if target != want {
			t.Fatalf("probe of route %d at target %d, want %d", route, target, want)
		}
		var r Result
		if target == tcpCheck {
			r = w.Check(route, at)
		} else {
			r = w.Attempt(route, NeutralTarget, at, wtRand())
		}
		if r.Latency > probeTimeout {
			r = Result{Class: engine.ProxyTimeout, Latency: probeTimeout}
		}
		done(Epoch.Add(at+r.Latency), r)
	}
}

func TestLeastLoadedPicksTheLeastLoaded(t *testing.T) {
	t.Parallel()
	w := scriptWorld{okIn(100 * ms), okIn(100 * ms), okIn(100 * ms), refused}
	type hold struct {
		route, n int // n attempts held on route
	}
	tests := []struct {
		desc   string
		checks int // rounds of TCP checks first, 2 s apart
		hold   []hold
		avoid  []int
		want   []int // the next picks, each held
		none   bool  // no route at all
	}{
		{desc: "the idle route", hold: []hold{{0, 2}, {1, 1}}, want: []int{2}},
		{desc: "then the least loaded", hold: []hold{{0, 2}, {1, 1}}, want: []int{2, 3, 1, 2, 3, 0}},
		{desc: "idle routes take turns", want: []int{0, 1, 2, 3}},
		{desc: "avoided routes are passed over", hold: []hold{{0, 3}}, avoid: []int{1, 2, 3}, want: []int{0, 0}},
		{desc: "up after two failed checks", checks: 2, hold: []hold{{0, 1}, {1, 1}, {2, 1}}, want: []int{3}},
		{desc: "down after three: passed over, however idle", checks: 3, hold: []hold{{0, 1}, {1, 2}, {2, 2}}, want: []int{0, 1, 2, 0}},
		{desc: "nothing up but avoided routes", checks: 3, avoid: []int{0, 1, 2}, none: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewLeastLoaded(w, 30*time.Second)
			at := time.Duration(0)
			for range tt.checks {
				p.Tick(Epoch.Add(at), syncProber(t, w, at, tcpCheck))
				at += haproxyCheckInterval
			}
			now := Epoch.Add(at)
			for _, h := range tt.hold {
				var others []int
				for r := range w.Routes() {
					if r != h.route {
						others = append(others, r)
					}
				}
				for range h.n {
					if a, ok := p.Pick(now, 0, "", others); !ok || a.Route != h.route {
						t.Fatalf("holding route %d: picked %+v", h.route, a)
					}
				}
			}
			var got []int
			for range tt.want {
				a, ok := p.Pick(now, 0, "", tt.avoid)
				if !ok {
					t.Fatalf("no route after %v", got)
				}
				got = append(got, a.Route)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("picked %v, want %v", got, tt.want)
			}
			if _, ok := p.Pick(now, 0, "", tt.avoid); tt.none && ok {
				t.Error("a route offered, want none")
			}
		})
	}
}

func TestLeastLoadedRecovers(t *testing.T) {
	t.Parallel()
	// Route 1 refuses connections until 6 s, then accepts them.
	down := scriptWorld{okIn(100 * ms), refused}
	up := scriptWorld{okIn(100 * ms), okIn(100 * ms)}
	p := NewLeastLoaded(down, 30*time.Second)
	picks := func(at time.Duration) []int {
		var routes []int
		for range 4 {
			a, _ := p.Pick(Epoch.Add(at), 0, "", nil)
			routes = append(routes, a.Route)
			p.Report(Epoch.Add(at), a.Ticket, okIn(100*ms))
		}
		return routes
	}
	for _, step := range []struct {
		at   time.Duration
		w    World
		want []int
	}{
		{0, down, []int{0, 1, 0, 1}},
		{2 * time.Second, down, []int{0, 1, 0, 1}},
		{4 * time.Second, down, []int{0, 0, 0, 0}}, // a third failed check: down
		{6 * time.Second, up, []int{0, 0, 0, 0}},   // one good check is not enough
		{8 * time.Second, up, []int{1, 0, 1, 0}},   // two are
	} {
		p.Tick(Epoch.Add(step.at), syncProber(t, step.w, step.at, tcpCheck))
		if got := picks(step.at); !slices.Equal(got, step.want) {
			t.Errorf("at %v: picked %v, want %v", step.at, got, step.want)
		}
	}
}

// TestLeastLoadedAbandoned: a request its client gave up on counts on its
// route until timeout server, as HAProxy keeps its server connection; an
// answered one stops counting at its answer.
func TestLeastLoadedAbandoned(t *testing.T) {
	t.Parallel()
	const timeoutServer = 30 * time.Second
	p := NewLeastLoaded(policyWorld{routes: 2}, timeoutServer)
	at := func(d time.Duration) time.Time { return Epoch.Add(d) }
	pick := func(d time.Duration) int {
		t.Helper()
		a, ok := p.Pick(at(d), 0, "", nil)
		if !ok {
			t.Fatalf("no pick at %v", d)
		}
		return a.Route
	}
	silent := pick(0)
	p.Report(at(3*time.Second), uint64(silent), Result{Class: engine.Canceled, Latency: 3 * time.Second})
	other := 1 - silent
	for _, d := range []time.Duration{3 * time.Second, 10 * time.Second, timeoutServer - time.Millisecond} {
		if got := pick(d); got != other {
			t.Fatalf("pick at %v: route %d, want %d: the abandoned request still counts on %d", d, got, other, silent)
		}
		p.Report(at(d+100*ms), uint64(other), Result{Class: engine.OK, Latency: 100 * ms})
	}
	// At timeout server the abandoned request ends: both routes idle,
	// they take turns from past the last pick.
	if got := pick(timeoutServer); got != silent {
		t.Errorf("pick at %v: route %d, want %d, its abandoned request over", timeoutServer, got, silent)
	}
}

// TestBaselineRetries: least_loaded retries a failed connection on
// another route and nothing else (HAProxy's redispatch); fastest retries
// nothing (glider).
func TestBaselineRetries(t *testing.T) {
	t.Parallel()
	for c := engine.OK; c <= engine.Canceled; c++ {
		ll := NewLeastLoaded(policyWorld{routes: 2}, 30*time.Second).(retrier)
		if got, want := ll.Retry(Epoch, 0, c), c == engine.ProxyConnectFailed; got != want {
			t.Errorf("least_loaded: Retry(%v) = %v, want %v", c, got, want)
		}
		if NewFastest(policyWorld{routes: 2}).(retrier).Retry(Epoch, 0, c) {
			t.Errorf("fastest: Retry(%v) = true", c)
		}
	}
	// Through the runner: one task, each attempt on the next idle route.
	tests := []struct {
		desc     string
		first    Result
		attempts int
		done     bool
	}{
		{"a refused connection is retried", refused, 2, true},
		{"a silent exit is not", silent, 1, false},
		{"a 403 is not", blockedIn(50 * ms), 1, false},
		{"a 5xx is not", errorIn(50 * ms), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w := scriptWorld{tt.first, okIn(100 * ms)}
			s := Run(w, NewLeastLoaded(w, 30*time.Second), oneTask(10*time.Second), nil)
			if s.Attempts != tt.attempts || (s.Completed == 1) != tt.done {
				t.Errorf("%d attempts, %d completed; want %d attempts, completed %v", s.Attempts, s.Completed, tt.attempts, tt.done)
			}
		})
	}
}

func TestFastestPicksTheFastestChecked(t *testing.T) {
	t.Parallel()
	// Check latencies: route 1 is the fastest that answers; route 2
	// refuses in 3 ms and route 3 never answers.
	w := scriptWorld{okIn(300 * ms), okIn(100 * ms), refused, silent, okIn(200 * ms)}
	tests := []struct {
		desc    string
		reports []Result // users' results on route 1, in order, after the check
		avoid   []int
		want    int // -1: none
	}{
		{desc: "the lowest check latency", want: 1},
		{desc: "avoided: the next lowest", avoid: []int{1}, want: 4},
		{desc: "failed checks are never picked", avoid: []int{0, 1, 4}, want: -1},
		{desc: "three failures to answer disable it", reports: []Result{silent, refused, silent}, want: 4},
		{desc: "two do not", reports: []Result{silent, silent}, want: 1},
		{desc: "an answer resets the count", reports: []Result{silent, silent, blockedIn(50 * ms), silent, silent}, want: 1},
		{desc: "what the site answers does not count", reports: []Result{blockedIn(50 * ms), errorIn(50 * ms), blockedIn(50 * ms)}, want: 1},
		{desc: "nor do cancels", reports: []Result{silent, silent, {Class: engine.Canceled}, {Class: engine.Canceled}}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := NewFastest(w)
			p.Tick(Epoch, syncProber(t, w, 0, checkPage))
			now := Epoch.Add(time.Second)
			for _, r := range tt.reports {
				a, ok := p.Pick(now, 0, "", nil)
				if !ok || a.Route != 1 {
					t.Fatalf("picked %+v, want route 1", a)
				}
				p.Report(now, a.Ticket, r)
			}
			a, ok := p.Pick(now, 0, "", tt.avoid)
			if tt.want < 0 {
				if ok {
					t.Errorf("picked %+v, want none", a)
				}
				return
			}
			if !ok || a.Route != tt.want {
				t.Errorf("picked %+v (ok %v), want route %d", a, ok, tt.want)
			}
		})
	}
}

func TestFastestRechecks(t *testing.T) {
	t.Parallel()
	slowFirst := scriptWorld{okIn(100 * ms), okIn(50 * ms)}
	// Route 1's check fails at first; 30 s later it passes, faster.
	w := scriptWorld{okIn(100 * ms), refused}
	p := NewFastest(w)
	pick := func(at time.Duration) int {
		a, _ := p.Pick(Epoch.Add(at), 0, "", nil)
		p.Report(Epoch.Add(at), a.Ticket, okIn(100*ms))
		return a.Route
	}
	p.Tick(Epoch, syncProber(t, w, 0, checkPage))
	if got := pick(time.Second); got != 0 {
		t.Errorf("after the first checks: route %d, want 0", got)
	}
	// Not checked again before the interval is over.
	p.Tick(Epoch.Add(10*time.Second), func(route, target int, _ func(time.Time, Result)) {
		t.Fatalf("probe of route %d at 10s", route)
	})
	p.Tick(Epoch.Add(gliderCheckInterval), syncProber(t, slowFirst, gliderCheckInterval, checkPage))
	if got := pick(gliderCheckInterval + time.Second); got != 1 {
		t.Errorf("after the second checks: route %d, want 1", got)
	}
}

// TestBaselineHealthChecks: through the runner, least_loaded's TCP checks
// take a dead exit out of rotation but not a blackholed one, which accepts
// connections; fastest's page checks take out both, and send everything
// to the exit that checked fastest.
func TestBaselineHealthChecks(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, `[[routes]]
name = "fast"
latency = "100ms"
jitter = 0
[[routes]]
name = "slow"
latency = "300ms"
jitter = 0
[[routes]]
name = "dead"
[[routes.behaviours]]
kind = "dead"
[[routes]]
name = "silent"
[[routes.behaviours]]
kind = "blackhole"
`)
	const fast, slow, dead, blackholed = 0, 1, 2, 3
	load := Load{Seed: 1, Duration: 16 * time.Second, Workers: 4, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
		ClientTimeout: 3 * time.Second, ClientAttempts: 1, TaskDeadline: time.Minute}
	tests := []struct {
		desc   string
		policy Policy
		from   time.Duration // when every check is in
		want   []int         // the routes picked from then on, each at least once
	}{
		// The third failed check of the dead exit, 2 s apart, at 4 s.
		{"least_loaded", NewLeastLoaded(w, load.AttemptTimeout), 4*time.Second + 10*ms, []int{fast, slow, blackholed}},
		// The blackholed exit's check fails at the prober's timeout.
		{"fastest", NewFastest(w), probeTimeout, []int{fast}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := &recordedPolicy{Policy: tt.policy}
			Run(w, p, load, nil)
			seen := map[int]bool{}
			for _, pk := range p.picks {
				if pk.at >= tt.from {
					seen[pk.route] = true
				}
			}
			for r := range w.Routes() {
				if seen[r] != slices.Contains(tt.want, r) {
					t.Errorf("route %s picked after %v: %v, want %v", w.RouteID(r), tt.from, seen[r], !seen[r])
				}
			}
		})
	}
}

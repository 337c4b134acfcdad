package engine

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()

func testConfig(t *testing.T) Config {
	t.Helper()
	c, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// step is one outcome on a record's timeline, dt after the previous one.
type step struct {
	dt  time.Duration
	obs Observation
}

func fail(c Class) step { return step{dt: time.Second, obs: Observation{Class: c}} }
func succeed() step {
	return step{dt: time.Second, obs: Observation{Class: OK, Latency: 100 * time.Millisecond}}
}
func capped(c Class) step { return step{dt: time.Second, obs: Observation{Class: c, Capped: true}} }
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}
func seq(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func run(c *Config, scope Scope, h *Health, steps []step) (Change, int64) {
	now := t0
	var ch Change
	for _, s := range steps {
		now += int64(s.dt)
		ch = h.observe(s.obs, scope, c, now)
	}
	return ch, now
}

func TestHealthTransitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		scope  Scope
		start  State
		steps  []step
		want   State
		reason string
	}{
		{"candidate becomes healthy after RecoverAfter successes", ScopeRoute, Candidate, repeat(3, succeed()), Healthy, "consecutive successes"},
		{"candidate stays candidate after two successes", ScopeRoute, Candidate, repeat(2, succeed()), Candidate, ""},
		{"one failure is not enough", ScopeRoute, Healthy, repeat(1, fail(ProxyConnectFailed)), Healthy, ""},
		{"suspect after SuspectAfter consecutive failures", ScopeRoute, Healthy, repeat(2, fail(ProxyTimeout)), Suspect, "suspect threshold"},
		{"two refused connections cool a route (rule CoolAfter)", ScopeRoute, Healthy, repeat(2, fail(ProxyConnectFailed)), Cooling, "failure threshold"},
		{"cooling after CoolAfter consecutive failures", ScopeRoute, Healthy, repeat(4, fail(ProxyTimeout)), Cooling, "failure threshold"},
		{"pool cap keeps a failing route suspect", ScopeRoute, Healthy, repeat(5, capped(ProxyConnectFailed)), Suspect, ""},
		{"pool cap turns a cooling into suspect", ScopeRoute, Healthy,
			seq(repeat(3, step{dt: time.Second, obs: Observation{Class: ProxyConnectFailed, Stale: true}}), repeat(1, capped(ProxyConnectFailed))),
			Suspect, "cooling capped by pool guard"},
		{"overwhelming evidence passes the pool cap", ScopeRoute, Healthy, repeat(8, capped(ProxyConnectFailed)), Cooling, "failure threshold"},
		{"407 cools at once", ScopeRoute, Healthy, repeat(1, fail(ProxyAuth)), Cooling, "cools at once"},
		{"429 cools its pair at once", ScopeTarget, Candidate, repeat(1, fail(RateLimited)), Cooling, "cools at once"},
		{"one 403 cools a pair (rule CoolAfter 1)", ScopeTarget, Candidate, repeat(1, fail(Blocked)), Cooling, "failure threshold"},
		{"one refused connection is not yet a verdict", ScopeRoute, Healthy, repeat(1, fail(ProxyConnectFailed)), Healthy, ""},
		{"two refused connections cool a route (rule CoolAfter 2)", ScopeRoute, Healthy, repeat(2, fail(ProxyConnectFailed)), Cooling, "failure threshold"},
		{"two 5xx only make a pair suspect", ScopeTarget, Candidate, repeat(2, fail(Target5xx)), Suspect, "suspect threshold"},
		{"suspect recovers only after RecoverAfter successes", ScopeRoute, Healthy,
			seq(repeat(2, fail(ProxyTimeout)), repeat(2, succeed())), Suspect, ""},
		{"suspect recovers after RecoverAfter successes", ScopeRoute, Healthy,
			seq(repeat(2, fail(ProxyTimeout)), repeat(3, succeed())), Healthy, "consecutive successes"},
		{"intermittent failures trip the window rate", ScopeRoute, Healthy,
			seq(repeat(3, succeed()), []step{fail(ProxyTimeout), succeed(), fail(ProxyTimeout), succeed(), fail(ProxyTimeout), succeed(), fail(ProxyTimeout)}),
			Suspect, "suspect threshold"},
		{"cooling ignores users' traffic", ScopeRoute, Cooling, repeat(5, succeed()), Cooling, ""},
		{"draining ignores users' traffic", ScopeRoute, Draining, repeat(10, fail(ProxyTimeout)), Draining, ""},
		{"stale failures move no state", ScopeRoute, Healthy,
			repeat(6, step{dt: time.Second, obs: Observation{Class: ProxyTimeout, Stale: true}}), Healthy, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			c := testConfig(t)
			h := Health{State: tt.start}
			ch, _ := run(&c, tt.scope, &h, tt.steps)
			if h.State != tt.want {
				t.Fatalf("state = %v, want %v", h.State, tt.want)
			}
			if ch.Reason != tt.reason {
				t.Errorf("last reason = %q, want %q", ch.Reason, tt.reason)
			}
		})
	}
}

// TestEveryClassInEveryState applies one outcome of each class to a record
// in each state and checks the invariants of the rule table.
func TestEveryClassInEveryState(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	rules := DefaultRules()
	for s := range State(numStates) {
		for cl := range Class(numClasses) {
			for _, scope := range []Scope{ScopeRoute, ScopeTarget} {
				rule := rules.Rule(cl)
				h := Health{State: s, Gen: 7, Evidence: Evidence{Samples: 20, Success: 1, ConsecOK: 20, LastSuccess: t0}}
				before := h
				ch := h.observe(Observation{Class: cl, Latency: time.Millisecond}, scope, &c, t0+int64(time.Second))
				if cl != OK && !rule.Breaker && !rule.AtOnce {
					// A cancel may only bound the latency from below.
					after := h
					if cl == Canceled {
						after.Latency, after.LatencyAt = before.Latency, before.LatencyAt
					}
					if after != before {
						t.Errorf("%v/%v: class without effect changed the record", s, cl)
					}
					continue
				}
				if h.Samples != before.Samples+1 {
					t.Errorf("%v/%v: evidence not recorded", s, cl)
				}
				if cl != OK && !rule.Timeout && h.Latency != before.Latency {
					t.Errorf("%v/%v: a failure that was not a timeout fed the latency estimate", s, cl)
				}
				if !s.Usable() && ch.Changed() {
					t.Errorf("%v/%v: traffic moved a %v record to %v", s, cl, s, h.State)
				}
				if ch.Changed() != (h.Gen != before.Gen) {
					t.Errorf("%v/%v: generation bump %v but changed %v", s, cl, h.Gen != before.Gen, ch.Changed())
				}
				if rule.AtOnce && s.Usable() && h.State != Cooling {
					t.Errorf("%v/%v: at-once class left state %v", s, cl, h.State)
				}
			}
		}
	}
}

func TestCooldownBackoff(t *testing.T) {
	t.Parallel()
	base, limit := 10*time.Second, 5*time.Minute
	for level := uint8(0); level < 12; level++ {
		exp := min(base<<level, limit)
		lo := cooldown(base, level, 0, limit)
		hi := cooldown(base, level, 0.999999, limit)
		if lo != exp/2+exp%2 && lo != exp-exp/2 {
			t.Errorf("level %d: lowest cooldown %v, want %v", level, lo, exp-exp/2)
		}
		if hi > exp || hi < exp*99/100 {
			t.Errorf("level %d: highest cooldown %v, want just under %v", level, hi, exp)
		}
	}
	if d := cooldown(base, 200, 0.5, limit); d > limit || d < limit/2 {
		t.Errorf("huge level: %v, want within [%v, %v]", d, limit/2, limit)
	}
}

func TestCooldownGrowsAndRetryAfterWins(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	h := Health{State: Healthy}
	now := t0
	var lengths []time.Duration
	for range 4 {
		for range c.CoolAfter {
			now += int64(time.Millisecond)
			h.observe(Observation{Class: ProxyConnectFailed, Jitter: 0.5}, ScopeRoute, &c, now)
		}
		if h.State != Cooling {
			t.Fatalf("state %v, want cooling", h.State)
		}
		lengths = append(lengths, time.Duration(h.Until-now))
		// Wake, then fail the probe: the next cooldown must be longer.
		now = h.Until
		if ch := h.wake(&c, ScopeRoute, now); !ch.Probe {
			t.Fatal("wake issued no probe")
		}
		h.State = Healthy // pretend recovered, keep the backoff level
	}
	for i := 1; i < len(lengths); i++ {
		if lengths[i] <= lengths[i-1] {
			t.Errorf("cooldowns %v do not grow", lengths)
		}
	}

	p := Health{State: Healthy}
	p.observe(Observation{Class: RateLimited, RetryAfter: 42 * time.Second}, ScopeTarget, &c, t0)
	if got := time.Duration(p.Until - t0); got != 42*time.Second {
		t.Errorf("Retry-After cooldown %v, want 42s", got)
	}
	q := Health{State: Healthy}
	q.observe(Observation{Class: RateLimited, RetryAfter: 24 * time.Hour}, ScopeTarget, &c, t0)
	if got := time.Duration(q.Until - t0); got != c.RetryAfterCap {
		t.Errorf("Retry-After not capped: %v, want %v", got, c.RetryAfterCap)
	}
}

func TestProbesRestoreOrRecool(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	probe := func(h *Health, cl Class, now int64) Change {
		return h.observe(Observation{Class: cl, Probe: true}, ScopeRoute, &c, now)
	}
	h := Health{State: Cooling, Until: t0}
	if ch := h.wake(&c, ScopeRoute, t0-1); ch.Changed() {
		t.Fatal("woke before the deadline")
	}
	if ch := h.wake(&c, ScopeRoute, t0); h.State != HalfOpen || !ch.Probe {
		t.Fatalf("state %v probe %v, want half_open with a probe", h.State, ch.Probe)
	}
	probe(&h, OK, t0+1)
	if h.State != HalfOpen {
		t.Fatalf("one probe restored: %v", h.State)
	}
	if ch := probe(&h, OK, t0+2); h.State != Healthy || !ch.SlowStart {
		t.Fatalf("state %v slow start %v, want healthy with slow start", h.State, ch.SlowStart)
	}
	if f := h.slowStart(&c, t0+2); f > c.SlowStartFloor+0.01 {
		t.Errorf("slow start begins at %v, want %v", f, c.SlowStartFloor)
	}
	if f := h.slowStart(&c, t0+2+int64(c.SlowStart)); f != 1 {
		t.Errorf("slow start ends at %v, want 1", f)
	}

	// Failed recoveries re-cool, and EjectAfter of them eject a route.
	r := Health{State: HalfOpen}
	now := t0
	for i := 1; i <= c.EjectAfter; i++ {
		now += int64(time.Second)
		probe(&r, ProxyConnectFailed, now)
		if i < c.EjectAfter && r.State != Cooling {
			t.Fatalf("failed probe %d: state %v, want cooling", i, r.State)
		}
		r.wake(&c, ScopeRoute, r.Until)
	}
	if r.State != HalfOpen && r.State != Ejected {
		t.Fatalf("state %v after failed recoveries", r.State)
	}
	e := Health{State: HalfOpen, FailedRecoveries: uint8(c.EjectAfter - 1)}
	probe(&e, ProxyTimeout, now)
	if e.State != Ejected || e.Until-now != int64(c.EjectTime) {
		t.Fatalf("state %v for %v, want ejected for %v", e.State, time.Duration(e.Until-now), c.EjectTime)
	}
	// Each ejection doubles the next, until the record has been healthy for
	// a whole EjectCap: then the next is the shortest again.
	e.wake(&c, ScopeRoute, e.Until)
	probe(&e, ProxyTimeout, e.Until)
	probe(&e, ProxyTimeout, e.Until) // ... failing recoveries until ejected again
	for e.State != Ejected {
		e.wake(&c, ScopeRoute, e.Until)
		probe(&e, ProxyTimeout, e.Until)
	}
	if d := time.Duration(e.Until - e.Since); d != 2*c.EjectTime {
		t.Fatalf("second ejection for %v, want %v", d, 2*c.EjectTime)
	}
	healed := Health{State: Healthy, Since: now, Ejections: 5}
	healed.eject(&c, ProxyTimeout, now+int64(c.EjectCap)+1, "test", &Change{})
	if d := time.Duration(healed.Until - healed.Since); d != c.EjectTime {
		t.Fatalf("ejection after a calm EjectCap for %v, want %v", d, c.EjectTime)
	}
	// Pairs never eject: that takes cross-target evidence.
	p := Health{State: HalfOpen, FailedRecoveries: 10}
	p.observe(Observation{Class: Blocked, Probe: true}, ScopeTarget, &c, now)
	if p.State != Cooling {
		t.Errorf("pair state %v, want cooling", p.State)
	}
	// A late probe on a record that moved on does nothing.
	l := Health{State: Healthy, Gen: 3}
	if ch := l.observe(Observation{Class: ProxyTimeout, Probe: true}, ScopeRoute, &c, now); ch.Changed() {
		t.Errorf("late probe moved state to %v", l.State)
	}
}

// TestCanceledBoundsLatency: an attempt given up on after it ran longer
// than the estimate raises it, one given up on sooner says nothing, and
// neither counts as success or failure.
func TestCanceledBoundsLatency(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	h := Health{State: Healthy}
	h.observe(Observation{Class: OK, Latency: 200 * time.Millisecond}, ScopeRoute, &c, t0)
	samples := h.Samples
	h.observe(Observation{Class: Canceled, Latency: 50 * time.Millisecond}, ScopeRoute, &c, t0+1)
	if h.Latency != 0.2 {
		t.Errorf("an early cancel moved the latency to %v", h.Latency)
	}
	h.observe(Observation{Class: Canceled, Latency: 2 * time.Second}, ScopeRoute, &c, t0+2)
	if h.Latency != 2 {
		t.Errorf("a cancel after 2s left the latency at %v, want 2", h.Latency)
	}
	h.observe(Observation{Class: Canceled, Latency: 3 * time.Second, Probe: true}, ScopeRoute, &c, t0+3)
	if h.Latency != 2 {
		t.Errorf("a canceled probe moved the latency to %v", h.Latency)
	}
	if h.Samples != samples || h.State != Healthy || h.TTFB.Known() != true {
		t.Errorf("cancels counted as evidence: samples %d→%d, state %v", samples, h.Samples, h.State)
	}
}

func TestScoreShrinksTowardPrior(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	var once, veteran Evidence
	once.observe(true, true, 100*time.Millisecond, &c, t0)
	for i := range 100 {
		veteran.observe(true, true, 100*time.Millisecond, &c, t0+int64(i))
	}
	if !(once.Score(&c) < veteran.Score(&c)) {
		t.Errorf("one success scores %v, a hundred %v", once.Score(&c), veteran.Score(&c))
	}
	var fresh Evidence
	if fresh.Score(&c) != c.Prior {
		t.Errorf("no evidence scores %v, want the prior %v", fresh.Score(&c), c.Prior)
	}
}

func TestFailureWindowSlides(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	var e Evidence
	for i := range 10 {
		e.observe(i%2 == 0, false, 0, &c, t0+int64(i))
	}
	if rate, vol := e.FailureRate(&c, t0+10); vol != 10 || rate != 0.5 {
		t.Fatalf("rate %v volume %d, want 0.5 over 10", rate, vol)
	}
	if _, vol := e.FailureRate(&c, t0+int64(c.Window)+int64(c.Window/windowBuckets)); vol != 0 {
		t.Errorf("window kept %d samples after it passed", vol)
	}
	e.observe(true, true, 0, &c, t0+2*int64(c.Window))
	if rate, vol := e.FailureRate(&c, t0+2*int64(c.Window)); vol != 1 || rate != 0 {
		t.Errorf("after sliding: rate %v volume %d, want 0 over 1", rate, vol)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		cfg  Config
		want string
	}{
		{"defaults are valid", Config{}, ""},
		{"alpha above one", Config{Alpha: 1.5}, "engine: config Alpha must be in (0, 1]"},
		{"cool before suspect", Config{SuspectAfter: 5, CoolAfter: 3}, "engine: config CoolAfter must be at least SuspectAfter"},
		{"panic above one", Config{PanicThreshold: 2}, "engine: config PanicThreshold must be at most 1 (negative disables)"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg, nil)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error %q, want %q", got, tt.want)
			}
		})
	}
}

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// RunEngine runs the engine-level suite: a real engine over each fresh
// store newStore returns, driven through the health state machine by the
// public API alone, so a shared store is held to the memory store's
// behaviour and not only to its method contracts. Every scenario has its
// own engine over its own store, and the engine is the store's only user:
// each read is of the engine's own writes, so the results must be the
// memory store's exactly.
//
// Time is the scenario's clock, starting at t0 and moved only by the
// scenario. The engine is seeded, so picks are reproducible; it keeps the
// weighted picker because scenarios check that excluded routes get no
// picks, which a blind picker would ignore. An attempt meant for one route
// avoids all the others.
func RunEngine(t *testing.T, newStore func(t *testing.T) engine.Store) {
	t.Run("transitions", func(t *testing.T) {
		for _, tt := range transitions {
			t.Run(tt.desc, func(t *testing.T) {
				t.Parallel()
				cfg := engine.Config{MaxRemovedShare: -1}
				if tt.poolCap {
					cfg.MaxRemovedShare = 0 // the default, 20%: with 4 routes, one removal
				}
				cfg.UncheckedCandidates = true
				r := newRig(t, newStore, cfg, routes(4))
				if tt.poolCap {
					r.cool("r3") // the one removal the cap allows
				}
				for _, o := range tt.steps {
					r.advance(time.Second)
					r.attempt("r0", "a.example", o)
				}
				if got := r.health("r0").State; got != tt.route {
					t.Errorf("route state %v, want %v", got, tt.route)
				}
				p, paired := r.pair("r0", "a.example")
				switch {
				case paired != tt.paired:
					t.Errorf("pair record exists: %v, want %v", paired, tt.paired)
				case paired && p.State != tt.pair:
					t.Errorf("pair state %v, want %v", p.State, tt.pair)
				}
			})
		}
	})
	for _, sc := range scenarios {
		t.Run(sc.desc, func(t *testing.T) {
			t.Parallel()
			// The scenarios test other things than the check of new
			// routes: theirs serve at once.
			sc.cfg.UncheckedCandidates = true
			sc.run(newRig(t, newStore, sc.cfg, sc.routes))
		})
	}
	t.Run("a new route is checked by a probe before users' traffic", func(t *testing.T) {
		t.Parallel()
		candidatesChecked(newRig(t, newStore, engine.Config{}, routes(3)))
	})
}

// success is an attempt that worked; fail one that ended in class c.
var success = engine.Outcome{Class: engine.OK, Latency: 100 * time.Millisecond}

func fail(c engine.Class) engine.Outcome { return engine.Outcome{Class: c} }

func repeat(n int, o engine.Outcome) []engine.Outcome {
	out := make([]engine.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// transitions are outcome sequences of route r0 against a.example, one
// second apart, each an attempt on a lease taken just before it (so none is
// stale), and the states they leave r0's global record and its pair with
// a.example in.
var transitions = []struct {
	desc    string
	steps   []engine.Outcome
	route   engine.State
	pair    engine.State
	paired  bool // a pair record exists: only negative evidence makes one
	poolCap bool // the pool guard at its default (else disabled)
}{
	{desc: "two successes leave a candidate",
		steps: repeat(2, success), route: engine.Candidate},
	{desc: "RecoverAfter successes make a candidate healthy",
		steps: repeat(3, success), route: engine.Healthy},
	{desc: "one failure is not enough",
		steps: slices.Concat(repeat(3, success), repeat(1, fail(engine.ProxyTimeout))), route: engine.Healthy},
	{desc: "SuspectAfter failures make a healthy route suspect",
		steps: slices.Concat(repeat(3, success), repeat(2, fail(engine.ProxyTimeout))), route: engine.Suspect},
	{desc: "CoolAfter failures cool it",
		steps: slices.Concat(repeat(3, success), repeat(4, fail(engine.ProxyTimeout))), route: engine.Cooling},
	{desc: "two refused connections cool it (rule CoolAfter)",
		steps: slices.Concat(repeat(3, success), repeat(2, fail(engine.ProxyConnectFailed))), route: engine.Cooling},
	{desc: "a 407 cools it at once (rule AtOnce)",
		steps: slices.Concat(repeat(3, success), repeat(1, fail(engine.ProxyAuth))), route: engine.Cooling},
	{desc: "a suspect route needs RecoverAfter successes",
		steps: slices.Concat(repeat(3, success), repeat(2, fail(engine.ProxyTimeout)), repeat(2, success)), route: engine.Suspect},
	{desc: "RecoverAfter successes make a suspect route healthy",
		steps: slices.Concat(repeat(3, success), repeat(2, fail(engine.ProxyTimeout)), repeat(3, success)), route: engine.Healthy},
	{desc: "intermittent failures trip the window rate",
		steps: slices.Concat(repeat(3, success), repeat(1, fail(engine.ProxyTimeout)), repeat(1, success),
			repeat(1, fail(engine.ProxyTimeout)), repeat(1, success), repeat(1, fail(engine.ProxyTimeout)),
			repeat(1, success), repeat(1, fail(engine.ProxyTimeout))),
		route: engine.Suspect},
	// Three successes, not more: the fifth second could reach the shortest
	// cooldown (5s) and half-open the route.
	{desc: "a cooling route ignores users' traffic",
		steps: slices.Concat(repeat(2, fail(engine.ProxyConnectFailed)), repeat(3, success)), route: engine.Cooling},
	{desc: "the pool cap keeps a failing route suspect",
		steps: repeat(5, fail(engine.ProxyTimeout)), route: engine.Suspect, poolCap: true},
	{desc: "overwhelming evidence passes the pool cap",
		steps: repeat(8, fail(engine.ProxyTimeout)), route: engine.Cooling, poolCap: true},
	{desc: "one 403 cools the pair, not the route (rule CoolAfter)",
		steps: repeat(1, fail(engine.Blocked)), route: engine.Candidate, pair: engine.Cooling, paired: true},
	{desc: "two 5xx make the pair suspect",
		steps: repeat(2, fail(engine.Target5xx)), route: engine.Candidate, pair: engine.Suspect, paired: true},
	{desc: "a 429 cools the pair at once (rule AtOnce)",
		steps: repeat(1, fail(engine.RateLimited)), route: engine.Candidate, pair: engine.Cooling, paired: true},
	{desc: "other 4xx and cancellations are no evidence",
		steps: slices.Concat(repeat(5, fail(engine.ClientError)), repeat(5, fail(engine.Canceled))), route: engine.Candidate},
}

// scenarios are the state machine's longer stories.
var scenarios = []struct {
	desc   string
	cfg    engine.Config // Seed is set by the suite
	routes []engine.RouteSpec
	run    func(r *rig)
}{
	{"a cooling route gets no picks and half-opens at its deadline with one probe job",
		engine.Config{MaxRemovedShare: -1}, routes(4), wakeAtDeadline},
	{"probes restore a route with slow start; a failed probe cools it for longer",
		engine.Config{MaxRemovedShare: -1}, routes(4), probesRestore},
	{"a canceled probe is asked again",
		engine.Config{MaxRemovedShare: -1}, routes(2), canceledProbe},
	{"a 429 with Retry-After cools only its route and target, for the Retry-After, and then it returns",
		engine.Config{MaxRemovedShare: -1}, routes(3), retryAfter},
	{"a 403 never lowers the route's global score",
		engine.Config{MaxRemovedShare: -1}, routes(3), blockedStaysOnTarget},
	{"a lease from before a transition reports as evidence but moves no state",
		engine.Config{MaxRemovedShare: -1}, routes(1), staleLease},
	{"max_inflight bounds a route's leases",
		engine.Config{MaxRemovedShare: -1}, []engine.RouteSpec{{ID: "r0", MaxInflight: 2}, {ID: "r1"}}, maxInflight},
	{"a lease reaped at LeaseTTL is a timeout at its target",
		engine.Config{MaxRemovedShare: -1}, routes(2), leaseReaped},
	{"a session keeps its route and restarts when its pair cools",
		engine.Config{MaxRemovedShare: -1}, routes(5), sessionRestarts(engine.RateLimited, true)},
	{"a session restarts when its route cools",
		engine.Config{MaxRemovedShare: -1}, routes(5), sessionRestarts(engine.ProxyAuth, false)},
	{"operators drain, eject and restore",
		engine.Config{MaxRemovedShare: -1}, routes(3), operator},
	{"most routes failing a target alike open an incident that cools none",
		engine.Config{}, routes(10), incidentOpensAndCloses},
	{"an incident lifts the coolings its class caused before it opened",
		engine.Config{MaxRemovedShare: -1, Rules: longBans()}, routes(8), incidentLifts},
	{"one route failing a target alone opens no incident",
		engine.Config{MaxRemovedShare: -1, Rules: longBans()}, routes(4), noIncidentAlone},
	{"EjectAfter failed recoveries eject a route",
		engine.Config{MaxRemovedShare: -1}, routes(4), ejectAfterFailedProbes},
	{"failed recoveries on EjectTargets targets eject a route failing by itself",
		engine.Config{MaxRemovedShare: -1}, routes(20), ejectAcrossTargets},
	{"failed recoveries on EjectTargets targets alone eject nothing",
		engine.Config{MaxRemovedShare: -1}, routes(20), sitesAloneEjectNothing},
}

// rig is one scenario: an engine over a fresh store, and the scenario's
// clock.
type rig struct {
	t   *testing.T
	e   *engine.Engine
	now time.Time
	ids []string // route ids, in the order added
}

// routes is n routes r0..r(n-1) with default specs.
func routes(n int) []engine.RouteSpec {
	specs := make([]engine.RouteSpec, n)
	for i := range specs {
		specs[i].ID = fmt.Sprintf("r%d", i)
	}
	return specs
}

func newRig(t *testing.T, newStore func(*testing.T) engine.Store, cfg engine.Config, specs []engine.RouteSpec) *rig {
	t.Helper()
	cfg.Seed = 1
	e, err := engine.New(cfg, newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, e: e, now: time.Unix(0, t0).UTC()}
	for _, spec := range specs {
		if err := e.AddRoute(r.now, spec); err != nil {
			t.Fatal(err)
		}
		r.ids = append(r.ids, spec.ID)
	}
	return r
}

func (r *rig) advance(d time.Duration) { r.now = r.now.Add(d) }

// acquire leases a route for req.
func (r *rig) acquire(req engine.Request) engine.Lease {
	r.t.Helper()
	l, err := r.e.Acquire(r.now, req)
	if err != nil {
		r.t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

// others is every route id but id.
func (r *rig) others(id string) []string {
	var out []string
	for _, x := range r.ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// lease leases route id for target, avoiding every other route: it may be
// the least-bad fallback when id is excluded.
func (r *rig) lease(id, target string) engine.Lease {
	r.t.Helper()
	l := r.acquire(engine.Request{Target: target, Avoid: r.others(id)})
	if l.Route != id {
		r.t.Fatalf("leased %s, want %s", l.Route, id)
	}
	return l
}

func (r *rig) report(l engine.Lease, o engine.Outcome) {
	r.t.Helper()
	if err := r.e.Report(r.now, l, o); err != nil {
		r.t.Fatalf("Report(%s, %v): %v", l.Route, o.Class, err)
	}
}

// attempt is one attempt of users' traffic on route id for target.
func (r *rig) attempt(id, target string, o engine.Outcome) {
	r.t.Helper()
	r.report(r.lease(id, target), o)
}

func (r *rig) route(id string) engine.RouteStatus {
	r.t.Helper()
	st, ok := r.e.Route(id)
	if !ok {
		r.t.Fatalf("no route %s", id)
	}
	return st
}

// health is route id's global record.
func (r *rig) health(id string) engine.Health {
	r.t.Helper()
	return r.route(id).Health
}

// pair is route id's record for target, if there is one.
func (r *rig) pair(id, target string) (engine.Health, bool) {
	r.t.Helper()
	for _, p := range r.route(id).Targets {
		if p.Target == target {
			return p.Health, true
		}
	}
	return engine.Health{}, false
}

func (r *rig) wantState(id string, want engine.State) engine.Health {
	r.t.Helper()
	h := r.health(id)
	if h.State != want {
		r.t.Fatalf("%s is %v (cause %v), want %v", id, h.State, h.Cause, want)
	}
	return h
}

func (r *rig) wantPair(id, target string, want engine.State) engine.Health {
	r.t.Helper()
	p, ok := r.pair(id, target)
	if !ok || p.State != want {
		r.t.Fatalf("%s×%s is %v (exists %v), want %v", id, target, p.State, ok, want)
	}
	return p
}

func (r *rig) sweep() { r.e.Sweep(r.now) }

// endOf is when h's cooldown or ejection ends.
func endOf(h engine.Health) time.Time { return h.UntilTime() }

// nextProbe returns the one pending probe job, which must be of route id
// against target ("" for a neutral probe).
func (r *rig) nextProbe(id, target string) engine.ProbeJob {
	r.t.Helper()
	jobs := r.e.ProbeJobs(nil)
	if len(jobs) != 1 || jobs[0].Route != id || jobs[0].Target != target {
		r.t.Fatalf("probe jobs %+v, want one of %s against %q", jobs, id, target)
	}
	return jobs[0]
}

func (r *rig) noProbes() {
	r.t.Helper()
	if jobs := r.e.ProbeJobs(nil); len(jobs) != 0 {
		r.t.Fatalf("probe jobs %+v, want none", jobs)
	}
}

func (r *rig) probe(job engine.ProbeJob, o engine.Outcome) {
	r.t.Helper()
	if err := r.e.ReportProbe(r.now, job, o); err != nil {
		r.t.Fatalf("ReportProbe(%+v): %v", job, err)
	}
}

// cool cools route id by two refused connections and returns its deadline.
func (r *rig) cool(id string) time.Time {
	r.t.Helper()
	for range 2 {
		r.advance(time.Second)
		r.attempt(id, "a.example", fail(engine.ProxyConnectFailed))
	}
	return endOf(r.wantState(id, engine.Cooling))
}

// picksOf leases n routes for target, reporting each a success, and counts
// those that were route id.
func (r *rig) picksOf(id, target string, n int) int {
	r.t.Helper()
	got := 0
	for range n {
		l := r.acquire(engine.Request{Target: target})
		if l.Route == id {
			got++
		}
		r.report(l, success)
	}
	return got
}

func wakeAtDeadline(r *rig) {
	deadline := r.cool("r0")
	if n := r.picksOf("r0", "a.example", 100); n != 0 {
		r.t.Fatalf("cooling route got %d of 100 picks", n)
	}
	r.noProbes()
	r.now = deadline.Add(-time.Nanosecond)
	r.sweep()
	r.wantState("r0", engine.Cooling)
	r.noProbes()
	r.now = deadline
	r.sweep()
	r.sweep()
	r.acquire(engine.Request{Target: "a.example"}) // an acquire wakes records too
	r.wantState("r0", engine.HalfOpen)
	if job := r.nextProbe("r0", ""); job.Seq != 0 {
		r.t.Fatalf("first probe job %+v, want Seq 0", job)
	}
	r.noProbes()
	if n := r.picksOf("r0", "a.example", 100); n != 0 {
		r.t.Fatalf("half-open route got %d of 100 picks", n)
	}
}

func probesRestore(r *rig) {
	cfg := r.e.Config()
	deadline := r.cool("r0")
	first := deadline.Sub(r.now)
	r.now = deadline
	r.sweep()
	job := r.nextProbe("r0", "")
	r.probe(job, fail(engine.ProxyConnectFailed))
	h := r.wantState("r0", engine.Cooling)
	if h.FailedRecoveries != 1 {
		r.t.Fatalf("failed recoveries %d, want 1", h.FailedRecoveries)
	}
	if second := h.UntilTime().Sub(r.now); second <= first {
		r.t.Fatalf("cooldown after a failed probe %v, not longer than the first %v", second, first)
	}
	// The job's generation has passed: answering it again is stale.
	r.probe(job, success)
	if h2 := r.wantState("r0", engine.Cooling); h2.Gen != h.Gen {
		r.t.Fatalf("a stale probe moved the generation %d → %d", h.Gen, h2.Gen)
	}
	r.now = h.UntilTime()
	r.sweep()
	for i := range cfg.ProbeSuccesses {
		job := r.nextProbe("r0", "")
		if int(job.Seq) != i {
			r.t.Fatalf("probe %d: job %+v", i, job)
		}
		r.probe(job, success)
		if i == 0 && cfg.ProbeSuccesses > 1 {
			r.probe(job, success) // a duplicate answer counts once
			r.wantState("r0", engine.HalfOpen)
		}
	}
	h = r.wantState("r0", engine.Healthy)
	if !h.SlowStart || h.FailedRecoveries != 0 {
		r.t.Fatalf("recovered record %+v, want slow start and no failed recoveries", h)
	}
	r.noProbes()
	w0 := r.route("r0").Weight
	r.advance(cfg.SlowStart / 2)
	r.sweep()
	w1 := r.route("r0").Weight
	r.advance(cfg.SlowStart / 2)
	r.sweep()
	w2 := r.route("r0").Weight
	if !(0 < w0 && w0 < w1 && w1 < w2) {
		r.t.Fatalf("weights %v → %v → %v, want a ramp", w0, w1, w2)
	}
}

func canceledProbe(r *rig) {
	r.now = r.cool("r0")
	r.sweep()
	job := r.nextProbe("r0", "")
	r.probe(job, fail(engine.Canceled))
	again := r.nextProbe("r0", "")
	if again.Gen != job.Gen || again.Seq != job.Seq {
		r.t.Fatalf("after a canceled probe %+v, want the job %+v again", again, job)
	}
	r.wantState("r0", engine.HalfOpen)
}

func retryAfter(r *rig) {
	r.attempt("r0", "shop.example", engine.Outcome{Class: engine.RateLimited, RetryAfter: 42 * time.Second})
	p := r.wantPair("r0", "shop.example", engine.Cooling)
	if d := p.UntilTime().Sub(r.now); d != 42*time.Second {
		r.t.Fatalf("pair cools for %v, want the Retry-After, 42s", d)
	}
	if h := r.wantState("r0", engine.Candidate); h.Samples != 0 {
		r.t.Fatalf("a 429 counted in the route's global evidence: %d samples", h.Samples)
	}
	// Past the brake the site's first 429 puts on its other routes: the
	// 429 came before the pair had sent enough to weigh them against.
	r.advance(time.Second)
	if n := r.picksOf("r0", "shop.example", 100); n != 0 {
		r.t.Fatalf("cooling pair got %d of 100 picks for its target", n)
	}
	if _, err := r.e.Acquire(r.now, engine.Request{Target: "shop.example", Avoid: r.others("r0"), Strict: true}); !errors.Is(err, engine.ErrNoRoute) {
		r.t.Fatalf("strict acquire of the cooling pair: %v, want ErrNoRoute", err)
	}
	if l := r.acquire(engine.Request{Target: "news.example", Avoid: r.others("r0"), Strict: true}); l.Route != "r0" {
		r.t.Fatalf("strict acquire of the cooled route for another target got %s", l.Route)
	} else {
		r.report(l, success)
	}
	deadline := p.UntilTime()
	r.now = deadline.Add(-time.Nanosecond)
	r.sweep()
	r.wantPair("r0", "shop.example", engine.Cooling)
	// The site said when to come back: the pair returns then, without a
	// probe that would spend the request its learned pace allows.
	r.now = deadline
	r.sweep()
	if p := r.wantPair("r0", "shop.example", engine.Healthy); !p.SlowStart {
		r.t.Fatal("the pair returned from its Retry-After without slow start")
	}
	r.noProbes()
}

func blockedStaysOnTarget(r *rig) {
	for range 5 {
		r.advance(time.Second)
		r.attempt("r0", "news.example", success)
	}
	before := r.route("r0")
	for range 6 {
		r.advance(time.Second)
		r.attempt("r0", "shop.example", fail(engine.Blocked))
	}
	r.wantPair("r0", "shop.example", engine.Cooling)
	after := r.route("r0")
	if after.Health.State != before.Health.State || after.Health.Samples != before.Health.Samples ||
		after.Score != before.Score || after.Weight != before.Weight {
		r.t.Fatalf("403s moved the route: %v score %v weight %v samples %d → %v score %v weight %v samples %d",
			before.Health.State, before.Score, before.Weight, before.Health.Samples,
			after.Health.State, after.Score, after.Weight, after.Health.Samples)
	}
}

func staleLease(r *rig) {
	var leases []engine.Lease
	for range 10 {
		leases = append(leases, r.lease("r0", "a.example"))
	}
	r.advance(time.Second)
	for _, l := range leases[:4] {
		r.report(l, fail(engine.ProxyTimeout))
	}
	// The second failure made r0 suspect; the third and fourth were leased
	// before that, so they are stale and cannot cool it.
	h := r.wantState("r0", engine.Suspect)
	r.advance(time.Second)
	for _, l := range leases[4:] {
		r.report(l, fail(engine.ProxyTimeout))
	}
	h2 := r.wantState("r0", engine.Suspect)
	if h2.Gen != h.Gen {
		r.t.Fatalf("stale reports moved the generation %d → %d", h.Gen, h2.Gen)
	}
	if h2.Samples != 10 || h2.ConsecFail != 10 {
		r.t.Fatalf("stale evidence not recorded: %d samples, %d consecutive failures", h2.Samples, h2.ConsecFail)
	}
	r.advance(time.Second)
	r.attempt("r0", "a.example", fail(engine.ProxyTimeout))
	r.wantState("r0", engine.Cooling)
}

func maxInflight(r *rig) {
	a := r.lease("r0", "a.example")
	b := r.lease("r0", "a.example")
	if st := r.route("r0"); st.Inflight != 2 || st.Weight != 0 {
		r.t.Fatalf("full route: in-flight %d weight %v", st.Inflight, st.Weight)
	}
	if _, err := r.e.Acquire(r.now, engine.Request{Target: "a.example", Avoid: r.others("r0")}); !errors.Is(err, engine.ErrNoRoute) {
		r.t.Fatalf("third lease on max_inflight=2: %v, want ErrNoRoute", err)
	}
	if n := r.picksOf("r1", "a.example", 50); n != 50 {
		r.t.Fatalf("r1 got %d of 50 picks while r0 is full", n)
	}
	r.report(a, success)
	if st := r.route("r0"); st.Inflight != 1 || st.Weight <= 0 {
		r.t.Fatalf("after a release: in-flight %d weight %v", st.Inflight, st.Weight)
	}
	c := r.lease("r0", "a.example")
	r.report(b, success)
	r.report(c, success)
	if st := r.route("r0"); st.Inflight != 0 {
		r.t.Fatalf("in-flight %d after every release", st.Inflight)
	}
}

func leaseReaped(r *rig) {
	l := r.lease("r0", "a.example")
	r.now = l.Expires.Add(-time.Second)
	r.sweep()
	if st := r.route("r0"); st.Inflight != 1 {
		r.t.Fatalf("in-flight %d before the lease expired", st.Inflight)
	}
	r.now = l.Expires
	r.sweep()
	st := r.route("r0")
	if st.Inflight != 0 {
		r.t.Fatalf("in-flight %d after the lease expired", st.Inflight)
	}
	if st.Health.Samples != 0 {
		r.t.Fatalf("a reaped lease counted against the route globally: %d samples", st.Health.Samples)
	}
	p := r.wantPair("r0", "a.example", engine.Candidate)
	if p.ConsecFail != 1 || p.LastFailure != l.Expires.UnixNano() {
		r.t.Fatalf("reaped lease not counted against the pair: %+v", p)
	}
	if err := r.e.Report(r.now, l, success); !errors.Is(err, engine.ErrUnknownLease) {
		r.t.Fatalf("report after reaping: %v, want ErrUnknownLease", err)
	}
	// A second one makes the pair suspect, blaming the target timeout.
	m := r.lease("r0", "a.example")
	r.now = m.Expires
	r.sweep()
	if p := r.wantPair("r0", "a.example", engine.Suspect); p.Cause != engine.TargetTimeout {
		r.t.Fatalf("pair suspect of %v, want %v", p.Cause, engine.TargetTimeout)
	}
}

// sessionRestarts binds a session, then fails its route with class c, which
// must cool the pair or the route. sameSiteOnly: only the pair cooled, so
// the session still serves other targets.
func sessionRestarts(c engine.Class, sameSiteOnly bool) func(*rig) {
	return func(r *rig) {
		req := engine.Request{Target: "a.example", Session: "s1"}
		first := r.acquire(req)
		r.report(first, success)
		// The session's pair gets a record, as the engine touches it.
		r.wantPair(first.Route, "a.example", engine.Candidate)
		for range 20 {
			r.advance(time.Second)
			if l := r.acquire(req); l.Route != first.Route {
				r.t.Fatalf("session moved from %s to %s", first.Route, l.Route)
			} else {
				r.report(l, success)
			}
		}
		r.report(r.acquire(req), fail(c))
		if _, err := r.e.Acquire(r.now, req); !errors.Is(err, engine.ErrSessionRestartRequired) {
			r.t.Fatalf("session on a cooled route: %v, want ErrSessionRestartRequired", err)
		}
		other := engine.Request{Target: "b.example", Session: "s1"}
		l, err := r.e.Acquire(r.now, other)
		switch {
		case sameSiteOnly && (err != nil || l.Route != first.Route):
			r.t.Fatalf("session for another target: %s %v, want %s", l.Route, err, first.Route)
		case sameSiteOnly:
			r.report(l, success)
		case !errors.Is(err, engine.ErrSessionRestartRequired):
			r.t.Fatalf("session for another target: %v, want ErrSessionRestartRequired", err)
		}
		// An idle binding expires after SessionTTL; the session starts again
		// on a route that can serve it.
		r.advance(r.e.Config().SessionTTL + time.Minute)
		r.sweep()
		if l := r.acquire(req); l.Route == first.Route {
			r.t.Fatalf("expired session went back to %s, which cannot serve a.example", l.Route)
		}
	}
}

func operator(r *rig) {
	l := r.lease("r0", "a.example")
	if err := r.e.Drain(r.now, "r0"); err != nil {
		r.t.Fatal(err)
	}
	if st := r.route("r0"); st.Health.State != engine.Draining || st.Weight != 0 {
		r.t.Fatalf("drained route %v weight %v", st.Health.State, st.Weight)
	}
	if n := r.picksOf("r0", "a.example", 100); n != 0 {
		r.t.Fatalf("draining route got %d of 100 picks", n)
	}
	if _, err := r.e.Acquire(r.now, engine.Request{Target: "a.example", Avoid: r.others("r0")}); !errors.Is(err, engine.ErrNoRoute) {
		r.t.Fatalf("acquire of only the draining route: %v, want ErrNoRoute", err)
	}
	r.report(l, success) // in-flight work finishes normally
	r.wantState("r0", engine.Draining)
	if err := r.e.Eject(r.now, "r0"); err != nil {
		r.t.Fatal(err)
	}
	if h := r.wantState("r0", engine.Ejected); !h.UntilTime().IsZero() {
		r.t.Fatalf("operator ejection ends at %v, want never", h.UntilTime())
	}
	r.advance(1000 * time.Hour)
	r.sweep()
	r.wantState("r0", engine.Ejected)
	r.noProbes()
	if err := r.e.Restore(r.now, "r0"); err != nil {
		r.t.Fatal(err)
	}
	if st := r.route("r0"); st.Health.State != engine.Healthy || !st.Health.SlowStart || st.Weight <= 0 {
		r.t.Fatalf("restored route %v slow start %v weight %v", st.Health.State, st.Health.SlowStart, st.Weight)
	}
	r.attempt("r0", "a.example", success)
	for _, op := range []func(time.Time, string) error{r.e.Drain, r.e.Eject, r.e.Restore} {
		if err := op(r.now, "nope"); !errors.Is(err, engine.ErrUnknownRoute) {
			r.t.Fatalf("unknown route: %v, want ErrUnknownRoute", err)
		}
	}
}

// wantIncidents checks the open incidents.
func (r *rig) wantIncidents(want ...engine.Incident) {
	r.t.Helper()
	if got := r.e.Incidents(); !slices.Equal(got, want) {
		r.t.Fatalf("incidents %+v, want %+v", got, want)
	}
}

// incidentOpensAndCloses has every route fail down.example with 5xx for 40
// seconds, the guard judging after half a window (30s) of evidence, which
// the defaults (IncidentRoutes 5, IncidentShare 0.5) call an incident. The
// pool guard is at its default: an incident must not need it off.
func incidentOpensAndCloses(r *rig) {
	start := r.now
	for s := range 40 {
		r.now = start.Add(time.Duration(s) * time.Second)
		r.attempt(fmt.Sprintf("r%d", s%10), "down.example", fail(engine.Target5xx))
	}
	r.wantIncidents(engine.Incident{Target: "down.example", Class: engine.Target5xx})
	for _, id := range r.ids {
		if p, ok := r.pair(id, "down.example"); ok && !p.State.Usable() {
			r.t.Fatalf("%s×down.example is %v during the target's incident", id, p.State)
		}
	}
	l := r.acquire(engine.Request{Target: "down.example"})
	if !l.Incident {
		r.t.Fatalf("lease %+v does not flag the incident", l)
	}
	r.report(l, fail(engine.Target5xx))
	// Successes return from most routes: the incident closes.
	for _, id := range r.ids {
		r.attempt(id, "down.example", success)
	}
	r.wantIncidents()
}

// longBans is the default rule table with bans that outlast a scenario,
// so that it tests what happens to them, not when they end.
func longBans() *engine.Rules {
	rules := engine.DefaultRules()
	rules.Class[engine.Blocked].Cooldown = 10 * time.Minute
	return &rules
}

// incidentLifts has six of eight routes banned by down.example (a 403
// cools a pair) before the guard may judge; the next 403 opens the
// incident, which lifts those bans: the site, not the exits, was failing.
func incidentLifts(r *rig) {
	start := r.now
	for i := range 6 {
		id := fmt.Sprintf("r%d", i)
		r.attempt(id, "down.example", fail(engine.Blocked))
		r.advance(time.Second)
		r.wantPair(id, "down.example", engine.Cooling)
	}
	r.wantIncidents()
	r.now = start.Add(r.e.Config().IncidentWindow / 2)
	r.attempt("r6", "down.example", fail(engine.Blocked))
	r.wantIncidents(engine.Incident{Target: "down.example", Class: engine.Blocked})
	for i := range 6 {
		r.wantPair(fmt.Sprintf("r%d", i), "down.example", engine.Healthy)
	}
	// Failures of the open incident's class are frozen: they do not count
	// against the route.
	if p, ok := r.pair("r6", "down.example"); ok {
		r.t.Fatalf("r6×down.example %+v: a failure of the incident's class counted", p)
	}
	before, _ := r.pair("r0", "down.example")
	r.attempt("r0", "down.example", fail(engine.Blocked))
	if after := r.wantPair("r0", "down.example", engine.Healthy); after.Samples != before.Samples {
		r.t.Fatalf("a frozen failure was recorded: %d → %d samples", before.Samples, after.Samples)
	}
}

func noIncidentAlone(r *rig) {
	for range 10 {
		r.attempt("r3", "fine.example", fail(engine.Blocked))
		r.advance(4 * time.Second)
	}
	r.wantIncidents()
	r.wantPair("r3", "fine.example", engine.Cooling)
}

// ejectAfterFailedProbes fails every neutral probe of a cooled route: the
// EjectAfter-th failure ejects it for EjectTime, after which it half-opens
// and recovers like a cooldown.
func ejectAfterFailedProbes(r *rig) {
	cfg := r.e.Config()
	r.cool("r0")
	for i := 1; i <= cfg.EjectAfter; i++ {
		r.now = endOf(r.health("r0"))
		r.sweep()
		r.probe(r.nextProbe("r0", ""), fail(engine.ProxyConnectFailed))
		if i == cfg.EjectAfter {
			break
		}
		if h := r.wantState("r0", engine.Cooling); int(h.FailedRecoveries) != i {
			r.t.Fatalf("failed recoveries %d, want %d", h.FailedRecoveries, i)
		}
	}
	h := r.wantState("r0", engine.Ejected)
	if d := h.UntilTime().Sub(r.now); d != cfg.EjectTime || h.Ejections != 1 {
		r.t.Fatalf("ejected for %v (ejection %d), want %v (the first)", d, h.Ejections, cfg.EjectTime)
	}
	if w := r.route("r0").Weight; w != 0 {
		r.t.Fatalf("ejected route weighs %v", w)
	}
	r.now = h.UntilTime()
	r.sweep()
	r.wantState("r0", engine.HalfOpen)
	for range cfg.ProbeSuccesses {
		r.probe(r.nextProbe("r0", ""), success)
	}
	if h := r.wantState("r0", engine.Healthy); h.Ejections != 1 {
		r.t.Fatalf("ejections %d after recovery, want 1 remembered", h.Ejections)
	}
}

// ejectAcrossTargets fails one recovery of route r0 on each of EjectTargets
// targets: the exit, not one site, is the problem.
func ejectAcrossTargets(r *rig) {
	cfg := r.e.Config()
	r.attempt("r0", "t0.example", fail(engine.ProxyTimeout)) // the exit fails by itself too
	failBlockedRecoveries(r, cfg.EjectTargets)
	if h := r.wantState("r0", engine.Ejected); h.UntilTime().Sub(r.now) != cfg.EjectTime {
		r.t.Fatalf("ejected until %v, want %v from now", h.UntilTime(), cfg.EjectTime)
	}
}

// sitesAloneEjectNothing: failed recoveries on EjectTargets targets leave a
// route that works by itself in place, its pairs cooled: removal is scoped
// first.
func sitesAloneEjectNothing(r *rig) {
	failBlockedRecoveries(r, r.e.Config().EjectTargets)
	r.wantState("r0", engine.Candidate)
}

// failBlockedRecoveries has r0 banned on n targets, one after another,
// each pair's recovery probe banned again; r0's own state stays what it
// was until the last.
func failBlockedRecoveries(r *rig, n int) {
	before := r.health("r0").State
	for i := range n {
		target := fmt.Sprintf("t%d.example", i)
		r.attempt("r0", target, fail(engine.Blocked))
		r.now = endOf(r.wantPair("r0", target, engine.Cooling))
		r.sweep()
		// The pairs banned before may be half-open again: only this
		// target's probe is answered.
		jobs := r.e.ProbeJobs(nil)
		j := slices.IndexFunc(jobs, func(j engine.ProbeJob) bool { return j.Route == "r0" && j.Target == target })
		if j < 0 {
			r.t.Fatalf("probe jobs %+v, want one of r0 against %q", jobs, target)
		}
		r.probe(jobs[j], fail(engine.Blocked))
		r.wantPair("r0", target, engine.Cooling)
		if i < n-1 {
			r.wantState("r0", before)
		}
	}
}

// candidatesChecked: new routes get no users' traffic until their neutral
// probe passes; then they serve with slow start. A route whose check fails
// cools instead.
func candidatesChecked(r *rig) {
	jobs := r.e.ProbeJobs(nil)
	if len(jobs) != len(r.ids) {
		r.t.Fatalf("probe jobs %+v, want one per new route", jobs)
	}
	for _, id := range r.ids {
		r.wantState(id, engine.Candidate)
	}
	r.noProbes()
	for _, job := range jobs {
		switch job.Route {
		case "r0":
			r.probe(job, success)
		case "r1":
			r.probe(job, fail(engine.ProxyConnectFailed))
		}
	}
	if h := r.wantState("r0", engine.Healthy); !h.SlowStart {
		r.t.Fatal("a checked route serves without slow start")
	}
	r.wantState("r1", engine.Cooling)
	r.wantState("r2", engine.Candidate) // its probe has not answered
	for range 50 {
		if l := r.acquire(engine.Request{Target: "a.example"}); l.Route != "r0" || l.Fallback {
			r.t.Fatalf("leased %s (fallback %v) while only r0 is checked", l.Route, l.Fallback)
		} else {
			r.report(l, success)
		}
	}
}

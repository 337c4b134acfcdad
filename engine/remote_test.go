package engine

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// sharedStore is one MemoryStore shared by several engines, each through
// its own view, as gateway processes share a Redis: a record changed
// through one view is notified to the others with the record as each last
// knew it. One mutex orders every change with its notifications, so they
// arrive in order per key; every view reads the shared records, so a view
// already holds a record when its engine hears of it. A real store keys by
// name: here the engines must announce routes and targets in the same order
// so their numbers agree.
type sharedStore struct {
	mem   *MemoryStore
	mu    sync.Mutex
	views []*storeView // guarded by mu
}

// storeView is one process's Store over a sharedStore. Leases, sessions,
// incidents and reads go straight to the shared state.
type storeView struct {
	*MemoryStore
	shared *sharedStore
	listen func(k Key, old Health, known bool, now Health)
	known  map[Key]Health // guarded by shared.mu: the records this view was last told of
}

var _ Notifier = (*storeView)(nil)

func (s *sharedStore) view() *storeView {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &storeView{MemoryStore: s.mem, shared: s, known: map[Key]Health{}}
	s.views = append(s.views, v)
	return v
}

// Listen implements Notifier.
func (v *storeView) Listen(fn func(Key, Health, bool, Health)) { v.listen = fn }

// Update implements HealthStore: the change, then the notifications.
func (v *storeView) Update(c *Config, k Key, op Op, now int64) (Change, bool) {
	v.shared.mu.Lock()
	defer v.shared.mu.Unlock()
	ch, ok := v.MemoryStore.Update(c, k, op, now)
	if !ok {
		return ch, false
	}
	h, _ := v.MemoryStore.Read(k)
	v.known[k] = h // this process hears of its own change through ch
	for _, w := range v.shared.views {
		if w != v {
			w.tell(k, h)
		}
	}
	return ch, true
}

// EvictPairs implements HealthStore: the evicted pairs leave the other
// views too, reported as the zero Health.
func (v *storeView) EvictPairs(route int32, before int64, fn func(int32, *Health)) {
	v.shared.mu.Lock()
	defer v.shared.mu.Unlock()
	var gone []Key
	v.MemoryStore.EvictPairs(route, before, func(n int32, h *Health) {
		fn(n, h)
		gone = append(gone, Key{Route: route, Target: n})
	})
	for _, k := range gone {
		for _, w := range v.shared.views {
			if w != v {
				w.tell(k, Health{})
			}
			delete(w.known, k)
		}
	}
}

// tell notifies w's engine that k now holds h; the caller holds shared.mu.
func (w *storeView) tell(k Key, h Health) {
	old, known := w.known[k]
	if known && old == h {
		return
	}
	w.known[k] = h
	w.listen(k, old, known, h)
}

// twoProcesses returns engines a and b sharing one store, each with routes
// r0..r(n-1) and targets interned in the same order.
func twoProcesses(t *testing.T, cfg Config, n int, targets ...string) (a, b *Engine) {
	t.Helper()
	s := &sharedStore{mem: NewMemoryStore()}
	engines := make([]*Engine, 2)
	for i := range engines {
		cfg.Seed = uint64(i + 1)
		cfg.UncheckedCandidates = true
		e, err := New(cfg, s.view())
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", j)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range targets {
			e.target(name)
		}
		engines[i] = e
	}
	return engines[0], engines[1]
}

func weight(t *testing.T, e *Engine, id string) float64 {
	t.Helper()
	st, ok := e.Route(id)
	if !ok {
		t.Fatalf("no route %s", id)
	}
	return st.Weight
}

// picks counts how often e's Acquire for target returns route id in n
// acquires, each reported OK.
func picks(t *testing.T, e *Engine, now time.Time, target, id string, n int) int {
	t.Helper()
	got := 0
	for range n {
		l := mustAcquire(t, e, now, Request{Target: target})
		if l.Route == id {
			got++
		}
		if err := e.Report(now, l, Outcome{Class: OK, Latency: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// probeUntilDone answers every probe job of e with OK until none is left,
// and returns how many it answered.
func probeUntilDone(t *testing.T, e *Engine, now time.Time) int {
	t.Helper()
	n := 0
	for jobs := e.ProbeJobs(nil); len(jobs) > 0; jobs = e.ProbeJobs(nil) {
		for _, j := range jobs {
			if err := e.ReportProbe(now, j, okOutcome); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// checkCounters verifies that e's pool and target counters agree with the
// shared records, and that no route out of use keeps a selection weight.
func checkCounters(t *testing.T, e *Engine) {
	t.Helper()
	removedRoutes := int32(0)
	excluded := map[int32]int32{}
	for slot := range e.routes.len() {
		h, _ := e.store.Read(Key{Route: slot})
		if removed(h.State) {
			removedRoutes++
		}
		if w, _ := e.pool.weight(slot); !h.State.Usable() && w != 0 {
			t.Errorf("route %d is %v with weight %v", slot, h.State, w)
		}
		e.store.Pairs(slot, func(n int32, p Health) {
			excluded[n] += excludes(p.State, p.Cause)
		})
	}
	if got := e.removed.Load(); got != removedRoutes {
		t.Errorf("removed counter %d, shared records say %d", got, removedRoutes)
	}
	for n := int32(1); n < e.targets.len(); n++ {
		tg := e.targets.get(n)
		if got := tg.excluded.Load(); got != excluded[n] {
			t.Errorf("target %s: excluded counter %d, shared records say %d", tg.name, got, excluded[n])
		}
	}
}

func TestRouteCooledElsewhereLeavesThePool(t *testing.T) {
	t.Parallel()
	// Five routes and MaxRemovedShare 0.2: one removal is all the pool
	// allows, and B must count the one A made.
	a, b := twoProcesses(t, Config{}, 5, "a.com")
	report(t, a, start, "r1", "", ProxyTimeout, 4)
	if s := state(t, b, "r1"); s != Cooling {
		t.Fatalf("r1 is %v, want cooling", s)
	}
	if w := weight(t, b, "r1"); w != 0 {
		t.Fatalf("B still weighs r1 at %v", w)
	}
	if got := picks(t, b, start, "a.com", "r1", 300); got != 0 {
		t.Fatalf("B picked the route A cooled %d times", got)
	}
	if !b.capped() {
		t.Fatal("B's pool guard does not count A's removal")
	}
	report(t, b, start, "r2", "", ProxyTimeout, 4)
	if s := state(t, b, "r2"); s != Suspect {
		t.Fatalf("B cooled a second route past MaxRemovedShare: r2 is %v, want suspect", s)
	}
	checkCounters(t, a)
	checkCounters(t, b)
}

func TestCooldownExpiryWakesOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc        string
		bSweepFirst bool
	}{
		{desc: "the process that cooled it sweeps first"},
		{desc: "the other process sweeps first", bSweepFirst: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			a, b := twoProcesses(t, Config{}, 5)
			report(t, a, start, "r1", "", ProxyAuth, 1)
			st, _ := b.Route("r1")
			deadline := st.Health.UntilTime()
			if deadline.IsZero() {
				t.Fatalf("B sees no deadline: %+v", st.Health)
			}
			a.Sweep(deadline.Add(-time.Millisecond))
			b.Sweep(deadline.Add(-time.Millisecond))
			first, second := a, b
			if tc.bSweepFirst {
				first, second = b, a
			}
			first.Sweep(deadline)
			second.Sweep(deadline)
			if jobs := first.ProbeJobs(nil); len(jobs) != 1 || jobs[0].Route != "r1" {
				t.Fatalf("first sweeper's jobs %+v, want one for r1", jobs)
			}
			if jobs := second.ProbeJobs(nil); len(jobs) != 0 {
				t.Fatalf("second sweeper's jobs %+v, want none", jobs)
			}
			for _, e := range []*Engine{a, b} {
				if s := state(t, e, "r1"); s != HalfOpen {
					t.Fatalf("r1 is %v, want half_open", s)
				}
				checkCounters(t, e)
			}
		})
	}
}

func TestRecoveryElsewhereReturnsTheRouteWithSlowStart(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, Config{}, 5, "a.com")
	report(t, a, start, "r1", "", ProxyAuth, 1)
	st, _ := a.Route("r1")
	now := st.Health.UntilTime()
	a.Sweep(now)
	if n := probeUntilDone(t, a, now); n != a.Config().ProbeSuccesses {
		t.Fatalf("answered %d probes, want %d", n, a.Config().ProbeSuccesses)
	}
	if s := state(t, b, "r1"); s != Healthy {
		t.Fatalf("r1 is %v on B, want healthy", s)
	}
	checkCounters(t, b)
	ramping := weight(t, b, "r1")
	ramped := now.Add(b.Config().SlowStart)
	b.Sweep(ramped)
	if w := weight(t, b, "r1"); ramping <= 0 || ramping >= w/2 {
		t.Fatalf("B weighs r1 %v, then %v after the slow start: want a ramp", ramping, w)
	}
	if got := picks(t, b, ramped, "a.com", "r1", 300); got == 0 {
		t.Fatal("B never picks the recovered route")
	}
}

func TestPairCooledElsewhereStaysOnItsTarget(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, Config{}, 5, "shop.com", "news.com")
	// A captcha page, a verdict the target's panic counts (a 403 is the
	// site's, which it does not).
	report(t, a, start, "r1", "shop.com", ContentInvalid, 2)
	if s, _ := pairState(t, b, "r1", "shop.com"); s != Cooling {
		t.Fatalf("pair is %v, want cooling", s)
	}
	if n := b.target("shop.com").excluded.Load(); n != 1 {
		t.Fatalf("B counts %d excluded pairs for shop.com, want 1", n)
	}
	if got := picks(t, b, start, "shop.com", "r1", 300); got != 0 {
		t.Fatalf("B sent shop.com to the banned route %d times", got)
	}
	b.Sweep(start) // prices r1, without evidence of its own, at the pool's typical
	if got := picks(t, b, start, "news.com", "r1", 300); got == 0 {
		t.Fatal("B stopped using the route for another target")
	}
	st, _ := a.Route("r1")
	var until time.Time
	for _, p := range st.Targets {
		if p.Target == "shop.com" {
			until = p.Health.UntilTime()
		}
	}
	a.Sweep(until)
	probeUntilDone(t, a, until)
	if s, _ := pairState(t, b, "r1", "shop.com"); s != Healthy {
		t.Fatalf("pair is %v on B after A's probes, want healthy", s)
	}
	if n := b.target("shop.com").excluded.Load(); n != 0 {
		t.Fatalf("B still counts %d excluded pairs for shop.com", n)
	}
	if got := picks(t, b, until.Add(b.Config().SlowStart), "shop.com", "r1", 300); got == 0 {
		t.Fatal("B never sends shop.com to the recovered pair")
	}
	checkCounters(t, a)
	checkCounters(t, b)
}

func TestPairEvictedElsewhereLeavesTheCounters(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, Config{}, 5, "a.com")
	report(t, a, start, "r1", "a.com", Blocked, 1)
	ttl := a.Config().PairTTL
	a.Sweep(start)
	a.Sweep(start.Add(ttl / 2)) // wakes the pair: half-open, its probe never answered
	if n := b.target("a.com").excluded.Load(); n != 1 {
		t.Fatalf("B counts %d excluded pairs, want 1", n)
	}
	a.Sweep(start.Add(ttl/2 + ttl + time.Minute))
	if _, ok := pairState(t, b, "r1", "a.com"); ok {
		t.Fatal("the evicted pair is still there")
	}
	checkCounters(t, a)
	checkCounters(t, b)
}

func TestScoreChangeElsewhereMovesTheWeight(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, Config{}, 3)
	for range 5 {
		a.Feedback(start, "r1", "", Outcome{Class: OK, Latency: 50 * time.Millisecond})
	}
	before := weight(t, b, "r1")
	st, _ := b.Route("r1")
	gen := st.Health.Gen
	for range 5 {
		a.Feedback(start.Add(time.Second), "r1", "", Outcome{Class: OK, Latency: 3 * time.Second})
	}
	st, _ = b.Route("r1")
	if st.Health.State != Healthy || st.Health.Gen != gen {
		t.Fatalf("slow successes moved the state: %v gen %d → %d", st.Health.State, gen, st.Health.Gen)
	}
	after := weight(t, b, "r1")
	if after >= before {
		t.Fatalf("B's weight of r1 went %v → %v, want lower after slow successes", before, after)
	}
	if want := weight(t, a, "r1"); after != want {
		t.Fatalf("B weighs r1 %v, A %v", after, want)
	}
}

func TestNotificationForUnknownRecordIsIgnored(t *testing.T) {
	t.Parallel()
	cooling := Health{State: Cooling, Gen: 1, Since: t0, Until: t0 + int64(time.Minute)}
	for _, tc := range []struct {
		desc string
		key  Key
	}{
		{desc: "route never added", key: Key{Route: 7}},
		{desc: "negative route", key: Key{Route: -1}},
		{desc: "target never announced", key: Key{Route: 1, Target: 9}},
		{desc: "negative target", key: Key{Route: 1, Target: -1}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{}, 3)
			e.target("a.com")
			e.remoteChange(tc.key, Health{}, false, cooling)
			if n := e.removed.Load(); n != 0 {
				t.Fatalf("removed counter %d", n)
			}
			if next := e.wakeups.next.Load(); next != math.MaxInt64 {
				t.Fatalf("a wake-up was queued at %d", next)
			}
			checkCounters(t, e)
		})
	}
}

func TestCoalescedNotificationQueuesTheNewDeadline(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 5)
	report(t, e, start, "r1", "", ProxyAuth, 1)
	k := Key{Route: 1}
	first, _ := e.store.Read(k)
	// Another process wakes r1 and fails its probe; this one hears of both
	// steps as one: cooling, then cooling again in a later generation.
	cfg := e.Config()
	e.store.Update(&cfg, k, Op{Kind: OpWake, Gen: first.Gen, CheckGen: true}, first.Until)
	probe := Op{Kind: OpObserve, Obs: Observation{Class: ProxyAuth, Probe: true}, Gen: first.Gen + 1, CheckGen: true}
	e.store.Update(&cfg, k, probe, first.Until)
	again, _ := e.store.Read(k)
	if again.State != Cooling || again.Until <= first.Until {
		t.Fatalf("record %+v, want cooling past %d", again, first.Until)
	}
	e.remoteChange(k, first, true, again)
	e.Sweep(time.Unix(0, again.Until))
	if jobs := e.ProbeJobs(nil); len(jobs) != 1 || jobs[0].Gen != again.Gen+1 {
		t.Fatalf("jobs %+v, want one for the wake at the new deadline", jobs)
	}
	checkCounters(t, e)
}

// TestNotificationsRaceWithTraffic runs traffic through both processes at
// once: every notification runs concurrently with the other engine's
// Acquire, Report and Sweep, and in the end both engines' counters must
// agree with the shared records.
func TestNotificationsRaceWithTraffic(t *testing.T) {
	t.Parallel()
	targets := []string{"t0.com", "t1.com", "t2.com"}
	a, b := twoProcesses(t, Config{MaxRemovedShare: -1}, 16, targets...)
	classes := []Class{OK, OK, OK, ProxyTimeout, OK, Blocked, RateLimited, OK, ProxyConnectFailed, OK, Target5xx}
	var wg sync.WaitGroup
	for g, e := range []*Engine{a, b, a, b} {
		wg.Go(func() {
			for i := range 1000 {
				now := start.Add(time.Duration(i) * 100 * time.Millisecond)
				l, err := e.Acquire(now, Request{Target: targets[(i+g)%len(targets)]})
				if err != nil {
					continue
				}
				e.Report(now, l, Outcome{Class: classes[(i*3+g)%len(classes)], Latency: time.Millisecond})
				if i%50 == 0 {
					e.Sweep(now)
					for _, j := range e.ProbeJobs(nil) {
						e.ReportProbe(now, j, Outcome{Class: classes[i%len(classes)]})
					}
				}
			}
		})
	}
	wg.Wait()
	checkCounters(t, a)
	checkCounters(t, b)
}

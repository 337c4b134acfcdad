package engine

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustLabels(t testing.TB, s string) Labels {
	t.Helper()
	l, err := ParseLabels(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// drawn acquires n times for labels, releasing each lease without evidence,
// and returns the routes it got, sorted, or the first error.
func drawn(t testing.TB, e *Engine, now time.Time, labels Labels, n int) ([]string, error) {
	t.Helper()
	var got []string
	for range n {
		l, err := e.Acquire(now, Request{Target: "a.com", Labels: labels})
		if err != nil {
			return nil, err
		}
		if !slices.Contains(got, l.Route) {
			got = append(got, l.Route)
		}
		if err := e.Report(now, l, Outcome{Class: Canceled}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	return got, nil
}

func TestUpdateRouteLabels(t *testing.T) {
	t.Parallel()
	type change struct{ id, labels string }
	type check struct {
		labels string   // the request's constraints
		want   []string // routes it may get, all of them over 200 draws
		err    error    // or the error it gets
	}
	tests := []struct {
		desc    string
		routes  []change // added
		updates []change // then updated, in order
		checks  []check
	}{
		{
			desc:    "label moved: nobody carries the old one",
			routes:  []change{{"a", "region=us"}},
			updates: []change{{"a", "region=eu"}},
			checks: []check{
				{labels: "region=us", err: ErrNoMatch},
				{labels: "region=eu", want: []string{"a"}},
				{labels: "", want: []string{"a"}},
			},
		},
		{
			desc:    "label moved: another route keeps the old one",
			routes:  []change{{"a", "region=us"}, {"b", "region=us"}},
			updates: []change{{"a", "region=eu"}},
			checks: []check{
				{labels: "region=us", want: []string{"b"}},
				{labels: "region=eu", want: []string{"a"}},
				{labels: "", want: []string{"a", "b"}},
			},
		},
		{
			desc:    "label moved and back",
			routes:  []change{{"a", "region=us"}},
			updates: []change{{"a", "region=eu"}, {"a", "region=us"}},
			checks: []check{
				{labels: "region=us", want: []string{"a"}},
				{labels: "region=eu", err: ErrNoMatch},
			},
		},
		{
			desc:    "label added",
			routes:  []change{{"a", "region=us"}, {"b", "region=us"}},
			updates: []change{{"a", "region=us plan=premium"}},
			checks: []check{
				{labels: "plan=premium", want: []string{"a"}},
				{labels: "region=us plan=premium", want: []string{"a"}},
				{labels: "region=us", want: []string{"a", "b"}},
			},
		},
		{
			desc:    "label dropped",
			routes:  []change{{"a", "region=us plan=premium"}, {"b", "region=us"}},
			updates: []change{{"a", "region=us"}},
			checks: []check{
				{labels: "plan=premium", err: ErrNoMatch},
				{labels: "region=us plan=premium", err: ErrNoMatch},
				{labels: "region=us", want: []string{"a", "b"}},
			},
		},
		{
			desc:    "all labels dropped",
			routes:  []change{{"a", "region=us isp=x"}, {"b", "region=eu"}},
			updates: []change{{"a", ""}},
			checks: []check{
				{labels: "region=us", err: ErrNoMatch},
				{labels: "isp=x", err: ErrNoMatch},
				{labels: "region=eu", want: []string{"b"}},
				{labels: "", want: []string{"a", "b"}},
			},
		},
		{
			desc:    "value changed on a multi-label route",
			routes:  []change{{"a", "region=us isp=x"}, {"b", "region=us isp=y"}},
			updates: []change{{"a", "region=us isp=y"}},
			checks: []check{
				{labels: "isp=x", err: ErrNoMatch},
				{labels: "region=us isp=x", err: ErrNoMatch},
				{labels: "region=us isp=y", want: []string{"a", "b"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e, err := New(Config{Seed: 7, UncheckedCandidates: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.routes {
				if err := e.AddRoute(start, RouteSpec{ID: r.id, Labels: mustLabels(t, r.labels)}); err != nil {
					t.Fatal(err)
				}
			}
			for _, u := range tt.updates {
				if err := e.UpdateRoute(start, RouteSpec{ID: u.id, Labels: mustLabels(t, u.labels)}); err != nil {
					t.Fatal(err)
				}
				spec, ok := e.RouteSpec(u.id)
				if !ok || !slices.Equal(spec.Labels, mustLabels(t, u.labels)) {
					t.Fatalf("RouteSpec(%s) = %+v, %v; want labels %q", u.id, spec, ok, u.labels)
				}
				if st, _ := e.Route(u.id); !slices.Equal(st.Labels, mustLabels(t, u.labels)) {
					t.Fatalf("Route(%s).Labels = %v, want %q", u.id, st.Labels, u.labels)
				}
			}
			for _, c := range tt.checks {
				got, err := drawn(t, e, start, mustLabels(t, c.labels), 200)
				if c.err != nil {
					if !errors.Is(err, c.err) {
						t.Errorf("labels %q: got %v, %v; want %v", c.labels, got, err, c.err)
					}
					continue
				}
				if err != nil || !slices.Equal(got, c.want) {
					t.Errorf("labels %q: got %v, %v; want %v", c.labels, got, err, c.want)
				}
			}
		})
	}
}

func TestUpdateRouteKeepsEvidence(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Seed: 3, MaxRemovedShare: -1, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, labels := range []string{"region=us", "region=us", "region=eu", "region=eu"} {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", i), Labels: mustLabels(t, labels)}); err != nil {
			t.Fatal(err)
		}
	}
	// r0: cooling globally, and banned on a.com; r1: suspect, with a
	// lease in flight and a session bound to it.
	report(t, e, start, "r0", "", ProxyTimeout, e.Config().CoolAfter)
	report(t, e, start, "r0", "a.com", Blocked, 6)
	report(t, e, start, "r1", "", ProxyTimeout, e.Config().SuspectAfter)
	if s := state(t, e, "r0"); s != Cooling {
		t.Fatalf("r0 %v, want cooling", s)
	}
	if s, _ := pairState(t, e, "r0", "a.com"); s != Cooling {
		t.Fatalf("r0×a.com %v, want cooling", s)
	}
	if s := state(t, e, "r1"); s != Suspect {
		t.Fatalf("r1 %v, want suspect", s)
	}
	// r0 cooling leaves r1 the only eligible route with region=us.
	held := mustAcquire(t, e, start, Request{Target: "b.com", Session: "s1", Labels: mustLabels(t, "region=us")})
	if held.Route != "r1" {
		t.Fatalf("region=us got %s, want r1", held.Route)
	}
	before := map[string]RouteStatus{}
	for _, id := range []string{"r0", "r1"} {
		before[id], _ = e.Route(id)
	}

	for _, id := range []string{"r0", "r1"} {
		if err := e.UpdateRoute(start, RouteSpec{ID: id, Labels: mustLabels(t, "region=eu plan=b"), Weight: 2, Cost: 1, MaxInflight: 5}); err != nil {
			t.Fatal(err)
		}
		after, _ := e.Route(id)
		if after.Health != before[id].Health {
			t.Errorf("%s: health %+v after update, want %+v", id, after.Health, before[id].Health)
		}
		if !slices.Equal(after.Targets, before[id].Targets) {
			t.Errorf("%s: pairs %+v after update, want %+v", id, after.Targets, before[id].Targets)
		}
		if after.Inflight != before[id].Inflight {
			t.Errorf("%s: %d in flight after update, want %d", id, after.Inflight, before[id].Inflight)
		}
	}
	// The cooling route stays out of its new label's index too.
	for range 200 {
		l := mustAcquire(t, e, start, Request{Target: "c.com", Labels: mustLabels(t, "plan=b")})
		if l.Route == "r0" {
			t.Fatal("cooling route picked after UpdateRoute")
		}
		e.Report(start, l, Outcome{Class: Canceled})
	}
	// The session follows its route, which now carries region=eu.
	l := mustAcquire(t, e, start, Request{Target: "b.com", Session: "s1", Labels: mustLabels(t, "region=eu")})
	if l.Route != "r1" {
		t.Fatalf("session moved to %s", l.Route)
	}
	e.Report(start, l, Outcome{Class: Canceled})
	// A session whose route lost the required label is never switched
	// silently.
	if _, err := e.Acquire(start, Request{Target: "b.com", Session: "s1", Labels: mustLabels(t, "region=us")}); !errors.Is(err, ErrSessionRestartRequired) {
		t.Fatalf("session on a route that lost the label: %v, want ErrSessionRestartRequired", err)
	}
	// The lease granted before the update is still reported normally.
	if err := e.Report(start, held, okOutcome); err != nil {
		t.Fatalf("lease from before the update: %v", err)
	}
	// Operator state survives too.
	if err := e.Drain(start, "r2"); err != nil {
		t.Fatal(err)
	}
	if err := e.UpdateRoute(start, RouteSpec{ID: "r2", Labels: mustLabels(t, "region=eu plan=c")}); err != nil {
		t.Fatal(err)
	}
	if s := state(t, e, "r2"); s != Draining {
		t.Fatalf("drained route %v after update", s)
	}
	if _, err := e.Acquire(start, Request{Target: "a.com", Labels: mustLabels(t, "plan=c")}); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("drained route's new label: %v, want ErrNoRoute", err)
	}
}

func TestUpdateRouteMaxInflight(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Seed: 5, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddRoute(start, RouteSpec{ID: "a", MaxInflight: 3}); err != nil {
		t.Fatal(err)
	}
	held := make([]Lease, 3)
	for i := range held {
		held[i] = mustAcquire(t, e, start, Request{Target: "a.com"})
	}
	if _, err := e.Acquire(start, Request{Target: "a.com"}); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("fourth lease at max_inflight=3: %v, want ErrNoRoute", err)
	}
	if err := e.UpdateRoute(start, RouteSpec{ID: "a", MaxInflight: 1}); err != nil {
		t.Fatal(err)
	}
	// 3, then 2, then 1 in flight: at or over the new limit of 1.
	for i, l := range held {
		if _, err := e.Acquire(start, Request{Target: "a.com"}); !errors.Is(err, ErrNoRoute) {
			t.Fatalf("%d in flight over max_inflight=1: %v, want ErrNoRoute", len(held)-i, err)
		}
		if err := e.Report(start, l, okOutcome); err != nil {
			t.Fatalf("lease granted under the old limit: %v", err)
		}
	}
	l := mustAcquire(t, e, start, Request{Target: "a.com"})
	if _, err := e.Acquire(start, Request{Target: "a.com"}); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("second lease at max_inflight=1: %v, want ErrNoRoute", err)
	}
	// Raising the limit takes effect at once, without a report.
	if err := e.UpdateRoute(start, RouteSpec{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	m := mustAcquire(t, e, start, Request{Target: "a.com"})
	for _, l := range []Lease{l, m} {
		if err := e.Report(start, l, okOutcome); err != nil {
			t.Fatal(err)
		}
	}
	if spec, _ := e.RouteSpec("a"); spec.MaxInflight != 0 {
		t.Fatalf("RouteSpec max_inflight %d, want 0", spec.MaxInflight)
	}
}

func TestUpdateRouteWeightAndCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc         string
		weight, cost float64
		factor       float64 // of the selection weight before
	}{
		{"weight 0 means 1", 0, 0, 1},
		{"double weight", 2, 0, 2},
		{"cost halves", 1, 1, 0.5},
		{"both", 3, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{}, 2)
			before, _ := e.Route("r0")
			spec := RouteSpec{ID: "r0", Weight: tt.weight, Cost: tt.cost}
			if err := e.UpdateRoute(start, spec); err != nil {
				t.Fatal(err)
			}
			after, _ := e.Route("r0")
			if want := before.Weight * tt.factor; math.Abs(after.Weight-want) > 1e-12*want {
				t.Errorf("weight %v after update, want %v", after.Weight, want)
			}
			if got, _ := e.RouteSpec("r0"); !slices.Equal(got.Labels, spec.Labels) || got.Weight != spec.Weight || got.Cost != spec.Cost || got.MaxInflight != 0 || got.ID != "r0" {
				t.Errorf("RouteSpec = %+v, want %+v", got, spec)
			}
		})
	}
}

func TestUpdateRouteRejects(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 1)
	us := mustLabels(t, "region=us")
	if err := e.UpdateRoute(start, RouteSpec{ID: "r0", Labels: us, Weight: 2}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc string
		spec RouteSpec
		want error // nil: any error
	}{
		{"unknown route", RouteSpec{ID: "nope"}, ErrUnknownRoute},
		{"empty id", RouteSpec{}, nil},
		{"negative weight", RouteSpec{ID: "r0", Weight: -1}, nil},
		{"infinite cost", RouteSpec{ID: "r0", Cost: math.Inf(1)}, nil},
		{"NaN weight", RouteSpec{ID: "r0", Weight: math.NaN()}, nil},
		{"negative max_inflight", RouteSpec{ID: "r0", MaxInflight: -1}, nil},
	}
	for _, tt := range tests {
		err := e.UpdateRoute(start, tt.spec)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: %v, want %v", tt.desc, err, tt.want)
		}
	}
	// A rejected update changes nothing.
	if spec, _ := e.RouteSpec("r0"); !slices.Equal(spec.Labels, us) || spec.Weight != 2 {
		t.Fatalf("after rejected updates: %+v", spec)
	}
	if _, ok := e.RouteSpec("nope"); ok {
		t.Fatal("RouteSpec of an unknown route")
	}
}

// TestRouteSpecIsACopy checks that neither the caller's slice nor the one
// RouteSpec returns aliases the labels selection reads without a lock.
func TestRouteSpecIsACopy(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 0)
	labels := mustLabels(t, "region=us")
	if err := e.AddRoute(start, RouteSpec{ID: "a", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	labels[0].Value = "eu"
	spec, _ := e.RouteSpec("a")
	spec.Labels[0].Value = "de"
	if got, _ := drawn(t, e, start, mustLabels(t, "region=us"), 1); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("region=us after the caller changed its slices: %v", got)
	}
}

// TestUpdateRouteConcurrent flips a route's labels, limit and weight while
// other goroutines acquire and report. A request that ran entirely between
// two updates must see the labels in force, and at the end every index must
// hold exactly the weights a refresh computes now.
func TestUpdateRouteConcurrent(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Seed: 11, MaxRemovedShare: -1, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	us, eu := mustLabels(t, "region=us"), mustLabels(t, "region=eu")
	specs := [2]RouteSpec{
		{ID: "flip", Labels: mustLabels(t, "region=us isp=x")},
		{ID: "flip", Labels: mustLabels(t, "region=eu plan=b"), MaxInflight: 2, Weight: 3},
	}
	for _, s := range []RouteSpec{specs[0], {ID: "us", Labels: us}, {ID: "eu", Labels: eu}, {ID: "any"}} {
		if err := e.AddRoute(start, s); err != nil {
			t.Fatal(err)
		}
	}
	var clock atomic.Int64 // ns since start: every call moves time on
	now := func() time.Time { return start.Add(time.Duration(clock.Add(int64(time.Microsecond)))) }
	// epoch is odd while an update runs; at an even epoch n, specs[n/2%2]
	// is in force.
	var epoch atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop.Store(true)
		for i := range 400 {
			epoch.Add(1)
			if err := e.UpdateRoute(now(), specs[(i+1)%2]); err != nil {
				t.Error(err)
			}
			epoch.Add(1)
		}
	})
	// Only route×target failures: a global state change could start a slow
	// start, whose weight depends on the time of the refresh.
	classes := []Class{OK, OK, OK, Canceled, Blocked, Target5xx}
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				var req Request
				switch (g + i) % 3 {
				case 0:
					req.Labels = us
				case 1:
					req.Labels = eu
				}
				req.Target = fmt.Sprintf("t%d.com", i%5)
				before := epoch.Load()
				l, err := e.Acquire(now(), req)
				if err != nil {
					continue
				}
				if after := epoch.Load(); l.Route == "flip" && before == after && before%2 == 0 {
					if have := specs[before/2%2].Labels; !have.Matches(req.Labels) {
						t.Errorf("flip with labels %v granted to a request for %v", have, req.Labels)
					}
				}
				e.Report(now(), l, Outcome{Class: classes[(g+i)%len(classes)], Latency: time.Millisecond})
			}
		})
	}
	wg.Wait()

	// Nothing runs now: a fresh refresh must find every weight in place.
	ns := start.UnixNano() + clock.Load()
	for slot := range e.routes.len() {
		r := e.routes.get(slot)
		rc := r.config.Load()
		w, all := e.pool.weight(slot)
		e.refresh(r, ns)
		if w2, all2 := e.pool.weight(slot); w2 != w || all2 != all {
			t.Errorf("%s: pool weights (%v, %v), a refresh computes (%v, %v)", r.id, w, all, w2, all2)
		}
		for l, x := range *e.labels.Load() {
			gw, gall := x.weight(slot)
			member := slices.Contains(rc.labels, l)
			if !member && (gw != 0 || gall != 0) {
				t.Errorf("%s: weights (%v, %v) in the index of %v, a label it does not have", r.id, gw, gall, l)
			}
			if member && (gw != w || gall != all) {
				t.Errorf("%s: weights (%v, %v) in the index of %v, want (%v, %v) as in the pool", r.id, gw, gall, l, w, all)
			}
		}
	}
	for l, x := range *e.labels.Load() {
		want := 0
		for slot := range e.routes.len() {
			if slices.Contains(e.routes.get(slot).config.Load().labels, l) {
				want++
			}
		}
		if _, _, n := x.counts(); n != want {
			t.Errorf("index of %v has %d members, want %d", l, n, want)
		}
	}
	for _, st := range e.Routes() {
		if st.Inflight != 0 {
			t.Errorf("%s: %d leases left in flight", st.ID, st.Inflight)
		}
	}
}

func TestWeightIndexRemove(t *testing.T) {
	t.Parallel()
	type op struct {
		slot   int32
		w, all float64
		remove bool
	}
	tests := []struct {
		desc                   string
		ops                    []op
		eligible, all, members int
	}{
		{"remove the only member", []op{{slot: 3, w: 1, all: 1}, {slot: 3, remove: true}}, 0, 0, 0},
		{"remove a zero-weight member", []op{{slot: 3}, {slot: 3, remove: true}}, 0, 0, 0},
		{"remove one of two", []op{{slot: 3, w: 1, all: 1}, {slot: 19, w: 2, all: 2}, {slot: 19, remove: true}}, 1, 1, 1},
		{"remove twice", []op{{slot: 3, w: 1, all: 1}, {slot: 3, remove: true}, {slot: 3, remove: true}}, 0, 0, 0},
		{"remove a slot never set", []op{{slot: 3, w: 1, all: 1}, {slot: 4, remove: true}, {slot: 900, remove: true}}, 1, 1, 1},
		{"set again after remove", []op{{slot: 3, w: 1, all: 1}, {slot: 3, remove: true}, {slot: 3, w: 0, all: 2}}, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			x := newWeightIndex()
			for _, o := range tt.ops {
				if o.remove {
					x.remove(o.slot)
				} else {
					x.set(o.slot, o.w, o.all)
				}
			}
			if e, a, n := x.counts(); e != tt.eligible || a != tt.all || n != tt.members {
				t.Errorf("counts() = (%d, %d, %d), want (%d, %d, %d)", e, a, n, tt.eligible, tt.all, tt.members)
			}
			last := tt.ops[len(tt.ops)-1]
			if w, all := x.weight(last.slot); last.remove && (w != 0 || all != 0) {
				t.Errorf("removed slot %d weighs (%v, %v)", last.slot, w, all)
			}
			if _, _, _, ok := x.sample(1<<63, false); ok != (tt.eligible > 0) {
				t.Errorf("sample found a slot: %v, want %v", ok, tt.eligible > 0)
			}
		})
	}
}

// TestRouteIDs checks that RouteIDs lists the routes in the order they
// were added from any skip, and that RouteCount counts them all, a
// drained route too.
func TestRouteIDs(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 3)
	if err := e.Drain(start, "r1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		skip int
		want []string
	}{
		{"all", 0, []string{"r0", "r1", "r2"}},
		{"after the first", 1, []string{"r1", "r2"}},
		{"none new", 3, nil},
		{"past the end", 5, nil},
		{"negative", -1, []string{"r0", "r1", "r2"}},
	} {
		if got := e.RouteIDs(nil, tc.skip); !slices.Equal(got, tc.want) {
			t.Errorf("%s: RouteIDs(nil, %d) = %v, want %v", tc.desc, tc.skip, got, tc.want)
		}
	}
	if n := e.RouteCount(); n != 3 {
		t.Errorf("RouteCount = %d, want 3", n)
	}
}

// TestEachRoute checks that EachRoute and RouteGlobal see what Routes
// does but the pairs, and allocate nothing per route (the one status it lends fn escapes).
// Not parallel: AllocsPerRun refuses to be.
func TestEachRoute(t *testing.T) {
	e := newTestEngine(t, Config{}, 3)
	if err := e.UpdateRoute(start, RouteSpec{ID: "r2", Labels: mustLabels(t, "region=us")}); err != nil {
		t.Fatal(err)
	}
	if err := e.Feedback(start, "r1", "shop.example", Outcome{Class: Blocked}); err != nil {
		t.Fatal(err)
	}
	if err := e.Drain(start, "r0"); err != nil {
		t.Fatal(err)
	}
	var got []RouteStatus
	e.EachRoute(func(st *RouteStatus) {
		c := *st
		c.Labels = slices.Clone(st.Labels)
		got = append(got, c)
	})
	want := e.Routes()
	for i := range want {
		want[i].Targets = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("EachRoute saw\n%+v\nRoutes has\n%+v", got, want)
	}
	if n := testing.AllocsPerRun(10, func() { e.EachRoute(func(*RouteStatus) {}) }); n > 1 {
		t.Errorf("EachRoute allocates %v times", n)
	}
	for _, w := range want {
		if g, ok := e.RouteGlobal(w.ID); !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("RouteGlobal(%s) = %+v, %v; want %+v", w.ID, g, ok, w)
		}
	}
	if _, ok := e.RouteGlobal("nope"); ok {
		t.Error("RouteGlobal of an unknown route")
	}
	if n := testing.AllocsPerRun(10, func() { e.RouteGlobal("r1") }); n != 0 {
		t.Errorf("RouteGlobal allocates %v times", n)
	}
}

package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// newTierEngine returns a seeded engine with cheap routes c0.. on tier 0
// and costly ones x0.. on tier 1.
func newTierEngine(t testing.TB, cfg Config, cheap, costly int) *Engine {
	t.Helper()
	e := newTestEngine(t, cfg, 0)
	for i := range cheap {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("c%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range costly {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("x%d", i), Tier: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// tierOfPicks acquires n leases for target, reports each with class c, and
// counts them by the tier of their route.
func tierOfPicks(t *testing.T, e *Engine, now time.Time, target string, n int, c Class) (cheap, costly int) {
	t.Helper()
	for range n {
		l := mustAcquire(t, e, now, Request{Target: target})
		if strings.HasPrefix(l.Route, "x") {
			costly++
		} else {
			cheap++
		}
		o := Outcome{Class: c}
		if c == OK {
			o.Latency = 100 * time.Millisecond
		}
		if err := e.Report(now, l, o); err != nil {
			t.Fatal(err)
		}
	}
	return cheap, costly
}

func TestOneTierPoolHasNoTierState(t *testing.T) {
	e := newTestEngine(t, Config{}, 4)
	mustAcquire(t, e, start, Request{Target: "a.example"})
	if lvl := e.tierLevel(e.target("a.example"), start.UnixNano()); lvl != -1 {
		t.Fatalf("tier level in a pool of one tier = %d, want -1", lvl)
	}
	if e.target("a.example").tier.Load() != nil {
		t.Fatal("a pool of one tier allocated tier state")
	}
}

func TestCheapTierServesWhereItWorks(t *testing.T) {
	e := newTierEngine(t, Config{}, 6, 3)
	if cheap, costly := tierOfPicks(t, e, start, "news.example", 300, OK); costly != 0 {
		t.Fatalf("a target the cheap tier serves well got %d of %d picks on the costly tier", costly, cheap+costly)
	}
	if got := e.Tiers(); len(got) != 0 {
		t.Fatalf("Tiers() = %+v, want none above tier 0", got)
	}
}

// A site that refuses the whole cheap tier (blocked for every cheap route,
// a datacenter range banned) moves up after tierMinSamples answers, without
// waiting for every cheap route to be banned one by one, and only there;
// after TierCalm it tries the cheap tier again, and a try that fails at
// once doubles the calm.
func TestEscalationAndCalm(t *testing.T) {
	e := newTierEngine(t, Config{}, 40, 4)
	sub := e.Subscribe(64, EventTier)
	defer sub.Close()
	now := start
	var cheap int
	for range 100 {
		l := mustAcquire(t, e, now, Request{Target: "shop.example"})
		if strings.HasPrefix(l.Route, "x") {
			if err := e.Report(now, l, Outcome{Class: OK, Latency: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		cheap++
		if err := e.Report(now, l, Outcome{Class: Blocked}); err != nil {
			t.Fatal(err)
		}
	}
	if cheap != tierMinSamples {
		t.Fatalf("the cheap tier took %d blocked attempts at the shop, want %d (tierMinSamples) before escalation", cheap, tierMinSamples)
	}
	tiers := e.Tiers()
	if len(tiers) != 1 || tiers[0].Target != "shop.example" || tiers[0].Tier != 1 || tiers[0].Serving != 1 ||
		!tiers[0].Until.Equal(now.Add(time.Minute)) || !strings.Contains(tiers[0].Reason, "0/8 valid") {
		t.Fatalf("Tiers() = %+v, want shop.example on tier 1 until %v with its reason", tiers, now.Add(time.Minute))
	}
	if evs := sub.Poll(nil); len(evs) != 1 || evs[0].Kind != EventTier || evs[0].Target != "shop.example" || evs[0].FromTier != 0 || evs[0].ToTier != 1 {
		t.Fatalf("tier events = %+v", evs)
	}
	if cheap, _ := tierOfPicks(t, e, now, "news.example", 50, OK); cheap != 50 {
		t.Fatalf("another site got %d of 50 picks on the cheap tier, want all", cheap)
	}

	// After the calm period the shop is tried on the cheap tier again,
	// through routes it has not banned yet.
	now = now.Add(time.Minute)
	if lvl := e.tierLevel(e.target("shop.example"), now.UnixNano()); lvl != 0 {
		t.Fatalf("tier level after the calm = %d, want 0", lvl)
	}
	if evs := sub.Poll(nil); len(evs) != 1 || evs[0].FromTier != 1 || evs[0].ToTier != 0 {
		t.Fatalf("step-down events = %+v", evs)
	}
	// The try fails at once: back up, for twice as long.
	for i := range tierMinSamples {
		report(t, e, now, fmt.Sprintf("c%d", 20+i), "shop.example", Blocked, 1)
	}
	tiers = e.Tiers()
	if len(tiers) != 1 || tiers[0].Tier != 1 || !tiers[0].Until.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("after a failed try Tiers() = %+v, want tier 1 until %v", tiers, now.Add(2*time.Minute))
	}
	// A try that holds for a calm period ends the doubling.
	now = now.Add(2 * time.Minute)
	e.tierLevel(e.target("shop.example"), now.UnixNano())
	report(t, e, now, "c30", "shop.example", OK, 20)
	now = now.Add(5 * time.Minute)
	for i := range tierWindowSize {
		report(t, e, now, fmt.Sprintf("c%d", 31+i%9), "shop.example", Blocked, 1)
	}
	if tiers = e.Tiers(); len(tiers) != 1 || !tiers[0].Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("after a try that held, Tiers() = %+v, want the calm back to 1m", tiers)
	}
}

// Failures that are not the target's answer through the tier do not
// escalate: an exit's own faults and 429s (pacing's).
func TestTierIgnoresRouteFaultsAndRateLimits(t *testing.T) {
	for _, c := range []Class{ProxyConnectFailed, ProxyAuth, RateLimited, ClientError, Canceled} {
		t.Run(c.String(), func(t *testing.T) {
			e := newTierEngine(t, Config{}, 20, 2)
			mustAcquire(t, e, start, Request{Target: "a.example"})
			for i := range 20 {
				report(t, e, start, fmt.Sprintf("c%d", i), "a.example", c, 1)
			}
			if lvl := e.tierLevel(e.target("a.example"), start.UnixNano()); lvl != 0 {
				t.Fatalf("%v escalated the target to tier %d", c, lvl)
			}
		})
	}
}

// A tier with nothing to give (every route at max_inflight) lends the
// pick to the next tier without escalating the target.
func TestExhaustedTierClimbs(t *testing.T) {
	e := newTestEngine(t, Config{}, 0)
	for i := range 3 {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("c%d", i), MaxInflight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.AddRoute(start, RouteSpec{ID: "x0", Tier: 1}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if l := mustAcquire(t, e, start, Request{Target: "a.example"}); l.Route == "x0" {
			t.Fatal("the costly tier was drawn while the cheap one had room")
		}
	}
	if l := mustAcquire(t, e, start, Request{Target: "a.example"}); l.Route != "x0" {
		t.Fatalf("with the cheap tier full the pick went to %s, want x0", l.Route)
	}
	tiers := e.Tiers()
	if len(tiers) != 1 || tiers[0].Tier != 0 || tiers[0].Serving != 1 {
		t.Fatalf("Tiers() = %+v, want tier 0 served from tier 1", tiers)
	}
}

// Hard constraints hold in every tier: a request for region=us climbs to
// the costly tier's region=us routes, never to its others.
func TestTierClimbKeepsLabels(t *testing.T) {
	e := newTestEngine(t, Config{}, 0)
	us := Labels{{Key: "region", Value: "us"}}
	for _, s := range []RouteSpec{
		{ID: "c-us", Labels: us, MaxInflight: 1}, {ID: "c-de", Labels: Labels{{Key: "region", Value: "de"}}},
		{ID: "x-us", Labels: us, Tier: 1}, {ID: "x-de", Labels: Labels{{Key: "region", Value: "de"}}, Tier: 1},
	} {
		if err := e.AddRoute(start, s); err != nil {
			t.Fatal(err)
		}
	}
	req := Request{Target: "a.example", Labels: us}
	if l := mustAcquire(t, e, start, req); l.Route != "c-us" {
		t.Fatalf("first pick = %s, want c-us", l.Route)
	}
	for range 20 {
		if l := mustAcquire(t, e, start, req); l.Route != "x-us" {
			t.Fatalf("with c-us full the pick went to %s, want x-us", l.Route)
		}
	}
}

// A site down for everyone fails through the costly tier too: the target
// goes back to the cheap tier and stays there while the incident is open.
func TestNoEscalationForAnIncident(t *testing.T) {
	e := newTierEngine(t, Config{}, 10, 10)
	target := "down.example"
	mustAcquire(t, e, start, Request{Target: target})
	now := start
	// The guard judges after half a window of its own evidence.
	report(t, e, now, "c0", target, Target5xx, 1)
	now = now.Add(31 * time.Second)
	for i := range tierMinSamples {
		report(t, e, now, fmt.Sprintf("c%d", i+1), target, Target5xx, 1)
	}
	if lvl := e.tierLevel(e.target(target), now.UnixNano()); lvl != 1 {
		t.Fatalf("tier level after the cheap tier failed = %d, want 1 (the costlier tier tells the site from the tier)", lvl)
	}
	for i := range tierMinSamples {
		report(t, e, now, fmt.Sprintf("x%d", i), target, Target5xx, 1)
	}
	if _, open := e.store.Incident(e.target(target).n); !open {
		t.Fatal("no incident open for a site failing through every route")
	}
	if lvl := e.tierLevel(e.target(target), now.UnixNano()); lvl != 0 {
		t.Fatalf("tier level with the site down through both tiers = %d, want 0", lvl)
	}
	if tiers := e.Tiers(); len(tiers) != 1 || !strings.HasPrefix(tiers[0].Reason, "incident") {
		t.Fatalf("Tiers() = %+v, want the incident as the reason", tiers)
	}
	for i := range 20 {
		report(t, e, now, fmt.Sprintf("c%d", i%10), target, Target5xx, 1)
	}
	if lvl := e.tierLevel(e.target(target), now.UnixNano()); lvl != 0 {
		t.Fatalf("escalated to tier %d while the incident is open", lvl)
	}
}

func TestRouteTierUpdates(t *testing.T) {
	e := newTierEngine(t, Config{}, 2, 1)
	if err := e.AddRoute(start, RouteSpec{ID: "bad", Tier: MaxTier + 1}); err == nil {
		t.Fatal("a tier above MaxTier was accepted")
	}
	if spec, _ := e.RouteSpec("x0"); spec.Tier != 1 {
		t.Fatalf("RouteSpec(x0).Tier = %d, want 1", spec.Tier)
	}
	// The costly route joins tier 0: the pool has one tier again.
	if err := e.UpdateRoute(start, RouteSpec{ID: "x0"}); err != nil {
		t.Fatal(err)
	}
	if n := e.tiers.Load(); n != 0 {
		t.Fatalf("tiers after the only tier-1 route moved to 0 = %d, want 0 (one tier)", n)
	}
	if err := e.UpdateRoute(start, RouteSpec{ID: "c1", Tier: 2}); err != nil {
		t.Fatal(err)
	}
	if n := e.tiers.Load(); n != 3 {
		t.Fatalf("tiers with a route on tier 2 = %d, want 3", n)
	}
	// Tier 1 has no route: a target escalated past tier 0 draws from 2.
	for range 10 {
		if l := mustAcquire(t, e, start, Request{Target: "a.example", Avoid: []string{"c0", "x0"}}); l.Route != "c1" {
			t.Fatalf("pick = %s, want c1 (tier 2)", l.Route)
		}
	}
}

// Not parallel: AllocsPerRun counts every goroutine's allocations.
func TestTieredAcquireReportAllocatesNothing(t *testing.T) {
	e := newTierEngine(t, Config{}, 50, 10)
	targets := []string{"a.example", "b.example"}
	for _, tg := range targets {
		mustAcquire(t, e, start, Request{Target: tg}) // the targets' state, once
	}
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		l, err := e.Acquire(start, Request{Target: targets[i%2]})
		i++
		if err != nil {
			t.Fatal(err)
		}
		_ = e.Report(start, l, Outcome{Class: OK, Latency: 100 * time.Millisecond})
	}); n != 0 {
		t.Fatalf("tiered acquire+report allocated %v times", n)
	}
}

// A cheaper route passing its probe of the target steps an escalated
// target down at once: the tier works there again, before the calm says.
func TestTierStepsDownOnAPassedProbe(t *testing.T) {
	e := newTierEngine(t, Config{TierCalm: time.Hour, TierCalmMax: time.Hour}, 10, 2)
	now := start
	for range 40 {
		l := mustAcquire(t, e, now, Request{Target: "shop.example"})
		c := Blocked
		if strings.HasPrefix(l.Route, "x") {
			c = OK
		}
		if err := e.Report(now, l, Outcome{Class: c, Latency: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if lvl := e.tierLevel(e.target("shop.example"), now.UnixNano()); lvl != 1 {
		t.Fatalf("tier level after the cheap tier's bans = %d, want 1", lvl)
	}
	// The bans' cooldowns end; the half-open pairs' probes pass.
	now = now.Add(10 * time.Minute)
	e.Sweep(now)
	if n := probeUntilDone(t, e, now); n == 0 {
		t.Fatal("no probe of the cooled pairs")
	}
	tiers := e.Tiers()
	if lvl := e.tierLevel(e.target("shop.example"), now.UnixNano()); lvl != 0 || len(tiers) != 1 || !strings.Contains(tiers[0].Reason, "passed its probe") {
		t.Fatalf("after the probes passed: level %d, Tiers() %+v; want tier 0, stepped down by a probe", lvl, tiers)
	}
}

// A request asking for a tier (tier=N) is served from that tier or above,
// whatever tier its target is at, and never below: not when its tier is
// full, not in the least-bad fallback, not for a session bound below it.
// A tier above every route's matches nothing; a value that is no tier is
// refused.
func TestRequestedTierIsAFloor(t *testing.T) {
	floor := func(n string) Labels { return Labels{{Key: TierKey, Value: n}} }
	e := newTestEngine(t, Config{}, 0)
	for _, s := range []RouteSpec{
		{ID: "c0"}, {ID: "c1"},
		{ID: "x0", Tier: 1, MaxInflight: 2}, {ID: "m0", Tier: 2, MaxInflight: 1},
	} {
		if err := e.AddRoute(start, s); err != nil {
			t.Fatal(err)
		}
	}
	req := Request{Target: "a.example", Labels: floor("1")}
	var got []string
	for range 3 { // x0's two, then the climb to m0
		got = append(got, mustAcquire(t, e, start, req).Route)
	}
	if want := []string{"x0", "x0", "m0"}; !slices.Equal(got, want) {
		t.Fatalf("picks for tier=1 = %v, want %v", got, want)
	}
	if l, err := e.Acquire(start, req); err == nil {
		t.Fatalf("tier=1 with every route of tier 1 and above full leased %s, below the floor", l.Route)
	}
	if l := mustAcquire(t, e, start, Request{Target: "a.example"}); l.Route != "c0" && l.Route != "c1" {
		t.Fatalf("a request asking no tier went to %s, want the cheap tier", l.Route)
	}

	bound := Request{Target: "b.example", Session: "s1"}
	l := mustAcquire(t, e, start, bound) // bound to a cheap route: the rest are full
	if _, err := e.Acquire(start, Request{Target: "b.example", Session: "s1", Labels: floor("1")}); !errors.Is(err, ErrSessionRestartRequired) {
		t.Fatalf("a session bound to %s asked for tier 1: %v, want ErrSessionRestartRequired", l.Route, err)
	}
	if _, err := e.Acquire(start, Request{Target: "a.example", Labels: floor("3")}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("tier=3 in a pool whose costliest tier is 2: %v, want ErrNoMatch", err)
	}
	if _, err := e.Acquire(start, Request{Target: "a.example", Labels: floor("x")}); err == nil {
		t.Fatal("tier=x accepted")
	}
	if _, err := ParseLabels("tier=8"); err == nil {
		t.Fatal("ParseLabels accepted tier=8, above MaxTier")
	}
}

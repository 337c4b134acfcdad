package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// leaseOf leases route toward target at now, as the only one of r0 to
// r(n-1) not avoided.
func leaseOf(t *testing.T, e *Engine, now time.Time, route, target string, n int) Lease {
	t.Helper()
	var avoid []string
	for i := range n {
		if id := fmt.Sprintf("r%d", i); id != route {
			avoid = append(avoid, id)
		}
	}
	l, err := e.Acquire(now, Request{Target: target, Avoid: avoid})
	if err != nil || l.Route != route {
		t.Fatalf("lease %+v, %v; want %s", l, err, route)
	}
	return l
}

// attemptAt leases route as leaseOf does and reports o for it at now.
func attemptAt(t *testing.T, e *Engine, now time.Time, route, target string, n int, o Outcome) {
	t.Helper()
	if err := e.Report(now, leaseOf(t, e, now, route, target, n), o); err != nil {
		t.Fatal(err)
	}
}

// heldRate is the rate route slot toward target is held to at now (0:
// none).
func heldRate(e *Engine, slot int32, target string, now time.Time) float64 {
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
	return p.rateAt(&e.cfg, now.UnixNano())
}

var rateLimited = Outcome{Class: RateLimited, RetryAfter: time.Millisecond}

// TestPaceLearnedFrom429s lays out timelines (seconds from start) of what
// a pair sent before its 429s and checks the rate it is held to.
func TestPaceLearnedFrom429s(t *testing.T) {
	t.Parallel()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		desc  string
		sent  int     // successes r0 sends, evenly over the first 20 s, before its first 429 at 20 s
		then  float64 // when its second 429 comes, 0 for none
		share float64 // the share of its held rate it sends until then (0: all of it)
		want  float64 // the rate it is held to after the last 429
	}{
		{desc: "first 429 without a count: PaceStart", sent: 0, want: 4},
		{desc: "first 429: rateMargin of what it was sending", sent: 40, want: rateMargin * 2},
		{desc: "a 429 while held, having sent its rate: rateMargin of what it sent", sent: 40, then: 40, want: rateMargin * rateMargin * 2},
		{desc: "a 429 while held, having sent far less: rateBackoff of the held rate", sent: 40, then: 40, share: 0.5, want: rateBackoff * rateMargin * 2},
		{desc: "a 429 right after the last: half the held rate", sent: 40, then: 20.5, want: rateMargin * 2 / 2},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
			e.watch(e.target("s.com"))
			for i := range tt.sent {
				attemptAt(t, e, at(20*float64(i)/float64(tt.sent)), "r0", "s.com", 2, okOutcome)
			}
			attemptAt(t, e, at(20), "r0", "s.com", 2, rateLimited)
			if tt.then > 0 {
				// Sent at its share of its held rate until then, none of it
				// tripping.
				share := tt.share
				if share == 0 {
					share = 1
				}
				for s := 21.0; s < tt.then; s += 1 / (share * heldRate(e, 0, "s.com", at(s))) {
					e.Feedback(at(s), "r0", "s.com", okOutcome)
					e.takePace(e.target("s.com"), 0, at(s).UnixNano())
				}
				e.learnRate(e.target("s.com"), 0, at(tt.then).UnixNano(), at(tt.then).UnixNano(), time.Millisecond)
			}
			if got := heldRate(e, 0, "s.com", at(max(20, tt.then))); math.Abs(got-tt.want) > 0.05*tt.want {
				t.Errorf("held to %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPaceGrowsUnderPressureOnly: a held rate grows by PaceGrowth a minute
// only while it holds requests back, and only drifts toward a rate that
// tripped before.
func TestPaceGrowsUnderPressureOnly(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: 1}, 2)
	tg := e.target("s.com")
	e.watch(tg)
	e.learnRate(tg, 0, start.UnixNano(), start.UnixNano(), 0)
	idle := start.Add(10 * time.Minute)
	if got := heldRate(e, 0, "s.com", idle); got != 1 {
		t.Fatalf("held to %v after 10 idle minutes, want 1: no pressure, no growth", got)
	}
	// A minute of asking it every second while it has no token.
	for s := range 61 {
		now := idle.Add(time.Duration(s) * time.Second)
		if e.paceWait(tg, 0, now.UnixNano()) == 0 {
			e.takePace(tg, 0, now.UnixNano())
		}
		e.paceWait(tg, 0, now.Add(500*time.Millisecond).UnixNano()) // held back
	}
	pressed := idle.Add(time.Minute)
	if got := heldRate(e, 0, "s.com", pressed); math.Abs(got-1.1) > 0.02 {
		t.Errorf("held to %v after a minute of pressure, want about PaceGrowth, 1.1", got)
	}
	// A 429 while held at 1.1, having sent about 1 a second: the limit is
	// under what it sent, and the rate never grows back past rateMargin of
	// that but by a slow drift.
	e.learnRate(tg, 0, pressed.UnixNano(), pressed.UnixNano(), 0)
	p := tg.pace.Load().pair(0)
	p.mu.Lock()
	p.pressed = 100 // as if pressed for a long while
	ceiling := p.ceiling
	p.mu.Unlock()
	if ceiling < 0.95 || ceiling > 1.05 {
		t.Fatalf("ceiling %v, want what it sent, about 1, not the 1.1 it was held to", ceiling)
	}
	if got, want := heldRate(e, 0, "s.com", pressed), rateMargin*ceiling; math.Abs(got-want) > 0.01 {
		t.Errorf("held to %v under long pressure, want the ceiling's %v", got, want)
	}
	if got, want := heldRate(e, 0, "s.com", pressed.Add(ceilingDrift)), rateMargin*ceiling*1.1; math.Abs(got-want) > 0.01 {
		t.Errorf("held to %v a drift later, want %v", got, want)
	}
}

// TestStale429sAreNoNews: the 429s to attempts leased before the last 429
// came are the same penalty.
func TestStale429sAreNoNews(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: 4}, 1)
	var inFlight []Lease
	for range 3 {
		inFlight = append(inFlight, mustAcquire(t, e, start, Request{Target: "s.com"}))
	}
	now := start.Add(time.Second)
	for _, l := range inFlight {
		e.Report(now, l, rateLimited)
	}
	if got := heldRate(e, 0, "s.com", now); got != 4 {
		t.Errorf("three 429s of attempts in flight together held the pair to %v, want PaceStart 4, once", got)
	}
}

// TestPacedPairsArePassedOver: a pair held to its rate is passed over,
// even in fallback, so requests go to the other routes or wait.
func TestPacedPairsArePassedOver(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: 1}, 2)
	attemptAt(t, e, start, "r0", "s.com", 2, rateLimited)
	now := start.Add(time.Second) // the Retry-After is over: r0 is back for s.com
	e.Sweep(now)
	// Requests that may only take r0 get it at its rate and are told to
	// wait the rest of the time: never the fallback past its rate.
	leased := 0
	for i := range 40 {
		at := now.Add(time.Duration(i) * 50 * time.Millisecond) // 2 s
		l, err := e.Acquire(at, Request{Target: "s.com", Avoid: []string{"r1"}})
		if errors.Is(err, ErrPaced) {
			continue
		}
		if err != nil || l.Route != "r0" {
			t.Fatalf("lease %+v, %v", l, err)
		}
		leased++
		e.Report(at, l, okOutcome)
	}
	if leased == 0 || leased > 3 {
		t.Errorf("r0 leased %d times in 2 s, want about its 1 request/s", leased)
	}
	// Other targets are not paced.
	for range 20 {
		l, err := e.Acquire(now, Request{Target: "other.com", Avoid: []string{"r1"}})
		if err != nil || l.Route != "r0" {
			t.Fatalf("other.com: %+v %v", l, err)
		}
		e.Report(now, l, okOutcome)
	}
	// With every route of the target held, Acquire says so instead of
	// falling back to one of them; strict or not.
	attemptAt(t, e, now, "r1", "s.com", 2, rateLimited)
	late := now.Add(time.Second)
	e.Sweep(late)
	for _, req := range []Request{{Target: "s.com"}, {Target: "s.com", Strict: true}} {
		for range 4 {
			l, err := e.Acquire(late, req)
			if errors.Is(err, ErrPaced) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			e.Report(late, l, okOutcome)
		}
		_, err := e.Acquire(late, req)
		pe, ok := errors.AsType[*PacedError](err)
		if !errors.Is(err, ErrPaced) || !ok || pe.RetryAfter <= 0 || pe.RetryAfter > 2*time.Second {
			t.Errorf("%+v with every pair at its rate: %v, want ErrPaced with a wait under 2 s", req, err)
		}
	}
}

// TestFreezeAfterTwoExits: once two exits had a 429 at a site, the others
// are held where their own 429 would hold them, as they send as much as
// the two that tripped, so the load the first shed cannot trip them in
// turn; one exit's 429 freezes nobody.
func TestFreezeAfterTwoExits(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 4)
	e.watch(e.target("s.com"))
	now := start
	for i := range 40 { // 10 s of each route sending 1 request/s
		now = start.Add(time.Duration(i) * 250 * time.Millisecond)
		attemptAt(t, e, now, fmt.Sprintf("r%d", i%4), "s.com", 4, okOutcome)
	}
	attemptAt(t, e, now, "r0", "s.com", 4, rateLimited)
	if got := heldRate(e, 2, "s.com", now); got != 0 {
		t.Fatalf("one exit's 429 held r2 to %v", got)
	}
	if st, _ := e.Pace(now, "s.com"); st.Frozen != 0 {
		t.Errorf("one exit's 429 reported the site frozen at %v", st.Frozen)
	}
	attemptAt(t, e, now, "r1", "s.com", 4, rateLimited)
	for _, slot := range []int32{2, 3} {
		if got := heldRate(e, slot, "s.com", now); got < 0.8 || got > 1.2 {
			t.Errorf("r%d held to %v after two exits' 429s, want rateMargin of its 1 request/s, read at its busiest", slot, got)
		}
	}
	// The status tells the freeze's guesses from what 429s taught.
	st, _ := e.Pace(now, "s.com")
	if st.Frozen <= 0 {
		t.Errorf("status frozen at %v after the freeze, want its rate", st.Frozen)
	}
	for _, p := range st.Pairs {
		if want := p.Route == "r2" || p.Route == "r3"; p.Guess != want {
			t.Errorf("%s reported guess %v, want %v", p.Route, p.Guess, want)
		}
	}
}

// TestFewLimitedExitsLeaveTheRestFree: a site whose 429s come from a few
// of the many exits that carried as much (or a few percent less) freezes
// nobody; once freezeShare of them have tripped, it freezes the rest.
// When the exits that tripped carried the most, the others showed nothing
// of a higher limit, and the site freezes at the first 429, unless the
// counts are too young to tell a rate from a burst (then at freezeShare of
// every exit).
func TestFewLimitedExitsLeaveTheRestFree(t *testing.T) {
	t.Parallel()
	const routes = 10
	tests := []struct {
		desc   string
		steps  int // of 100 ms, each exit sending one request in turn (1 a second)
		busy   int // requests r0 and r1 send for each of the others'
		extra  int // requests r0 and r1 send besides
		frozen int // exits tripped when the site freezes
	}{
		{desc: "the others carried as much", steps: 16 * routes, busy: 1, frozen: 3},
		{desc: "the others carried a little less", steps: 16 * routes, busy: 1, extra: 1, frozen: 3},
		{desc: "the others carried less", steps: 16 * routes, busy: 3, frozen: 1},
		{desc: "the others carried less in a burst", steps: routes, busy: 3, frozen: 3},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, routes)
			e.watch(e.target("s.com"))
			now := start
			for i := range tt.steps {
				now = start.Add(time.Duration(i) * 100 * time.Millisecond)
				r, n := i%routes, 1
				if r < 2 {
					n = tt.busy
				}
				if i < 2 {
					n += tt.extra
				}
				for range n {
					attemptAt(t, e, now, fmt.Sprintf("r%d", r), "s.com", routes, okOutcome)
				}
			}
			for i := range tt.frozen {
				if got := heldRate(e, 9, "s.com", now); got != 0 {
					t.Fatalf("%d of %d exits limited held r9 to %v, want it free", i, routes, got)
				}
				attemptAt(t, e, now, fmt.Sprintf("r%d", i), "s.com", routes, rateLimited)
			}
			if got := heldRate(e, 9, "s.com", now); got == 0 {
				t.Fatalf("%d of %d exits limited left r9 free, want the site frozen", tt.frozen, routes)
			}
		})
	}
}

// TestFreezeHoldsIdleExitsAtTheSiteRate: an exit the picks had kept
// nearly idle is frozen at the median rate the first 429s measured, not
// near the floor, and so is one first leased after the freeze; a first
// 429 too early to measure anything (PaceStart) does not count toward that
// median.
func TestFreezeHoldsIdleExitsAtTheSiteRate(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 5)
	e.watch(e.target("s.com"))
	now := start
	attemptAt(t, e, now, "r3", "s.com", 5, okOutcome) // r3 is leased once: it has pacing state
	// 10 s of r0 and r1 sending 3 requests/s each.
	for i := range 60 {
		now = start.Add(time.Duration(i) * time.Second / 6)
		attemptAt(t, e, now, fmt.Sprintf("r%d", i%2), "s.com", 5, okOutcome)
	}
	// r0 and r1 both leased before the first 429, which brakes the site,
	// and before either of theirs freezes it.
	leases := []Lease{leaseOf(t, e, now, "r0", "s.com", 5), leaseOf(t, e, now, "r1", "s.com", 5)}
	attemptAt(t, e, now, "r4", "s.com", 5, rateLimited) // nothing counted: PaceStart
	for _, l := range leases {
		e.Report(now, l, rateLimited)
	}
	measured := heldRate(e, 0, "s.com", now)
	if measured < 2 || measured > 3 {
		t.Fatalf("r0 held to %v after its 429 at 3 requests/s, want rateMargin of it", measured)
	}
	if got := heldRate(e, 3, "s.com", now); math.Abs(got-measured) > 0.3 {
		t.Errorf("idle r3 frozen at %v, want the measured %v, not PaceStart %v nor the floor", got, measured, e.cfg.PaceStart)
	}
	// r2, first leased after the freeze, starts held at the site's rate.
	attemptAt(t, e, now, "r2", "s.com", 5, okOutcome)
	if got := heldRate(e, 2, "s.com", now); math.Abs(got-measured) > 0.3 {
		t.Errorf("r2, new after the freeze, held to %v, want the measured %v", got, measured)
	}
}

// TestA429LeasedBeforeTheFreezeTeaches: the freeze's guess is no 429 of
// the pair's, so the pair's own 429 to an attempt leased before the freeze
// teaches it, as its first; the 429s to its attempts leased before that
// one are the same penalty.
func TestA429LeasedBeforeTheFreezeTeaches(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 5)
	e.watch(e.target("s.com"))
	now := start
	// 10 s of r0 and r1 sending 3 requests/s each.
	for i := range 60 {
		now = start.Add(time.Duration(i) * time.Second / 6)
		attemptAt(t, e, now, fmt.Sprintf("r%d", i%2), "s.com", 5, okOutcome)
	}
	lease := func(route string) Lease {
		t.Helper()
		var avoid []string
		for i := range 5 {
			if id := fmt.Sprintf("r%d", i); id != route {
				avoid = append(avoid, id)
			}
		}
		l, err := e.Acquire(now, Request{Target: "s.com", Avoid: avoid})
		if err != nil || l.Route != route {
			t.Fatalf("lease %+v, %v; want %s", l, err, route)
		}
		return l
	}
	// Leased before the site's first 429, which brakes it.
	r0, r1 := lease("r0"), []Lease{lease("r1"), lease("r1"), lease("r1")}
	attemptAt(t, e, now, "r4", "s.com", 5, rateLimited)
	now = now.Add(100 * time.Millisecond)
	e.Report(now, r0, rateLimited) // the second: the site freezes
	guess := heldRate(e, 1, "s.com", now)
	if guess == 0 {
		t.Fatal("r1 not held by the freeze")
	}
	now = now.Add(time.Millisecond)
	e.Report(now, r1[0], rateLimited)
	taught := heldRate(e, 1, "s.com", now)
	if taught >= guess*0.9 {
		t.Errorf("r1's own 429, of an attempt leased before the freeze, left it at %v from the freeze's %v, want it backed off", taught, guess)
	}
	for _, l := range r1[1:] {
		e.Report(now, l, rateLimited)
	}
	if got := heldRate(e, 1, "s.com", now); got != taught {
		t.Errorf("r1's 429s of attempts leased before its first moved its rate %v → %v, want the same penalty", taught, got)
	}
}

// TestFreezeWithoutAMeasuredRate: when every first 429 came too soon to
// measure a rate, an exit the picks had kept nearly idle is frozen where
// a new one starts, at PaceStart, not at twice its trickle.
func TestFreezeWithoutAMeasuredRate(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 4)
	e.watch(e.target("s.com"))
	now := start
	for i := range 3 { // r3: a request every 5 s
		now = start.Add(time.Duration(i) * 5 * time.Second)
		attemptAt(t, e, now, "r3", "s.com", 4, okOutcome)
	}
	attemptAt(t, e, now, "r0", "s.com", 4, rateLimited) // nothing counted: PaceStart
	attemptAt(t, e, now, "r1", "s.com", 4, rateLimited)
	for _, slot := range []int32{0, 1, 3} {
		if got := heldRate(e, slot, "s.com", now); got != e.cfg.PaceStart {
			t.Errorf("r%d held to %v, want PaceStart %v", slot, got, e.cfg.PaceStart)
		}
	}
}

// TestFreezeReadsNoRateFromABurst: a site that limits every exit freezes
// in its first second, and what an exit sent by then is a burst, not a
// rate: it is held where a new exit starts, not at twice the burst.
func TestFreezeReadsNoRateFromABurst(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 4)
	e.watch(e.target("s.com"))
	now := start
	for i := range 6 { // r2 and r3: 3 requests each in the first 600 ms
		now = start.Add(time.Duration(i) * 100 * time.Millisecond)
		attemptAt(t, e, now, fmt.Sprintf("r%d", 2+i%2), "s.com", 4, okOutcome)
	}
	attemptAt(t, e, now, "r0", "s.com", 4, rateLimited) // nothing counted: PaceStart
	attemptAt(t, e, now, "r1", "s.com", 4, rateLimited)
	for _, slot := range []int32{2, 3} {
		if got := heldRate(e, slot, "s.com", now); got != e.cfg.PaceStart {
			t.Errorf("r%d held to %v after a burst of 3 in its first second, want PaceStart %v", slot, got, e.cfg.PaceStart)
		}
	}
}

// TestYoungFirst429Brakes: a first 429 whose count is too young to weigh
// the other exits against spaces every exit no rate holds at the rate a
// freeze would hold it to, from its last request, until brakeFor has
// passed; one whose count is old enough does not, and a freeze ends it.
func TestYoungFirst429Brakes(t *testing.T) {
	t.Parallel()
	const routes = 10
	tests := []struct {
		desc      string
		paceStart float64       // the brake's rate: no first 429 measured one
		history   time.Duration // how long every exit sent 2 requests/s before r0's 429
		after     time.Duration // when r1's wait is read, after r1's lease and the 429
		want      time.Duration
		braked    float64 // the rate the site's status says it is braked at, then
	}{
		{desc: "young: spaced from its last request", paceStart: 4, after: 100 * time.Millisecond, want: 150 * time.Millisecond, braked: 4},
		{desc: "young: free once its turn came", paceStart: 4, after: 250 * time.Millisecond, want: 0, braked: 4},
		{desc: "young: not past brakeFor", paceStart: 0.5, after: brakeFor - time.Millisecond, want: time.Second + time.Millisecond, braked: 0.5},
		{desc: "young: free at brakeFor", paceStart: 0.5, after: brakeFor, want: 0},
		{desc: "a count old enough: no brake", paceStart: 4, history: 10 * time.Second, after: 100 * time.Millisecond, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: tt.paceStart}, routes)
			e.watch(e.target("s.com"))
			now := start
			for at := time.Duration(0); at < tt.history; at += 500 * time.Millisecond {
				now = start.Add(at)
				for r := range routes {
					attemptAt(t, e, now, fmt.Sprintf("r%d", r), "s.com", routes, okOutcome)
				}
			}
			attemptAt(t, e, now, "r1", "s.com", routes, okOutcome)
			attemptAt(t, e, now, "r0", "s.com", routes, rateLimited)
			if got := heldRate(e, 1, "s.com", now); got != 0 {
				t.Fatalf("r1 held to %v: the site froze", got)
			}
			if got := e.paceWait(e.target("s.com"), 1, now.Add(tt.after).UnixNano()); got != tt.want {
				t.Errorf("r1 waits %v, want %v", got, tt.want)
			}
			if st, _ := e.Pace(now.Add(tt.after), "s.com"); st.Braked != tt.braked {
				t.Errorf("status braked at %v, want %v", st.Braked, tt.braked)
			}
		})
	}
	t.Run("a freeze ends the brake", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 3)
		e.watch(e.target("s.com"))
		attemptAt(t, e, start, "r1", "s.com", 3, okOutcome)
		attemptAt(t, e, start, "r0", "s.com", 3, rateLimited)
		tp := e.target("s.com").pace.Load()
		if tp.brakeUntil.Load() == 0 {
			t.Fatal("a young first 429 did not brake the site")
		}
		attemptAt(t, e, start, "r2", "s.com", 3, rateLimited) // two of three: the site freezes
		if st, _ := e.Pace(start, "s.com"); tp.brakeUntil.Load() != 0 || st.Braked != 0 {
			t.Errorf("brake until %v, status braked at %v after the freeze; want none", tp.brakeUntil.Load(), st.Braked)
		}
		if got := heldRate(e, 1, "s.com", start); got != e.cfg.PaceStart {
			t.Errorf("r1 held to %v after the freeze, want PaceStart %v", got, e.cfg.PaceStart)
		}
	})
}

// TestFrozenPairWaitsItsTurn: a pair the freeze holds has in its bucket
// what its new rate would have earned since its last request: one that
// has just sent (all the first second's burst had) waits its turn, rather
// than send at once into a site that has shown it limits every exit; one
// idle for that long sends at once.
func TestFrozenPairWaitsItsTurn(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 4)
	e.watch(e.target("s.com"))
	attemptAt(t, e, start, "r3", "s.com", 4, okOutcome)
	now := start.Add(time.Second)
	attemptAt(t, e, now, "r2", "s.com", 4, okOutcome)
	attemptAt(t, e, now, "r0", "s.com", 4, rateLimited) // nothing counted: PaceStart
	attemptAt(t, e, now, "r1", "s.com", 4, rateLimited)
	turn := time.Duration(float64(time.Second) / e.cfg.PaceStart)
	only := func(route string) Request {
		req := Request{Target: "s.com"}
		for _, id := range []string{"r0", "r1", "r2", "r3"} {
			if id != route {
				req.Avoid = append(req.Avoid, id)
			}
		}
		return req
	}
	_, err := e.Acquire(now, only("r2"))
	pe, ok := errors.AsType[*PacedError](err)
	if !ok || pe.RetryAfter <= 0 || pe.RetryAfter > turn+time.Millisecond {
		t.Fatalf("r2, frozen as it sent: %v, want ErrPaced for about %v", err, turn)
	}
	l, err := e.Acquire(now.Add(turn), only("r2"))
	if err != nil || l.Route != "r2" {
		t.Fatalf("r2 a turn after the freeze: %+v, %v", l, err)
	}
	if l, err := e.Acquire(now, only("r3")); err != nil || l.Route != "r3" {
		t.Errorf("r3, idle for a second: %+v, %v; want it leased at once", l, err)
	}
}

// TestGuessedHolds: the freeze's holds are guesses, corrected by evidence
// (docs/design/005-cost.md). Six exits send evenly, each at its own rate,
// for 10 s; r0 and r1, at 4 requests/s, then have their first 429s: r0's
// freezes the others, as no more than r1 carried as much, and r1's comes
// to a guessed pair. For 20 s more (or 2 s) the others send at new
// rates, under their holds; then r2 has a 429. The rates they are held to
// at the end:
//   - at the freeze, a pair sending as much as r0 and r1 did is held to
//     rateMargin of its rate, not twice it;
//   - r1, whose 429 came at the freeze to an attempt leased before it,
//     to rateBackoff of its guess, telling no other pair: its guess did
//     not send it over;
//   - r2's 429, its first but while held by the freeze's guess, holds it
//     to rateMargin of what it sent, not rateBackoff of the guess;
//   - it holds the guessed pairs that carried between what r2 carried and
//     tellBand times that to r2's new rate, or to the most they carry if
//     less (r2's 429 came at a burst); those that carried less or far
//     more keep their guesses.
//
// A rate read from a sixth of the window may be a tenth over the even
// rate sent, as the window's buckets do not start with the count.
func TestGuessedHolds(t *testing.T) {
	t.Parallel()
	const site = rateMargin * 4 // what r0's first 429 taught
	tests := []struct {
		desc          string
		first, second [6]float64    // requests/s of r0..r5 before the freeze, and after it
		after         time.Duration // from the freeze to the end; 0: 20 s
		burst         int           // requests r2 sends at once a second before the end
		trip          bool          // r2 has a 429 at the end
		want          [6]float64    // rates r0..r5 are held to at the end
	}{
		{
			desc:   "a pair sending as much as those that tripped",
			first:  [6]float64{4, 4, 4.5, 0.5, 0.5, 0.5},
			second: [6]float64{0, 0, 1, 1, 1, 0.5},
			// The others, nearly idle, to the site's rate.
			want: [6]float64{site, rateBackoff * site, rateMargin * 4.5, site, site, site},
		},
		{
			desc:   "a guessed pair's 429",
			first:  [6]float64{4, 4, 1, 1, 1, 1},
			second: [6]float64{0, 0, 1.5, 0.5, 0.5, 0.5},
			trip:   true,
			// r2 carried 1.33 a second on average, at most 1.5 in a sixth
			// of the window; the others carried less than r2 and keep
			// their guesses.
			want: [6]float64{site, rateBackoff * site, rateMargin * 1.5, site, site, site},
		},
		{
			desc:   "tells the pairs carrying as much",
			first:  [6]float64{4, 4, 1, 1, 1, 1},
			second: [6]float64{0, 0, 1.5, 1.8, 3, 0.5},
			trip:   true,
			// r3 carried 1.53 a second: as much as r2's 1.33; r4 2.33,
			// far more; r5 0.67, less.
			want: [6]float64{site, rateBackoff * site, rateMargin * 1.5, rateMargin * 1.5, site, site},
		},
		{
			desc:   "tells however young the guess",
			first:  [6]float64{4, 4, 1, 1, 1, 1},
			second: [6]float64{0, 0, 2, 2.5, 3, 0.5},
			after:  2 * time.Second,
			trip:   true,
			// Over 12 s r2 carried 13/12 a second (the request that
			// tripped not counted), 2 a second in its busiest sixth of the
			// window, its last 2 s; r3 and r4 carried more, within
			// tellBand of it, and are held to the most they carry,
			// tellBand × 13/12; r5 carried less.
			want: [6]float64{site, rateBackoff * site, rateMargin * 2, tellBand * 13 / 12, tellBand * 13 / 12, site},
		},
		{
			desc:   "tells no more than the told pairs carry",
			first:  [6]float64{4, 4, 0.1, 1, 1, 1},
			second: [6]float64{0, 0, 0.1, 1.5, 3, 0.5},
			burst:  30,
			trip:   true,
			// r2 carried 32 requests in 30 s, 1.07 a second, 31 of them in
			// its last sixth of the window: its 429 holds it to
			// rateBackoff of its guess (2.7), but r3, which carried 1.33,
			// to tellBand × 1.07.
			want: [6]float64{site, rateBackoff * site, rateBackoff * site, tellBand * 32 / 30, site, site},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 6)
			tg := e.target("s.com")
			e.watch(tg)
			send := func(rates [6]float64, from, to time.Time) {
				for slot, rate := range rates {
					for at := from; rate > 0 && at.Before(to); at = at.Add(time.Duration(float64(time.Second) / rate)) {
						e.takePace(tg, int32(slot), at.UnixNano())
					}
				}
			}
			frozen := start.Add(10 * time.Second)
			end := frozen.Add(cmp.Or(tt.after, 20*time.Second))
			send(tt.first, start, frozen)
			e.learnRate(tg, 0, frozen.UnixNano(), frozen.UnixNano(), time.Millisecond)
			e.learnRate(tg, 1, frozen.UnixNano(), frozen.Add(-time.Millisecond).UnixNano(), time.Millisecond)
			send(tt.second, frozen, end)
			for range tt.burst {
				e.takePace(tg, 2, end.Add(-time.Second).UnixNano())
			}
			if tt.trip {
				e.learnRate(tg, 2, end.UnixNano(), end.UnixNano(), time.Millisecond)
			}
			checkFreeHints(t, e, "s.com", end)
			if tt.want[3] != site {
				// r3 was told: what its bucket earned at its guess up to
				// the tell is kept, its bucket counted from then.
				if p := tg.pace.Load().pair(3); p.last != end.UnixNano() {
					t.Errorf("r3's bucket counted from %v, not from the tell", time.Duration(p.last-start.UnixNano()))
				}
			}
			for slot, want := range tt.want {
				if got := heldRate(e, int32(slot), "s.com", end); math.Abs(got-want) > 0.1*want {
					t.Errorf("r%d held to %.2f, want %.2f", slot, got, want)
				}
			}
		})
	}
}

// TestToleranceFromBurstBans: a site that bans each exit once it sent more
// than 20 requests a window is learned from the wave of its bans, and
// every exit is held under it; bans that are noise teach nothing.
func TestToleranceFromBurstBans(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		banned func(i int, sent []int) bool // whether route i's request after sent[i] is banned
		want   bool                         // a tolerance is learned
	}{
		{desc: "bans after 20 requests", banned: func(i int, sent []int) bool { return sent[i] >= 20 }, want: true},
		{desc: "noise: a ban every 40th request", banned: func(i int, sent []int) bool { return (i*7+sent[i])%40 == 0 && sent[i] > 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			const routes = 10
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, routes)
			tg := e.target("s.com")
			e.watch(tg)
			sent := make([]int, routes)
			banned := make([]bool, routes)
			// Each route sends 1 request a second, the routes staggered.
			for tick := range 40 * routes {
				i := tick % routes
				now := start.Add(time.Duration(tick) * time.Second / routes)
				if banned[i] || e.paceWait(tg, int32(i), now.UnixNano()) > 0 {
					continue
				}
				e.takePace(tg, int32(i), now.UnixNano())
				id := fmt.Sprintf("r%d", i)
				if tt.banned(i, sent) {
					banned[i] = true
					e.Feedback(now, id, "s.com", Outcome{Class: Blocked})
					continue
				}
				sent[i]++
				e.Feedback(now, id, "s.com", okOutcome)
			}
			tol := tg.pace.Load().toleranceAt(&e.cfg, start.Add(40*time.Second).UnixNano())
			switch {
			case tt.want && (tol <= 0 || tol > 20):
				t.Errorf("tolerance %v, want one under the site's 20", tol)
			case !tt.want && tol != 0:
				t.Errorf("noise taught a tolerance of %v", tol)
			}
		})
	}
}

// TestStraysBeforeTheWave: three bans of the busiest exits within seconds
// make a wave unless the window before it had strays far under the
// busiest count (bans of exits that sent under farStray of what the most
// served one did), which a site that counts does not send and one that
// bans at random does (the simulator's flaky-403). Strays near the top of
// the counts are a count's too (burst-bans), and strays a window old say
// nothing of now. Nor is a wave whose own bans disagree on the count (one
// far under what another left served), as random bans do when the load
// moves between a few busy exits.
func TestStraysBeforeTheWave(t *testing.T) {
	t.Parallel()
	inWindow := []time.Duration{40 * time.Second, 30 * time.Second, 20 * time.Second, 10 * time.Second}
	agree := [toleranceBans]waveBan{{sent: 30, most: 25}, {sent: 30, most: 25}, {sent: 30, most: 25}}
	for _, tt := range []struct {
		desc   string
		strays []time.Duration        // before the wave's first ban
		sent   int                    // what each stray's exit had sent, the most served having sent 25
		wave   [toleranceBans]waveBan // sent and most of each of the wave's bans; zero: agree
		want   bool                   // a tolerance is learned
	}{
		{desc: "no strays", want: true},
		{desc: "the wave's counts a little apart", wave: [toleranceBans]waveBan{{sent: 22, most: 20}, {sent: 30, most: 26}, {sent: 28, most: 27}}, want: true},
		{desc: "a wave banned far under what it left served", wave: [toleranceBans]waveBan{{sent: 25, most: 20}, {sent: 80, most: 76}, {sent: 60, most: 50}}},
		{desc: "far strays a window before", strays: []time.Duration{90 * time.Second, 80 * time.Second, 75 * time.Second, 70 * time.Second}, sent: 10, want: true},
		{desc: "far strays in the window before", strays: inWindow, sent: 10},
		{desc: "near strays in the window before", strays: inWindow, sent: 24, want: true},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{}, 4)
			tp := e.watch(e.target("s.com"))
			at := start.Add(2 * time.Minute).UnixNano()
			tp.mu.Lock()
			for _, d := range tt.strays {
				tp.strays = keepLatest(tp.strays, at-int64(d))
				if float64(tt.sent) < farStray*25 {
					tp.far = keepLatest(tp.far, at-int64(d))
				}
			}
			wave := tt.wave
			if wave[0].sent == 0 {
				wave = agree
			}
			for i, b := range wave {
				b.at, b.slot, b.span = at+int64(i)*int64(time.Second), int32(i), e.cfg.PaceWindow
				tp.addBan(&e.cfg, b, b.at)
			}
			tp.mu.Unlock()
			if got := tp.toleranceAt(&e.cfg, at+int64(toleranceBans)*int64(time.Second)) > 0; got != tt.want {
				t.Errorf("tolerance learned: %v, want %v", got, tt.want)
			}
		})
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
	attemptAt(t, e, start, "r0", "s.com", 2, rateLimited)
	if e.target("s.com").pace.Load() != nil {
		t.Fatal("PaceStart < 0 still learned a rate")
	}
}

// TestPaceWatchesBusyTargets: a target that took watchAfter requests
// counts what each exit sends, before any 429 or ban.
func TestPaceWatchesBusyTargets(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 2)
	for range watchAfter - 1 {
		e.Report(start, mustAcquire(t, e, start, Request{Target: "s.com"}), okOutcome)
	}
	if e.target("s.com").pace.Load() != nil {
		t.Fatal("watched before watchAfter requests")
	}
	e.Report(start, mustAcquire(t, e, start, Request{Target: "s.com"}), okOutcome)
	if e.target("s.com").pace.Load() == nil {
		t.Fatal("not watched after watchAfter requests")
	}
}

func TestPaceEviction(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 3)
	attemptAt(t, e, start, "r0", "s.com", 3, rateLimited)
	tracked := func() int {
		return e.target("s.com").pace.Load().pairs.n
	}
	e.Sweep(start.Add(time.Minute)) // an eviction pass: r0 is still held
	if tracked() != 1 {
		t.Fatalf("%d pairs tracked a minute on, want r0", tracked())
	}
	e.Sweep(start.Add(24 * time.Hour)) // r0 has not been pressed for PairTTL
	if tracked() != 0 {
		t.Fatalf("%d pairs tracked a day on", tracked())
	}
}

// TestToleranceWindow: a site that bans an exit for a while once it sends
// more than limit requests within its window, under more demand than it
// takes. The first wave of bans comes before the exits' counts span a
// PaceWindow: whatever the site's window, the tolerance learned lets
// through what it takes (several times the wave's count a minute where
// the window is shorter: 34 a minute before young waves were read wide)
// and, where the window is a whole minute, falls back to the count after
// the bans of a few scouts (6 bans in all before). Where pacing is shared
// the count is read as it is.
func TestToleranceWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc           string
		limit          int
		window         time.Duration
		shared         bool
		minTol, maxTol float64 // the tolerance a minute in force at the end
		maxBans        int
	}{
		{"40 in 10s", 40, 10 * time.Second, false, 100, 240, 10},
		{"20 in a minute", 20, time.Minute, false, 10, 20, 16},
		{"40 in 10s, shared", 40, 10 * time.Second, true, 20, 40, 10},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			const routes = 10
			cfg := Config{MaxRemovedShare: -1, PanicThreshold: -1}
			var e *Engine
			if tt.shared {
				e, _ = newSharingEngine(t, cfg, routes)
			} else {
				e = newTestEngine(t, cfg, routes)
			}
			tg := e.target("s.com")
			e.watch(tg)
			sent := make([][]time.Time, routes) // what the site counts, by route
			until := make([]time.Time, routes)  // banned until then
			bans := 0
			// Every route sends each 100 ms that pacing lets it, the
			// routes staggered: 10 requests a second each, far over
			// either site's limit.
			const step = 100 * time.Millisecond
			end := 5 * time.Minute
			for tick := range int(end / step * routes) {
				i := tick % routes
				now := start.Add(time.Duration(tick) * step / routes)
				if now.Before(until[i]) || e.paceWait(tg, int32(i), now.UnixNano()) > 0 {
					continue
				}
				e.takePace(tg, int32(i), now.UnixNano())
				for len(sent[i]) > 0 && now.Sub(sent[i][0]) >= tt.window {
					sent[i] = sent[i][1:]
				}
				sent[i] = append(sent[i], now)
				id := fmt.Sprintf("r%d", i)
				if len(sent[i]) > tt.limit {
					bans++
					until[i] = now.Add(20 * time.Second)
					e.Feedback(now, id, "s.com", Outcome{Class: Blocked})
					continue
				}
				e.Feedback(now, id, "s.com", okOutcome)
			}
			tol := tg.pace.Load().toleranceAt(&e.cfg, start.Add(end).UnixNano())
			if tol < tt.minTol || tol > tt.maxTol || bans > tt.maxBans {
				t.Errorf("tolerance %.1f a minute after %d bans; want %v to %v after at most %d", tol, bans, tt.minTol, tt.maxTol, tt.maxBans)
			}
		})
	}
}

// TestToleranceOutlivesItsOwnPenalties: a site that bans an exit for five
// minutes after 20 requests in one is asked again through the exits it
// banned while their bans last (the engine's cooldown of a pair ends
// before the site's penalty), and answers each with another ban. Those
// bans are the first wave's, not news that the tolerance learned from it
// fails: they must not lift it. Lifted, every exit went over the site's
// count at once, and the simulator's burst-bans lost half its pages for
// the rest of its run.
func TestToleranceOutlivesItsOwnPenalties(t *testing.T) {
	t.Parallel()
	const (
		routes  = 10
		limit   = 20
		window  = time.Minute
		penalty = 5 * time.Minute
		step    = 100 * time.Millisecond
		recheck = 10 * time.Second // how often a banned exit is asked again
		end     = 4 * time.Minute
	)
	e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, routes)
	tg := e.target("s.com")
	e.watch(tg)
	sent := make([][]time.Time, routes) // what the site counts, by route
	until := make([]time.Time, routes)  // banned until then
	asked := make([]time.Time, routes)  // last asked while banned
	learned := false
	for tick := range int(end / step * routes) {
		i := tick % routes
		now := start.Add(time.Duration(tick) * step / routes)
		id := fmt.Sprintf("r%d", i)
		if now.Before(until[i]) {
			if now.Sub(asked[i]) >= recheck {
				asked[i] = now
				e.takePace(tg, int32(i), now.UnixNano())
				e.Feedback(now, id, "s.com", Outcome{Class: Blocked})
			}
			continue
		}
		if e.paceWait(tg, int32(i), now.UnixNano()) > 0 {
			continue
		}
		e.takePace(tg, int32(i), now.UnixNano())
		for len(sent[i]) > 0 && now.Sub(sent[i][0]) >= window {
			sent[i] = sent[i][1:]
		}
		sent[i] = append(sent[i], now)
		if len(sent[i]) > limit {
			until[i], asked[i] = now.Add(penalty), now
			e.Feedback(now, id, "s.com", Outcome{Class: Blocked})
			continue
		}
		e.Feedback(now, id, "s.com", okOutcome)
		learned = learned || tg.pace.Load().toleranceAt(&e.cfg, now.UnixNano()) > 0
	}
	if tol := tg.pace.Load().toleranceAt(&e.cfg, start.Add(end).UnixNano()); !learned || tol == 0 {
		t.Errorf("tolerance learned: %v; at the end: %.1f; want one held to the end", learned, tol)
	}
}

// The scouts are a quarter of any pool, rounded up, so never all of a pool
// of two or more: a hashed quarter had made two of three exits scouts.
func TestScoutsAreAQuarter(t *testing.T) {
	t.Parallel()
	for n := int32(1); n <= 40; n++ {
		scouts := int32(0)
		for slot := range n {
			if scout(slot) {
				scouts++
			}
		}
		if want := (n + 3) / 4; scouts != want {
			t.Errorf("%d exits: %d scouts, want %d", n, scouts, want)
		}
	}
	if scout(-1) {
		t.Error("slot -1 (no route) is a scout")
	}
}

// youngWave has tp, e's, learn a tolerance at start from a young wave:
// toleranceBans exits banned having sent 40 requests in the span it
// returns, 10 s, while one that sent 30 was served.
func youngWave(e *Engine, tp *targetPace) (span time.Duration) {
	span = 10 * time.Second
	ns := start.UnixNano()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for i := range toleranceBans {
		tp.addBan(&e.cfg, waveBan{at: ns, slot: int32(100 + i), sent: 40, most: 30, span: span}, ns)
	}
	return span
}

// A young wave's rate is tried by the scouts a span after the wave, by
// every exit a span later; a ban of what a scout sent wide halves it for
// all, and near the count the count holds again.
func TestYoungWaveScoutsFirst(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{}, 8)
	tg := e.target("s.com")
	tp := e.watch(tg)
	scoutSlot, other := int32(0), int32(1)
	if !scout(scoutSlot) || scout(other) {
		t.Fatal("r0 must be a scout, r1 not")
	}
	span := youngWave(e, tp)
	count := toleranceMargin * 30
	wide := min(float64(e.cfg.PaceWindow)/float64(span), maxWide) * count
	at := func(d time.Duration) int64 { return start.Add(d).UnixNano() }
	for _, c := range []struct {
		desc string
		when time.Duration
		slot int32
		want float64 // within 5%: grown since
	}{
		{"the count at first", 0, scoutSlot, count},
		{"the scouts read wide after a span", span, scoutSlot, wide},
		{"the others still the count", span, other, count},
		{"every exit wide after two", 2 * span, other, wide},
	} {
		got := tp.toleranceFor(&e.cfg, c.slot, at(c.when))
		if math.Abs(got-c.want) > 0.05*c.want {
			t.Errorf("%s: %.2f, want %.2f", c.desc, got, c.want)
		}
	}
	// A ban of what an exit sent at the count, scouts reading wide, is no
	// news of the reading.
	quiet := int32(7)
	if scout(quiet) {
		t.Fatal("r7 must be no scout")
	}
	for i := range 10 {
		e.takePace(tg, quiet, at(span+time.Duration(i)*time.Millisecond))
	}
	e.learnTolerance(tg, quiet, at(span+time.Second), at(span+time.Second))
	if got := tp.toleranceFor(&e.cfg, other, at(2*span)); math.Abs(got-wide) > 0.05*wide {
		t.Errorf("after a ban at the count: %.2f, want %.2f", got, wide)
	}
	// A ban of what a scout sent wide: half as wide for all, a span on.
	for i := range 10 {
		e.takePace(tg, scoutSlot, at(span+time.Duration(i)*time.Millisecond))
	}
	// The status says what each pair is held to.
	st, _ := e.Pace(start.Add(span+time.Second), "s.com")
	own := map[string]float64{}
	for _, p := range st.Pairs {
		own[p.Route] = p.Own * e.cfg.PaceWindow.Seconds()
	}
	if math.Abs(own["r0"]-wide) > 0.05*wide || math.Abs(own["r7"]-count) > 0.05*count {
		t.Errorf("held to %v a window, want the scout r0 at %.2f and r7 at %.2f", own, wide, count)
	}
	e.learnTolerance(tg, scoutSlot, at(span+time.Second), at(span+time.Second))
	if got := tp.toleranceFor(&e.cfg, other, at(4*span)); math.Abs(got-wide/2) > 0.05*wide {
		t.Errorf("after a scout's ban: %.2f, want %.2f", got, wide/2)
	}
	// Bans of what other exits sent at half, and so on: the count again,
	// for all, once half is near it.
	w := min(float64(e.cfg.PaceWindow)/float64(span), maxWide) / 2
	for slot, from := int32(1), 4*span; w >= 1.5; slot, from = slot+1, from+4*span {
		for i := range 10 {
			e.takePace(tg, slot, at(from+time.Duration(i)*time.Millisecond))
		}
		e.learnTolerance(tg, slot, at(from+span), at(from+span))
		if w /= 2; w < 1.5 {
			w = 1
		}
		if got, want := tp.toleranceFor(&e.cfg, slot, at(from+3*span)), count*w; math.Abs(got-want) > 0.15*want { // grown since
			t.Errorf("after r%d's ban: %.2f, want %.2f", slot, got, want)
		}
	}
}

// TestFreeHintNeverEarly drives a pool against sites that limit every
// exit, through 429s, freezes, new pairs and evictions, and checks after
// every step what picks read from the pair table alone: a cell whose free
// has come says the pair's bucket is full at the rate in force
// (pace_table.go). A free published early would let a pick past a pair
// its 429s hold. Tells are TestGuessedHolds's.
func TestFreeHintNeverEarly(t *testing.T) {
	t.Parallel()
	const routes = 24
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, routes)
	sites := []string{"a.com", "b.com", "c.com"}
	type pairKey struct {
		site string
		slot int32
	}
	buckets := map[pairKey]float64{} // the sites' own buckets, in tokens
	last := map[pairKey]time.Time{}
	rng := rand.New(rand.NewPCG(7, 7))
	now := start
	checked, tooSoon := 0, 0
	for step := range 20000 {
		now = now.Add(time.Duration(rng.IntN(4000)) * time.Microsecond)
		site := sites[rng.IntN(len(sites))]
		l, err := e.Acquire(now, Request{Target: site})
		var paced *PacedError
		switch {
		case errors.As(err, &paced), errors.Is(err, ErrBusy), errors.Is(err, ErrNoRoute):
			continue // every exit paced or cooling after its 429
		case err != nil:
			t.Fatalf("step %d: %v", step, err)
		}
		slot, _ := e.byID.load(l.Route)
		k := pairKey{site, slot}
		limit := float64(1 + slot%4) // requests/s the sites allow this exit, halved after 20 s
		if now.Sub(start) > 20*time.Second {
			limit /= 2
		}
		b := min(1, buckets[k]+limit*now.Sub(last[k]).Seconds())
		if _, ok := last[k]; !ok {
			b = 1
		}
		o := okOutcome
		if b < 1 {
			tooSoon++
			o = Outcome{Class: RateLimited, RetryAfter: time.Second}
		} else {
			b--
		}
		buckets[k], last[k] = b, now
		if err := e.Report(now, l, o); err != nil {
			t.Fatal(err)
		}
		if step%1000 == 999 {
			e.Sweep(now)
		}
		for _, s := range sites {
			checked += checkFreeHints(t, e, s, now)
		}
	}
	if checked == 0 || tooSoon == 0 {
		t.Fatalf("%d cells checked, %d 429s: the run never paced", checked, tooSoon)
	}
	t.Logf("%d cells checked, %d 429s", checked, tooSoon)
}

// checkFreeHints checks that target's count of held pairs is the table's,
// and every known cell of its pair table at the later of now and its
// free, when the pair's bucket must be full, and returns how many cells
// it checked.
func checkFreeHints(t *testing.T, e *Engine, target string, now time.Time) (checked int) {
	t.Helper()
	tp := e.target(target).pace.Load()
	if tp == nil {
		return 0
	}
	held := 0
	tp.pairs.each(func(p *pairPace) {
		if p.held.Load() {
			held++
		}
	})
	if n := int(tp.holding.Load()); n != held {
		// Fewer would let picks past every pair without asking any.
		t.Fatalf("%s: %d pairs held, holding counts %d", target, held, n)
	}
	if tp.toleranceAt(&e.cfg, now.UnixNano()) > 0 {
		return 0
	}
	tab := tp.pairs.tab.Load()
	for i := range tab.slots {
		c := &tab.slots[i]
		if c.key.Load() == 0 {
			continue
		}
		free := c.free.Load()
		if free == freeUnknown {
			continue
		}
		ns := max(free, now.UnixNano())
		p := c.p.Load()
		p.mu.Lock()
		rate := p.rateAt(&e.cfg, ns)
		full := p.tokens + rate*float64(ns-p.last)/float64(time.Second)
		p.mu.Unlock()
		if rate > 0 && full < 1 {
			t.Fatalf("%s r%d: free at +%v, but its bucket holds %.3f then", target, p.slot, time.Duration(free-start.UnixNano()), full)
		}
		checked++
	}
	return checked
}

// TestHoldingSkipsTheTable follows a target's count of held pairs, which
// lets a pick at a watched target no 429 ever limited read no pair:
// none at first, one after a 429, none once that pair is evicted; and a
// pair the table lost to a grow is read from its cell again once it is
// leased.
func TestHoldingSkipsTheTable(t *testing.T) {
	t.Parallel()
	const routes = 40
	e := newTestEngine(t, Config{}, routes)
	now := start
	tg := e.target("a.com")
	tp := e.watch(tg)
	unknown := func() (n int) {
		tp.pairs.each(func(p *pairPace) {
			if tp.pairs.cell(p.slot).free.Load() == freeUnknown {
				n++
			}
		})
		return n
	}
	for slot := range int32(routes) {
		e.takePace(tg, slot, now.UnixNano())
	}
	if unknown() == 0 {
		t.Fatal("no cell unknown after the table grew: the test drives nothing")
	}
	now = now.Add(time.Second)
	for slot := range int32(routes) {
		e.takePace(tg, slot, now.UnixNano())
	}
	if n := unknown(); n != 0 {
		t.Errorf("%d cells still unknown after every pair was leased since the last grow", n)
	}
	if n := tp.holding.Load(); n != 0 {
		t.Fatalf("holding %d before any 429", n)
	}
	for slot := range int32(routes) {
		if w := e.paceWait(tg, slot, now.UnixNano()); w != 0 {
			t.Fatalf("r%d waits %v with no rate held anywhere", slot, w)
		}
	}

	l, err := e.Acquire(now, Request{Target: "a.com"})
	if err != nil {
		t.Fatal(err)
	}
	e.Report(now, l, Outcome{Class: RateLimited, RetryAfter: time.Second})
	slot, _ := e.byID.load(l.Route)
	if n := tp.holding.Load(); n != 1 {
		t.Fatalf("holding %d after one pair's 429, want 1", n)
	}
	if w := e.paceWait(tg, slot, now.UnixNano()); w <= 0 {
		t.Errorf("the pair that had the 429 may go at once")
	}
	checkFreeHints(t, e, "a.com", now)

	// Idle past PairTTL: the pair is evicted, and the count with it.
	now = now.Add(e.cfg.PairTTL + time.Minute)
	e.Sweep(now)
	if tp.pair(slot) != nil {
		t.Fatal("the limited pair outlived PairTTL idle")
	}
	if n := tp.holding.Load(); n != 0 {
		t.Fatalf("holding %d after the held pair was evicted", n)
	}
}

// TestReservePacedFastRoute: a first attempt whose draw finds only a much
// slower route ready, a fast one being a moment from its next token, gets
// the fast one with the wait to send it after (Lease.Delay), its token
// reserved; one reservation at a time per pair, none where the ready
// route is not much slower, and none for a caller that cannot wait.
func TestReservePacedFastRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		slow      time.Duration // r1's latency; r0's is 100 ms
		mayWait   bool
		wantRoute string
		wantDelay time.Duration
	}{
		{"a much slower route ready: wait for the fast one", time.Second, true, "r0", 30 * time.Millisecond},
		{"not much slower: take it", 200 * time.Millisecond, true, "r1", 0},
		{"a caller that cannot wait", time.Second, false, "r1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
			e.watch(e.target("s.com"))
			for i, lat := range []time.Duration{100 * time.Millisecond, tt.slow} {
				for range 5 {
					if err := e.Feedback(start, fmt.Sprintf("r%d", i), "s.com", Outcome{Class: OK, Latency: lat}); err != nil {
						t.Fatal(err)
					}
				}
			}
			attemptAt(t, e, start, "r0", "s.com", 2, rateLimited) // held at PaceStart: a token every 250 ms
			now := start.Add(time.Second/time.Duration(e.cfg.PaceStart) - 30*time.Millisecond)
			l, err := e.Acquire(now, Request{Target: "s.com", MayWait: tt.mayWait})
			if err != nil || l.Route != tt.wantRoute || l.Delay != tt.wantDelay {
				t.Fatalf("lease %s with delay %v, %v; want %s, %v", l.Route, l.Delay, err, tt.wantRoute, tt.wantDelay)
			}
			if l.Delay == 0 {
				return
			}
			// The token is the reservation's: the next request waits a
			// whole turn more for r0, and takes r1.
			if l, err := e.Acquire(now, Request{Target: "s.com", MayWait: true}); err != nil || l.Route != "r1" || l.Delay != 0 {
				t.Errorf("after the reservation: %s with delay %v, %v; want r1 at once", l.Route, l.Delay, err)
			}
		})
	}
}

package livebench

import (
	"testing"
	"time"
)

// testOracle is an oracle over a world of shapes (no sockets: choose
// reads the world only), for so many workers that their time is never
// worth giving a task up for: the tests of its choices call it many times
// at one instant.
func testOracle(t *testing.T, shapes ...Shape) *oracle {
	t.Helper()
	return newOracle(mustWorld(t, shapes...), nil, 1e9, 1)
}

// thriftyOracle is an oracle for 32 workers, whose time is worth a task.
func thriftyOracle(t *testing.T, shapes ...Shape) *oracle {
	t.Helper()
	return newOracle(mustWorld(t, shapes...), nil, 32, 1)
}

func TestOraclePicksTheFastestThatWillSucceed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		shapes []Shape
		tried  []int
		want   []int // the exits it may pick
	}{
		{"skips dead, blackholed and 407 for a slow exit", []Shape{dead(), blackholed(), auth407(), slow()}, nil, []int{3}},
		{"skips banned and captcha on the site", []Shape{fast().on("shop.test", banned), fast().on("shop.test", captcha), slow()}, nil, []int{2}},
		{"a ban elsewhere does not matter", []Shape{slow(), fast().on("news.test", banned)}, nil, []int{1}},
		{"fast over slow", []Shape{slow(), fast(), slow()}, nil, []int{1}},
		{"a healthy fast exit over a flaky one", []Shape{flaky(), fast()}, nil, []int{1}},
		{"a flaky fast exit over a slow one", []Shape{slow(), flaky()}, nil, []int{1}},
		{"equals are all candidates", []Shape{fast(), slow(), fast(), fast()}, nil, []int{0, 2, 3}},
		{"not what the task tried", []Shape{fast(), fast(), slow()}, []int{0}, []int{1}},
		{"what the task tried when nothing else will do", []Shape{flaky(), dead()}, []int{0}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			o := testOracle(t, tt.shapes...)
			seen := map[int]int{}
			for range 200 {
				exit, wait, ok := o.choose("shop.test", tt.tried, t0)
				if wait != 0 || !ok {
					t.Fatalf("wait %v, ok %v without limits", wait, ok)
				}
				seen[exit]++
			}
			for _, w := range tt.want {
				if seen[w] == 0 {
					t.Errorf("never picked exit %d (picks %v)", w, seen)
				}
				delete(seen, w)
			}
			if len(seen) > 0 {
				t.Errorf("picked exits outside %v: %v", tt.want, seen)
			}
		})
	}
}

func TestOracleSpreadsEqualChoices(t *testing.T) {
	t.Parallel()
	o := testOracle(t, fast(), fast(), fast(), fast())
	counts := make([]int, 4)
	const n = 4000
	for range n {
		exit, _, _ := o.choose("shop.test", nil, t0)
		counts[exit]++
	}
	for i, c := range counts {
		if c < n/4*8/10 || c > n/4*12/10 {
			t.Fatalf("exit %d got %d of %d picks: %v", i, c, n, counts)
		}
	}
}

func TestOracleNeverTripsARateLimit(t *testing.T) {
	t.Parallel()
	// Two exits limited to 4/s on shop.test: at one instant the oracle
	// spends both mirrors (3 tokens each: one less than the site's), then
	// waits for room rather than send a request the site would refuse.
	limited := fast().on("shop.test", rateLimited(4, time.Minute))
	o := testOracle(t, limited, limited)
	for i := range 6 {
		if _, wait, _ := o.choose("shop.test", nil, t0); wait != 0 {
			t.Fatalf("pick %d waits %v with room left", i, wait)
		}
	}
	exit, wait, _ := o.choose("shop.test", nil, t0)
	if wait != 250*time.Millisecond {
		t.Fatalf("seventh pick: exit %d after %v, want a 250ms wait", exit, wait)
	}
	// Replaying the picks on the site's own limiter: none is refused.
	w := o.world
	for _, p := range []time.Duration{0, 0, 0} {
		for i := range 2 {
			if a := w.atSite(i, "shop.test", at(p)); a.status != 200 {
				t.Fatalf("exit %d refused the oracle's pick: %d", i, a.status)
			}
		}
	}
}

func TestOraclePrefersAWaitOverASlowExit(t *testing.T) {
	t.Parallel()
	o := testOracle(t, fast().on("shop.test", rateLimited(2, time.Minute)), slow())
	if exit, _, _ := o.choose("shop.test", nil, t0); exit != 0 {
		t.Fatalf("first pick %d, want the fast exit", exit)
	}
	// The fast exit's mirror (1 token) is spent: the next token is 500ms
	// away, still better than a second on the slow exit.
	exit, wait, _ := o.choose("shop.test", nil, t0)
	if exit != 0 || wait != 500*time.Millisecond {
		t.Fatalf("second pick: exit %d after %v, want exit 0 after 500ms", exit, wait)
	}
	// Each further reservation pushes the fast exit's room 500ms out: once
	// that costs about the slow exit's second, the slow exit gets picks,
	// and the fast one never at a wait much beyond it.
	for i := range 4 {
		exit, wait, _ := o.choose("shop.test", nil, t0)
		if exit == 1 {
			return
		}
		if float64(wait+fastLatency) > float64(slowLatency)*(1+oracleTie) {
			t.Fatalf("pick %d: the fast exit after %v, worse than the slow exit", i+3, wait)
		}
	}
	t.Fatal("the slow exit never got a pick")
}

func TestOracleAvoidsAnExitInItsPenalty(t *testing.T) {
	t.Parallel()
	o := testOracle(t, fast().on("shop.test", rateLimited(2, 10*time.Second)), slow())
	for range 3 { // someone else tripped the limit
		o.world.atSite(0, "shop.test", t0)
	}
	if exit, _, _ := o.choose("shop.test", nil, at(time.Second)); exit != 1 {
		t.Fatalf("picked %d during the penalty, want the slow exit", exit)
	}
	if exit, _, _ := o.choose("shop.test", nil, at(11*time.Second)); exit != 0 {
		t.Fatalf("picked %d after the penalty, want the fast exit", exit)
	}
}

func TestOracleBurstBan(t *testing.T) {
	t.Parallel()
	// 3 requests allowed in 10 s: the mirror allows 2, then waits out the
	// window.
	o := testOracle(t, fast().on("news.test", burstBanned(3, 10*time.Second, time.Minute)))
	for i := range 2 {
		if _, wait, _ := o.choose("news.test", nil, at(time.Duration(i)*time.Second)); wait != 0 {
			t.Fatalf("pick %d waits %v", i, wait)
		}
	}
	if _, wait, _ := o.choose("news.test", nil, at(2*time.Second)); wait != 8*time.Second {
		t.Fatalf("third pick waits %v, want 8s (the window from the first)", wait)
	}
}

func TestOracleGivesUpWhatIsNotWorthAWorker(t *testing.T) {
	t.Parallel()
	// worth = 32 workers × (elapsed + 100 ms) ÷ (attempts sent − 16 in
	// flight counted as half + 1).
	tests := []struct {
		desc    string
		shapes  []Shape
		elapsed time.Duration
		taken   int
		wantOK  bool
	}{
		{"nothing will succeed", []Shape{dead(), blackholed(), fast().on("shop.test", banned)}, 0, 0, false},
		{"at the start, a fast exit", []Shape{fast()}, 0, 0, true},
		{"64 attempts sent at once, 65 ms a worker: not a slow exit", []Shape{slow(), fast().on("shop.test", banned)}, 0, 64, false},
		{"10 s in at 105 ms an attempt: a fast exit (100 ms)", []Shape{fast()}, 10 * time.Second, 3093, true},
		{"10 s in at 105 ms an attempt: not a flaky one (143 ms)", []Shape{flaky()}, 10 * time.Second, 3093, false},
		{"10 s in at 1 ms an attempt: not even a fast exit", []Shape{fast()}, 10 * time.Second, 323200, false},
		{"10 s in at 1 ms an attempt: an exit adding nothing", []Shape{{}}, 10 * time.Second, 323200, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			o := thriftyOracle(t, tt.shapes...)
			if tt.elapsed > 0 || tt.taken > 0 {
				o.start, o.taken = t0, tt.taken
			}
			if _, _, ok := o.choose("shop.test", nil, at(tt.elapsed)); ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v (worth %v)", ok, tt.wantOK, time.Duration(o.worth(at(tt.elapsed))))
			}
		})
	}
}

func TestOracleWorthTracksTheTimeOfAnAttempt(t *testing.T) {
	t.Parallel()
	// 32 workers back to back on 100 ms attempts: every 100 ms, 32 more
	// are sent. What a worker's time is worth never drops below the
	// attempt's 100 ms, so a fast exit is never given up.
	o := thriftyOracle(t, fast())
	o.start = t0
	for step := range 100 {
		now := at(time.Duration(step) * 100 * time.Millisecond)
		o.taken = 32 * (step + 1) // the attempts sent by now, those in flight included
		if w := time.Duration(o.worth(now)); w < fastLatency {
			t.Fatalf("at %v with %d sent: worth %v, below an attempt's %v", now.Sub(t0), o.taken, w, fastLatency)
		}
	}
}

func TestOracleComesRoundToASlowExitWhenNothingElseWorks(t *testing.T) {
	t.Parallel()
	// Giving up raises what a worker's time is worth, until the slow exit
	// is worth it: the oracle never starves a pool of slow exits.
	o := thriftyOracle(t, slow(), fast().on("shop.test", banned))
	o.start, o.taken = t0, 64 // a worker's time worth 65 ms
	if _, _, ok := o.choose("shop.test", nil, t0); ok {
		t.Fatal("took a 1 s exit at once")
	}
	if _, _, ok := o.choose("shop.test", nil, at(1500*time.Millisecond)); !ok {
		t.Fatal("still gives up after 32 workers × 1.5 s without an attempt")
	}
}

func TestOracleSendsSpareWorkersToWhatIsLeft(t *testing.T) {
	t.Parallel()
	// A worker's time worth 65 ms: a slow exit is not worth one, unless
	// enough other workers are idle, giving tasks up.
	o := thriftyOracle(t, slow(), fast().on("shop.test", banned))
	o.start, o.taken = t0, 64
	o.idle = oracleReserve(32) - 1
	if _, _, ok := o.choose("shop.test", nil, t0); ok {
		t.Fatalf("took a 1 s exit with %d workers idle", o.idle)
	}
	o.idle++
	if exit, _, ok := o.choose("shop.test", nil, t0); !ok || exit != 0 {
		t.Fatalf("with %d workers idle: exit %d, ok %v; want the slow exit", o.idle, exit, ok)
	}
	// Nothing usable is still nothing, and room to come is not parked on.
	o = thriftyOracle(t, dead(), fast().on("shop.test", banned))
	o.idle = 32
	if _, _, ok := o.choose("shop.test", nil, t0); ok {
		t.Fatal("sent a task where nothing can carry it")
	}
	o = thriftyOracle(t, fast().on("shop.test", rateLimited(2, time.Minute)))
	o.start, o.taken, o.idle = t0, 64, 32
	if _, wait, ok := o.choose("shop.test", nil, t0); !ok || wait != 0 {
		t.Fatalf("the first pick: wait %v, ok %v; want the room there is", wait, ok)
	}
	if _, wait, ok := o.choose("shop.test", nil, t0); ok {
		t.Fatalf("a spare worker parked on room %v away", wait)
	}
}

package engine

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// sharingStore is a memory store that shares pacing with nobody: the test
// reads what the engine hands it and says what it hears.
type sharingStore struct {
	*MemoryStore
	mu   sync.Mutex
	outs []PaceNews
	next PaceNews
}

func (s *sharingStore) SharePace(out PaceNews) PaceNews {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outs = append(s.outs, out)
	in := s.next
	s.next = PaceNews{}
	return in
}

// last is what the engine handed at its last Sweep.
func (s *sharingStore) last() PaceNews {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outs[len(s.outs)-1]
}

// hear makes the engine take in at its next Sweep.
func (s *sharingStore) hear(in PaceNews) {
	s.mu.Lock()
	s.next = in
	s.mu.Unlock()
}

// counted has e's next Sweeps, at now, hear that procs processes pace
// target tg, as the store's exchange says once it has counted them, until
// e takes the count (a count of one takes soloExchanges): a limit learned
// from then on is the fleet's, one learned before, this process's share
// (unblind).
func counted(e *Engine, s *sharingStore, tg *target, procs int32, now time.Time) {
	tp := e.watch(tg)
	for range soloExchanges {
		s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: procs}}})
		e.Sweep(now)
		if tp.procs.Load() != 0 {
			return
		}
	}
}

func newSharingEngine(t *testing.T, cfg Config, routes int) (*Engine, *sharingStore) {
	t.Helper()
	cfg.Seed, cfg.UncheckedCandidates = 1, true
	s := &sharingStore{MemoryStore: NewMemoryStore()}
	e, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range routes {
		if err := e.AddRoute(start, RouteSpec{ID: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return e, s
}

// The merge rule: a limit learned knowing the current one replaces it, a
// stale one loses, concurrent ones merge to the stricter; and of two
// different limits exactly one supersedes the other.
func TestLimitSupersedes(t *testing.T) {
	t.Parallel()
	s := int64(time.Second)
	pairs := []struct {
		desc    string
		l, cur  PairLimit
		replace bool
	}{
		{desc: "any limit replaces none", l: PairLimit{Rate: 5, Cut: s}, replace: true},
		{desc: "none replaces nothing", cur: PairLimit{Rate: 5, Cut: s}},
		{desc: "learned knowing cur, looser: replaces", l: PairLimit{Rate: 8, Cut: 5 * s, Base: s}, cur: PairLimit{Rate: 2, Cut: s}, replace: true},
		{desc: "learned knowing cur, stricter: replaces", l: PairLimit{Rate: 1, Cut: 5 * s, Base: s}, cur: PairLimit{Rate: 2, Cut: s}, replace: true},
		{desc: "cur was learned knowing it: stale", l: PairLimit{Rate: 1, Cut: s}, cur: PairLimit{Rate: 2, Cut: 5 * s, Base: s}},
		{desc: "concurrent, stricter: replaces", l: PairLimit{Rate: 1, Cut: s}, cur: PairLimit{Rate: 2, Cut: 2 * s}, replace: true},
		{desc: "concurrent, looser: loses though newer", l: PairLimit{Rate: 3, Cut: 3 * s}, cur: PairLimit{Rate: 2, Cut: 2 * s}},
		{desc: "concurrent, same rate: the tighter ceiling", l: PairLimit{Rate: 2, Ceiling: 3, Cut: s}, cur: PairLimit{Rate: 2, Cut: 2 * s}, replace: true},
		{desc: "the same limit does not replace itself", l: PairLimit{Rate: 2, Cut: s}, cur: PairLimit{Rate: 2, Cut: s}},
	}
	for _, tt := range pairs {
		if got := tt.l.Supersedes(tt.cur); got != tt.replace {
			t.Errorf("pair: %s: Supersedes = %v", tt.desc, got)
		}
	}
	targets := []struct {
		desc    string
		l, cur  TargetLimit
		replace bool
	}{
		{desc: "any limit replaces none", l: TargetLimit{Tolerance: 10, At: s}, replace: true},
		{desc: "a lift learned knowing the hold replaces it", l: TargetLimit{At: 9 * s, Base: s, HoldOff: 99 * s}, cur: TargetLimit{Tolerance: 10, At: s}, replace: true},
		{desc: "a concurrent lift loses to a hold", l: TargetLimit{At: 9 * s, HoldOff: 99 * s}, cur: TargetLimit{Tolerance: 10, At: s}},
		{desc: "concurrent holds: the stricter", l: TargetLimit{Tolerance: 8, At: s}, cur: TargetLimit{Tolerance: 10, At: 2 * s}, replace: true},
		{desc: "a cut knowing the hold replaces it", l: TargetLimit{Tolerance: 6, At: 9 * s, Base: s}, cur: TargetLimit{Tolerance: 10, At: s}, replace: true},
		{desc: "stale", l: TargetLimit{Tolerance: 6, At: s}, cur: TargetLimit{Tolerance: 10, At: 9 * s, Base: s}},
	}
	for _, tt := range targets {
		if got := tt.l.Supersedes(tt.cur); got != tt.replace {
			t.Errorf("target: %s: Supersedes = %v", tt.desc, got)
		}
	}
	// Exactly one of two different limits wins, whichever is asked.
	var ps []PairLimit
	for _, rate := range []float64{1, 2} {
		for _, cut := range []int64{s, 2 * s} {
			for _, base := range []int64{0, s, 2 * s} {
				for _, ceiling := range []float64{0, 3} {
					ps = append(ps, PairLimit{Rate: rate, Cut: cut, Base: min(base, cut), Ceiling: ceiling, Epoch: cut})
				}
			}
		}
	}
	for _, a := range ps {
		for _, b := range ps {
			if a != b && a.Supersedes(b) == b.Supersedes(a) {
				t.Fatalf("%+v and %+v: Supersedes %v both ways", a, b, a.Supersedes(b))
			}
		}
	}
	var ts []TargetLimit
	for _, tol := range []float64{0, 8, 10} {
		for _, at := range []int64{s, 2 * s} {
			for _, base := range []int64{0, s, 2 * s} {
				ts = append(ts, TargetLimit{Tolerance: tol, At: at, Base: min(base, at), Ceiling: 12})
			}
		}
	}
	for _, a := range ts {
		for _, b := range ts {
			if a != b && a.Supersedes(b) == b.Supersedes(a) {
				t.Fatalf("%+v and %+v: Supersedes %v both ways", a, b, a.Supersedes(b))
			}
		}
	}
}

// What the engine hands the store: a learned limit once, its sends per
// bucket as deltas, each once.
func TestPaceNewsOut(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
	tg := e.target("s.com")
	counted(e, s, tg, 1, start)
	attemptAt(t, e, start, "r0", "s.com", 2, rateLimited)
	now := start.Add(time.Second)
	e.Sweep(now)
	out := s.last()
	if len(out.Pairs) != 1 || out.Pairs[0] != (PairLimit{
		Route: 0, Target: tg.n, Rate: 4, Cut: start.UnixNano(), Epoch: start.UnixNano(), Since: start.Add(time.Millisecond).UnixNano(), First: true,
	}) {
		t.Fatalf("handed %+v, want r0's limit from its first 429", out.Pairs)
	}
	if out.Now != now.UnixNano() || out.Window != time.Minute || out.Width != 10*time.Second {
		t.Errorf("exchange at %d, window %v, width %v", out.Now, out.Window, out.Width)
	}
	for range 2 {
		attemptAt(t, e, now, "r0", "s.com", 2, okOutcome)
		now = now.Add(time.Second)
	}
	e.Sweep(now)
	out = s.last()
	bucket := now.UnixNano() / int64(10*time.Second)
	if len(out.Pairs) != 0 || len(out.Sent) != 1 || out.Sent[0] != (PaceCount{Route: 0, Target: tg.n, Epoch: start.UnixNano(), Bucket: bucket, N: 2}) {
		t.Errorf("handed %+v and %+v, want no limit again and r0's two sends", out.Pairs, out.Sent)
	}
	e.Sweep(now)
	if out = s.last(); len(out.Sent) != 0 {
		t.Errorf("handed %+v again", out.Sent)
	}
}

// What the engine takes from the store: another process's limit holds the
// pair, the share divides it, the others' counts fill the count guard, and
// alone the whole limit comes back.
func TestPaceNewsIn(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
	tg := e.target("s.com")
	now := start
	cut := now.Add(-time.Second).UnixNano()
	s.hear(PaceNews{Pairs: []PairLimit{{Route: 0, Target: tg.n, Rate: 2, Cut: cut, Epoch: cut, Since: cut}}})
	e.Sweep(now)
	st, ok := e.Pace(now, "s.com")
	if !ok || len(st.Pairs) != 1 || st.Pairs[0].Rate != 2 || st.Pairs[0].Own != 2 {
		t.Fatalf("pacing %+v, want r0 held to the 2/s heard", st)
	}
	// Two processes: half each.
	bucket := now.UnixNano() / int64(10*time.Second)
	s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: 2}}, Others: []PaceCount{
		{Route: 0, Target: tg.n, Epoch: cut, Bucket: bucket, N: 7},
		{Route: 1, Target: tg.n, Epoch: 0, Bucket: bucket, N: 5},  // a pair only the others used
		{Route: 0, Target: tg.n, Epoch: 42, Bucket: bucket, N: 9}, // counted under another epoch: not this one's
	}})
	e.Sweep(now)
	st, _ = e.Pace(now, "s.com")
	if st.Processes != 2 || len(st.Pairs) != 2 {
		t.Fatalf("pacing %+v, want two processes and both pairs", st)
	}
	if p := st.Pairs[0]; p.Own != 1 || p.Sent != 7 || p.Local != 0 {
		t.Errorf("r0: %+v, want its half of 2/s and the others' 7 sent", p)
	}
	if p := st.Pairs[1]; p.Sent != 5 || p.Rate != 0 {
		t.Errorf("r1: %+v, want the others' 5 sent and no rate", p)
	}
	// The next exchange replaces the counts, not adds to them.
	s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: 2}}, Others: []PaceCount{{Route: 0, Target: tg.n, Epoch: cut, Bucket: bucket, N: 8}}})
	e.Sweep(now)
	if st, _ = e.Pace(now, "s.com"); st.Pairs[0].Sent != 8 || st.Pairs[1].Sent != 0 {
		t.Errorf("counts %+v after the next exchange, want 8 and 0", st.Pairs)
	}
	// Alone: the whole limit, this process's own counts.
	s.hear(PaceNews{Alone: true})
	e.Sweep(now)
	st, _ = e.Pace(now, "s.com")
	if p := st.Pairs[0]; st.Processes != 1 || p.Own != 2 || p.Sent != 0 {
		t.Errorf("alone: %+v, want the whole 2/s and no count but its own", st)
	}
	// A stale limit (one this process's was learned knowing) is dropped.
	s.hear(PaceNews{Pairs: []PairLimit{{Route: 0, Target: tg.n, Rate: 9, Cut: cut - 1, Epoch: cut - 1}}})
	e.Sweep(now)
	if st, _ = e.Pace(now, "s.com"); st.Pairs[0].Rate != 2 {
		t.Errorf("a stale limit moved the rate to %v", st.Pairs[0].Rate)
	}
}

// A 429 heard from another process is the pair's last: a 429 here to an
// attempt leased before it is the same penalty, one leased after it news.
func TestHeard429IsThePairsLast(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 1)
	tg := e.target("s.com")
	now := start
	before := mustAcquire(t, e, now, Request{Target: "s.com"})
	cut := now.Add(500 * time.Millisecond).UnixNano()
	s.hear(PaceNews{Pairs: []PairLimit{{Route: 0, Target: tg.n, Rate: 2, Cut: cut, Epoch: cut, Since: cut, First: true}}})
	now = now.Add(time.Second)
	e.Sweep(now)
	if got := heldRate(e, 0, "s.com", now); got != 2 {
		t.Fatalf("r0 held to %v, want the 2/s heard", got)
	}
	e.Report(now, before, rateLimited)
	if got := heldRate(e, 0, "s.com", now); got != 2 {
		t.Errorf("a 429 to an attempt leased before the one heard moved r0's rate to %v, want the same penalty", got)
	}
	now = now.Add(2 * time.Second)
	after := mustAcquire(t, e, now, Request{Target: "s.com"})
	e.Report(now, after, rateLimited)
	if got := heldRate(e, 0, "s.com", now); got >= 2 {
		t.Errorf("a 429 to an attempt leased after the one heard left r0 at %v, want it backed off", got)
	}
}

// The others' counts and a tolerance heard from them make the count guard
// hold a pair that sent little here.
func TestPaceCountGuardReadsTheFleet(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 1)
	tg := e.target("s.com")
	now := start
	bucket := now.UnixNano() / int64(10*time.Second)
	s.hear(PaceNews{
		Targets: []TargetLimit{{Target: tg.n, Tolerance: 10, Ceiling: 20, At: now.Add(-time.Second).UnixNano()}},
		Shares:  []PaceShare{{Target: tg.n, Procs: 2}},
	})
	e.Sweep(now)
	mustAcquire(t, e, now, Request{Target: "s.com"}) // the pair is made; sends one
	s.hear(PaceNews{
		Shares: []PaceShare{{Target: tg.n, Procs: 2}},
		Others: []PaceCount{{Route: 0, Target: tg.n, Bucket: bucket, N: 9}},
	})
	later := now.Add(time.Minute / 10) // a token's worth at 10 a minute over 2
	e.Sweep(later)
	if wait := e.paceWait(tg, 0, later.UnixNano()); wait <= 0 {
		t.Fatalf("with 1 sent here and 9 elsewhere, the tolerance of 10 did not hold the pair")
	}
	st, _ := e.Pace(later, "s.com")
	if p := st.Pairs[0]; p.Sent != 10 || p.Local != 1 || math.Abs(p.Own-st.Tolerance/60/2) > 1e-9 {
		t.Errorf("%+v, want 10 sent (1 here), and half of 10 a minute", p)
	}
}

// A wave seen partly here and partly elsewhere is a wave: two bans heard,
// one here, and the tolerance is learned and handed on.
func TestPaceWaveAcrossProcesses(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 4)
	tg := e.target("s.com")
	e.watch(tg)
	now := start
	for i := range 25 { // r0 sends 25 here, r3 5
		attemptAt(t, e, now.Add(time.Duration(i)*time.Second), "r0", "s.com", 4, okOutcome)
		if i%5 == 0 {
			attemptAt(t, e, now.Add(time.Duration(i)*time.Second), "r3", "s.com", 4, okOutcome)
		}
	}
	now = now.Add(25 * time.Second)
	s.hear(PaceNews{Bans: []PaceBan{
		{Route: 1, Target: tg.n, At: now.Add(-2 * time.Second).UnixNano(), Sent: 24, Most: 6},
		{Route: 2, Target: tg.n, At: now.Add(-time.Second).UnixNano(), Sent: 26, Most: 5},
	}})
	e.Sweep(now)
	if tol := tg.pace.Load().toleranceAt(&e.cfg, now.UnixNano()); tol != 0 {
		t.Fatalf("two bans made a wave: tolerance %v", tol)
	}
	report(t, e, now, "r0", "s.com", Blocked, 1) // the third, here: r0 sent 25, r3 5
	tol := tg.pace.Load().toleranceAt(&e.cfg, now.UnixNano())
	if want := toleranceMargin * 12; math.Abs(tol-want) > 1e-9 { // max(most 6, banned 24 / 2)
		t.Fatalf("tolerance %v, want %v", tol, want)
	}
	e.Sweep(now)
	out := s.last()
	if len(out.Targets) != 1 || out.Targets[0].Tolerance != tol || out.Targets[0].At != now.UnixNano() {
		t.Errorf("handed %+v, want the tolerance learned", out.Targets)
	}
	if len(out.Bans) != 1 || out.Bans[0].Route != 0 || out.Bans[0].Sent != 25 || out.Bans[0].Most != 5 {
		t.Errorf("handed bans %+v, want r0's", out.Bans)
	}
	if len(out.Seen) != 1 || out.Seen[0].Route != 0 || out.Seen[0].Banned != now.UnixNano() {
		t.Errorf("handed %+v, want r0 banned", out.Seen)
	}
}

// The store's first count of the processes pacing a target is taken at
// once when it finds others, and only after soloExchanges exchanges when
// it finds this process alone, unless no other process is alive at two
// exchanges in a row: the others' counts, like the heartbeats of those
// just started, come an exchange or two late. Once counted, any count is
// taken.
func TestSoloCountIsTakenLate(t *testing.T) {
	t.Parallel()
	type exchange struct{ procs, fleet int32 } // what the store says
	for _, tt := range []struct {
		name      string
		exchanges []exchange
		taken     []int32 // the count taken after each
	}{
		{"others at once", []exchange{{2, 2}}, []int32{2}},
		{"alone, the fleet not known", []exchange{{1, 0}, {1, 0}, {1, 0}, {1, 0}}, []int32{0, 0, 1, 1}},
		{"alone among others", []exchange{{1, 2}, {1, 2}, {1, 2}}, []int32{0, 0, 1}},
		{"others found late", []exchange{{1, 2}, {2, 2}}, []int32{0, 2}},
		{"the only one alive", []exchange{{1, 1}, {1, 1}}, []int32{0, 1}},
		{"another starting beside it", []exchange{{1, 1}, {1, 2}, {1, 2}}, []int32{0, 0, 1}},
		{"an other leaves", []exchange{{2, 2}, {1, 1}}, []int32{2, 1}},
		{"counted alone, then another joins", []exchange{{1, 2}, {1, 2}, {1, 2}, {2, 2}}, []int32{0, 0, 1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, s := newSharingEngine(t, Config{}, 1)
			tg := e.target("s.com")
			tp := e.watch(tg)
			for i, x := range tt.exchanges {
				s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: x.procs}}, Fleet: x.fleet})
				e.Sweep(start.Add(time.Duration(i) * time.Second))
				if got := tp.procs.Load(); got != tt.taken[i] {
					t.Fatalf("after exchange %d (%v): %d processes taken, want %d", i+1, tt.exchanges[:i+1], got, tt.taken[i])
				}
			}
		})
	}
	// A target watched once the process has been found the only one alive
	// is counted at its first exchange.
	e, s := newSharingEngine(t, Config{}, 1)
	for i := range 2 {
		s.hear(PaceNews{Fleet: 1})
		e.Sweep(start.Add(time.Duration(i) * time.Second))
	}
	tg := e.target("s.com")
	tp := e.watch(tg)
	s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: 1}}, Fleet: 1})
	e.Sweep(start.Add(2 * time.Second))
	if got := tp.procs.Load(); got != 1 {
		t.Errorf("a target watched by the only process alive: %d processes taken at its first exchange, want 1", got)
	}
}

// A 429 that comes before the store has said how many processes pace the
// target is weighed against this process's count alone: the rate it
// teaches is this process's share, kept here and out of the freeze until
// the share is known, then handed on as the fleet's limit. A limit the
// others learned replaces the share.
func TestBlindLimitIsAShare(t *testing.T) {
	t.Parallel()
	for _, procs := range []int32{1, 2, 3} {
		e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
		tg := e.target("s.com")
		e.watch(tg) // counting what each exit sends
		// r0 sends 10 a second here.
		for i := range 20 {
			attemptAt(t, e, start.Add(time.Duration(i)*time.Second/10), "r0", "s.com", 2, okOutcome)
		}
		now := start.Add(2 * time.Second)
		attemptAt(t, e, now, "r0", "s.com", 2, rateLimited)
		share := heldRate(e, 0, "s.com", now)
		if want := rateMargin * 10; math.Abs(share-want) > 0.1*want {
			t.Fatalf("r0 held to %.2f after its 429, want about %.2f, what it sent here", share, want)
		}
		e.Sweep(now)
		if out := s.last(); len(out.Pairs) != 0 {
			t.Fatalf("a share handed on as the fleet's limit: %+v", out.Pairs)
		}
		if tp := tg.pace.Load(); tp.tripped.Load() != 0 || len(tp.firsts) != 0 {
			t.Fatalf("a share counted toward the freeze: %d tripped, firsts %v", tp.tripped.Load(), tp.firsts)
		}
		counted(e, s, tg, procs, now)
		e.Sweep(now) // hands what the last one learned
		var handed PairLimit
		for _, l := range s.last().Pairs {
			if l.Route == 0 {
				handed = l
			}
		}
		want := share * float64(procs)
		if math.Abs(handed.Rate-want) > 1e-9 || !handed.First || handed.Cut != now.UnixNano() {
			t.Errorf("%d processes: handed %+v, want r0's first limit of %.2f", procs, handed, want)
		}
		st, _ := e.Pace(now, "s.com")
		if p := st.Pairs[0]; math.Abs(p.Rate-want) > 1e-9 || math.Abs(p.Own-share) > 1e-9 {
			t.Errorf("%d processes: r0 %+v, want the fleet held to %.2f and %.2f of it here", procs, p, want, share)
		}
		if got := tg.pace.Load().tripped.Load(); got != 1 {
			t.Errorf("%d processes: %d first 429s counted toward the freeze, want r0's", procs, got)
		}
	}

	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 1)
	tg := e.target("s.com")
	e.watch(tg)
	for i := range 20 {
		attemptAt(t, e, start.Add(time.Duration(i)*time.Second/10), "r0", "s.com", 1, okOutcome)
	}
	now := start.Add(2 * time.Second)
	attemptAt(t, e, now, "r0", "s.com", 1, rateLimited)
	// Another process's limit, learned earlier and looser: the fleet's,
	// where the concurrent share would have merged to the stricter.
	cut := now.Add(-time.Second).UnixNano()
	s.hear(PaceNews{Pairs: []PairLimit{{Route: 0, Target: tg.n, Rate: 15, Cut: cut, Epoch: cut, Since: cut, First: true}}})
	e.Sweep(now)
	counted(e, s, tg, 2, now)
	if got := heldRate(e, 0, "s.com", now); got != 15 {
		t.Errorf("r0 held to %v, want the 15/s the others learned, not twice its share", got)
	}
}

// Once the store has counted P processes pacing a target, a 429 weighs
// the larger of the fleet's sums and P times this process's own count:
// the others' counts come an exchange late.
func TestLateCountsWeighTheShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		others int32   // what the others' counts say they sent in those 2 s
		want   float64 // the rate r0 is held to, all processes together
	}{
		{"the others' count not in yet", 0, rateMargin * 2 * 10},
		{"the others sent more than this process", 60, rateMargin * (20 + 60) / 2},
	}
	for _, tt := range tests {
		e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 2)
		tg := e.target("s.com")
		counted(e, s, tg, 2, start)
		for i := range 20 { // r0 sends 10 a second here
			attemptAt(t, e, start.Add(time.Duration(i)*time.Second/10), "r0", "s.com", 2, okOutcome)
		}
		now := start.Add(2 * time.Second)
		bucket := now.UnixNano() / int64(10*time.Second)
		s.hear(PaceNews{Shares: []PaceShare{{Target: tg.n, Procs: 2}}, Others: []PaceCount{{Route: 0, Target: tg.n, Bucket: bucket, N: tt.others}}})
		e.Sweep(now)
		attemptAt(t, e, now, "r0", "s.com", 2, rateLimited)
		if got := heldRate(e, 0, "s.com", now); math.Abs(got-tt.want) > 0.1*tt.want {
			t.Errorf("%s: r0 held to %.2f, want about %.2f", tt.desc, got, tt.want)
		}
	}
}

// A young first 429 brakes the site for every process's share: before
// the store has counted the processes pacing it, at rateMargin of what
// the tripped pair sent here (a share of what the site saw); once it has
// counted P, at the brake's rate over P.
func TestSharedBrakeIsAShare(t *testing.T) {
	t.Parallel()
	const routes = 10
	t.Run("before the count", func(t *testing.T) {
		t.Parallel()
		e, _ := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, routes)
		tg := e.target("s.com")
		e.watch(tg)
		for i := range 3 { // r0 sends 3 in its first second here
			attemptAt(t, e, start.Add(time.Duration(i)*300*time.Millisecond), "r0", "s.com", routes, okOutcome)
		}
		now := start.Add(time.Second)
		attemptAt(t, e, now, "r1", "s.com", routes, okOutcome)
		attemptAt(t, e, now, "r0", "s.com", routes, rateLimited)
		share := heldRate(e, 0, "s.com", now)
		st, _ := e.Pace(now, "s.com")
		if share <= 0 || share >= e.cfg.PaceStart || st.Braked != share {
			t.Fatalf("braked at %v, r0 held to %v; want r0's share, under PaceStart %v", st.Braked, share, e.cfg.PaceStart)
		}
		later := now.Add(100 * time.Millisecond)
		if got, want := e.paceWait(tg, 1, later.UnixNano()), time.Duration(float64(time.Second)/share)-100*time.Millisecond; got < want-time.Microsecond || got > want+time.Microsecond {
			t.Errorf("r1 waits %v, want %v", got, want)
		}
	})
	t.Run("counted", func(t *testing.T) {
		t.Parallel()
		e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, routes)
		tg := e.target("s.com")
		counted(e, s, tg, 2, start)
		now := start.Add(time.Second)
		attemptAt(t, e, now, "r1", "s.com", routes, okOutcome)
		attemptAt(t, e, now, "r0", "s.com", routes, rateLimited)
		if st, _ := e.Pace(now, "s.com"); st.Braked != e.cfg.PaceStart {
			t.Fatalf("braked at %v, want PaceStart %v, the fleet's", st.Braked, e.cfg.PaceStart)
		}
		later := now.Add(100 * time.Millisecond)
		if got, want := e.paceWait(tg, 1, later.UnixNano()), 2*time.Second/time.Duration(e.cfg.PaceStart)-100*time.Millisecond; got != want {
			t.Errorf("r1 waits %v, want %v: half of PaceStart here", got, want)
		}
	})
}

// Two exits' first 429s, one heard and one here, freeze the others, and
// the frozen rates are handed on.
func TestPaceFreezeAcrossProcesses(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 3)
	tg := e.target("s.com")
	counted(e, s, tg, 1, start)
	for i := range 30 {
		attemptAt(t, e, start.Add(time.Duration(i)*time.Second/3), fmt.Sprintf("r%d", i%3), "s.com", 3, okOutcome)
	}
	now := start.Add(10 * time.Second)
	cut := now.Add(-time.Second).UnixNano()
	s.hear(PaceNews{Pairs: []PairLimit{{Route: 1, Target: tg.n, Rate: 1, Cut: cut, Epoch: cut, Since: cut, First: true}}})
	e.Sweep(now)
	if got := heldRate(e, 2, "s.com", now); got != 0 {
		t.Fatalf("one exit's 429 froze r2 at %v", got)
	}
	attemptAt(t, e, now, "r0", "s.com", 3, rateLimited)
	if got := heldRate(e, 2, "s.com", now); got == 0 {
		t.Fatal("two exits' first 429s, one heard, did not freeze r2")
	}
	e.Sweep(now)
	handed := map[int32]bool{}
	for _, l := range s.last().Pairs {
		handed[l.Route] = true
	}
	if !handed[0] || !handed[2] || handed[1] {
		t.Errorf("handed limits of %v, want r0's and the frozen r2's", handed)
	}
}

// Holds another process's freeze guessed are guesses here too: a 429 of
// one teaches what it sent, and the hold it tells another guessed pair is
// handed on, its guess as the ceiling.
func TestPaceGuessesAcrossProcesses(t *testing.T) {
	t.Parallel()
	e, s := newSharingEngine(t, Config{MaxRemovedShare: -1, PanicThreshold: -1}, 3)
	tg := e.target("s.com")
	counted(e, s, tg, 1, start)
	cut := start.UnixNano()
	s.hear(PaceNews{Pairs: []PairLimit{
		{Route: 1, Target: tg.n, Rate: 3.6, Cut: cut, Since: cut},
		{Route: 2, Target: tg.n, Rate: 3.6, Cut: cut, Since: cut},
	}})
	e.Sweep(start)
	end := start.Add(20 * time.Second)
	for slot, rate := range map[int32]float64{1: 1.5, 2: 1.8} {
		for at := start; at.Before(end); at = at.Add(time.Duration(float64(time.Second) / rate)) {
			e.takePace(tg, slot, at.UnixNano())
		}
	}
	e.learnRate(tg, 1, end.UnixNano(), end.UnixNano(), time.Millisecond)
	taught := heldRate(e, 1, "s.com", end)
	if want := rateMargin * 1.5; math.Abs(taught-want) > 0.1*want {
		t.Fatalf("r1, held by a heard guess, held to %.2f after its 429, want about %.2f", taught, want)
	}
	e.Sweep(end)
	var told PairLimit
	for _, l := range s.last().Pairs {
		if l.Route == 2 {
			told = l
		}
	}
	if told.Rate != taught || told.Ceiling != 3.6 || told.Cut != end.UnixNano() || told.Base != cut || told.First {
		t.Errorf("handed r2's limit %+v, want r1's %.2f under a ceiling of its 3.6, learned knowing the heard one", told, taught)
	}
}

// A memory store shares nothing, and the engine hands it nothing.
func TestPaceUnsharedHasNoShare(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxRemovedShare: -1}, 1)
	attemptAt(t, e, start, "r0", "s.com", 1, rateLimited)
	tp := e.target("s.com").pace.Load()
	if tp.shared || tp.pair(0).sh != nil || len(e.share.targets) != 0 {
		t.Fatal("pacing state for sharing without a PaceSharer")
	}
}

// The pair table finds every pair added, while readers read it without a
// lock as it grows, and forgets those removed.
func TestPairTable(t *testing.T) {
	t.Parallel()
	var tp targetPace
	const n = 5000
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				for slot := int32(0); slot < n; slot += 97 {
					if p := tp.pair(slot); p != nil && p.slot != slot {
						t.Errorf("pair(%d) is %d's", slot, p.slot)
						return
					}
				}
			}
		})
	}
	for slot := range int32(n) {
		if tp.pairAt(slot*3, 0).slot != slot*3 { // spread: slots not dense
			t.Fatal("pairAt made another slot's pair")
		}
	}
	close(done)
	wg.Wait()
	seen := map[int32]int{}
	tp.pairs.each(func(p *pairPace) { seen[p.slot]++ })
	if len(seen) != n || tp.pairs.n != n {
		t.Fatalf("%d pairs listed, %d held, want %d", len(seen), tp.pairs.n, n)
	}
	for slot := range int32(n) {
		if seen[slot*3] != 1 || tp.pair(slot*3) == nil || tp.pair(slot*3+1) != nil {
			t.Fatalf("slot %d listed %d times, found %v", slot*3, seen[slot*3], tp.pair(slot*3) != nil)
		}
	}
	tp.mu.Lock()
	tp.pairs.remove(func(p *pairPace) bool { return p.slot%2 == 0 })
	tp.mu.Unlock()
	if tp.pairs.n != n/2 || tp.pair(0) != nil || tp.pair(3) == nil {
		t.Fatalf("after removing the even slots: %d held, pair(0) %v, pair(3) %v", tp.pairs.n, tp.pair(0) != nil, tp.pair(3) != nil)
	}
}

// BenchmarkAcquireReportWarm is BenchmarkAcquireReport once every pair
// the loop leases has its pacing state (pairs are made at their first
// lease to a watched target, and BenchmarkAcquireReport never gets past
// making them): the steady cost of a pick and its report.
func BenchmarkAcquireReportWarm(b *testing.B) {
	e, targets := benchPool(b, 1000)
	now := start
	acquireReport(b, e, targets, &now, 1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	acquireReport(b, e, targets, &now, b.N)
}

// BenchmarkAcquireReportWatched is BenchmarkAcquireReportWarm at sites
// that never answered 429: every target watched (its pairs counted), no
// rate holding any pair, as at most sites a crawl reaches.
func BenchmarkAcquireReportWatched(b *testing.B) {
	e, targets := benchPoolOf(b, 1000, 0, false)
	now := start
	acquireReport(b, e, targets, &now, 1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	acquireReport(b, e, targets, &now, b.N)
}

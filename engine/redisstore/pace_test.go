package redisstore

import (
	"errors"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// A fleet of gateways sharing pacing through one Redis, on one virtual
// clock. Every step is waited for, never slept on: a Sweep's round with
// Redis (sweep) and the delivery of every notification published so far
// (settle).
type paceFleet struct {
	t      *testing.T
	gs     []gateway
	routes int
}

var paceStart = time.Unix(0, t0).UTC()

func newPaceFleet(t *testing.T, n, routes int, opts Options) *paceFleet {
	t.Helper()
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	f := &paceFleet{t: t, routes: routes}
	for i := range n {
		f.gs = append(f.gs, f.gateway(newStore(t, addr, prefix, opts), i))
	}
	return f
}

// gateway is an engine over s with the fleet's routes.
func (f *paceFleet) gateway(s *Store, i int) gateway {
	f.t.Helper()
	e, err := engine.New(engine.Config{MaxRemovedShare: -1, PanicThreshold: -1, UncheckedCandidates: true, Seed: uint64(i + 1)}, s)
	if err != nil {
		f.t.Fatal(err)
	}
	for r := range f.routes {
		if err := e.AddRoute(paceStart, engine.RouteSpec{ID: fmt.Sprintf("r%d", r)}); err != nil {
			f.t.Fatal(err)
		}
	}
	return gateway{e: e, s: s}
}

// sweep runs g's Sweep at now and waits for the round with Redis it asked
// for.
func (f *paceFleet) sweep(g gateway, now time.Time) {
	f.t.Helper()
	g.e.Sweep(now)
	asked := g.s.pace.asked.Load()
	waitFor(f.t, "the pacing round", func() bool { return g.s.pace.done.Load() >= asked })
}

// settle waits until every gateway heard every notification the others
// published.
func (f *paceFleet) settle() {
	f.t.Helper()
	for _, g := range f.gs {
		waitFor(f.t, "the notifications", func() bool {
			var sent uint64
			for _, o := range f.gs {
				if o.s != g.s {
					sent += o.s.pace.published.Load()
				}
			}
			return g.s.pace.heard.Load() >= sent
		})
	}
}

// exchange is a full exchange: every gateway sweeps three times, so that
// each has sent its news (the first round), read the others' (the second)
// and taken them (the third Sweep).
func (f *paceFleet) exchange(now time.Time) {
	f.t.Helper()
	for range 3 {
		for _, g := range f.gs {
			f.sweep(g, now)
		}
		f.settle()
	}
}

// attempt leases route for target through g at now, avoiding every other
// route, and reports o; false when the pair is paced.
func (f *paceFleet) attempt(g gateway, now time.Time, route, target string, o engine.Outcome) bool {
	f.t.Helper()
	var avoid []string
	for r := range f.routes {
		if id := fmt.Sprintf("r%d", r); id != route {
			avoid = append(avoid, id)
		}
	}
	l, err := g.e.Acquire(now, engine.Request{Target: target, Avoid: avoid})
	if errors.Is(err, engine.ErrPaced) {
		return false
	}
	if err != nil || l.Route != route {
		f.t.Fatalf("lease %+v, %v; want %s", l, err, route)
	}
	if err := g.e.Report(now, l, o); err != nil {
		f.t.Fatal(err)
	}
	return true
}

// pairPace is route's pacing toward target in g.
func pairPace(g gateway, now time.Time, target, route string) (engine.PaceStatus, engine.PairPaceStatus) {
	st, _ := g.e.Pace(now, target)
	for _, p := range st.Pairs {
		if p.Route == route {
			return st, p
		}
	}
	return st, engine.PairPaceStatus{}
}

var (
	served      = engine.Outcome{Class: engine.OK, Latency: 50 * time.Millisecond}
	rateLimited = engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Millisecond}
	banned      = engine.Outcome{Class: engine.Blocked}
)

// learnRate makes the fleet share r0's rate at s.com: both gateways send
// there, a 429 comes through the first, and every gateway holds the pair
// to its share. It returns the time after.
func (f *paceFleet) learnRate() time.Time {
	f.t.Helper()
	now := paceStart
	for _, g := range f.gs { // the target is met everywhere
		f.attempt(g, now, "r0", "s.com", served)
	}
	f.attempt(f.gs[0], now, "r0", "s.com", rateLimited) // PaceStart, 4/s: nothing counted yet
	now = now.Add(time.Second)                          // past the Retry-After
	f.exchange(now)
	// Each gateway sends once under the limit, so each counts as pacing
	// the target.
	for _, g := range f.gs {
		_, p := pairPace(g, now, "s.com", "r0")
		if p.Rate != 4 {
			f.t.Fatalf("r0 is held to %v in a gateway, want the 4/s learned from the 429 in another", p.Rate)
		}
		if !f.attempt(g, now, "r0", "s.com", served) {
			f.t.Fatal("the pair's first request under the limit was paced")
		}
	}
	f.exchange(now)
	return now
}

// (1) A rate learned from a 429 in one gateway holds the pair in the
// others, and together they send at most about that rate.
func TestSharedRateFrom429(t *testing.T) {
	f := newPaceFleet(t, 2, 1, Options{})
	now := f.learnRate()
	for _, g := range f.gs {
		st, p := pairPace(g, now, "s.com", "r0")
		if st.Processes != 2 || math.Abs(p.Own-p.Rate/2) > 1e-9 {
			t.Fatalf("%d processes, own rate %v of %v; want 2, each half", st.Processes, p.Own, p.Rate)
		}
	}
	// Both ask 100 times a second for 10 s; each sweeps every second.
	const seconds = 10
	leased := make([]int, len(f.gs))
	for s := range seconds {
		for i := range 100 {
			at := now.Add(time.Duration(s)*time.Second + time.Duration(i)*10*time.Millisecond)
			for j, g := range f.gs {
				if f.attempt(g, at, "r0", "s.com", served) {
					leased[j]++
				}
			}
		}
		f.exchange(now.Add(time.Duration(s+1) * time.Second))
	}
	total := leased[0] + leased[1]
	// 4/s, grown by pressure (PaceGrowth a minute) by under 2%, and a
	// token each to start with.
	if most := 40*102/100 + len(f.gs); total > most || total < 4*seconds*9/10 {
		t.Errorf("the gateways sent %v (%d) in %d s, want about the learned 4/s together: %d at most", leased, total, seconds, most)
	}
	for j, n := range leased {
		if n < 2*seconds*8/10 {
			t.Errorf("gateway %d sent %d in %d s, want about its half of 4/s", j, n, seconds)
		}
	}
	// What each reads is the fleet's count, its own a part of it.
	_, p := pairPace(f.gs[0], now.Add(seconds*time.Second), "s.com", "r0")
	if p.Sent < total-8 || p.Sent > total+2 || p.Local >= p.Sent {
		t.Errorf("gateway 0 counts %d sent (%d its own); the fleet sent %d", p.Sent, p.Local, total)
	}
}

// (2) A tolerance learned from a wave of bans, seen partly by one gateway
// and partly by the other, holds in both, and their counts sum, so the
// two together stay under what the site tolerates.
func TestSharedToleranceFromBanWave(t *testing.T) {
	const (
		exits    = 6
		tolerate = 20 // the site bans an exit past 20 requests in any 60 s
		stagger  = 3  // exit i starts at 3i s: its 21st request comes at 3i + 20 s
	)
	f := newPaceFleet(t, 2, exits+1, Options{})
	a, b := f.gs[0], f.gs[1]
	// Pacing state from the first request (an exit nobody uses, banned),
	// so that the counts begin at once.
	for _, g := range f.gs {
		if err := g.e.Feedback(paceStart, fmt.Sprintf("r%d", exits), "s.com", banned); err != nil {
			t.Fatal(err)
		}
	}
	// The site: what each exit sent, through any gateway, and its bans.
	sent := make([][]time.Time, exits)
	bannedAt := make([]time.Time, exits)
	bannedBy := make([]int, exits)
	site := func(i int, now time.Time) engine.Outcome {
		if !bannedAt[i].IsZero() {
			return banned
		}
		n := 0
		for _, at := range sent[i] {
			if now.Sub(at) < time.Minute {
				n++
			}
		}
		if n >= tolerate {
			bannedAt[i] = now
			return banned
		}
		return served
	}
	var learnedAt time.Time
	worst := 0 // the most one exit sent in a minute after the hold
	for s := 0; s < 26+150; s++ {
		now := paceStart.Add(time.Duration(s) * time.Second)
		// Each exit is asked once a second from its start, by the gateways
		// in turn: each sees half of what the site sees.
		g, gi := a, 0
		if s%2 == 1 {
			g, gi = b, 1
		}
		for i := range exits {
			if s < stagger*i || !bannedAt[i].IsZero() {
				continue
			}
			route := fmt.Sprintf("r%d", i)
			// Lease first, then ask the site: a paced request never
			// reaches it.
			avoid := make([]string, 0, exits)
			for r := range exits + 1 {
				if r != i {
					avoid = append(avoid, fmt.Sprintf("r%d", r))
				}
			}
			l, err := g.e.Acquire(now, engine.Request{Target: "s.com", Avoid: avoid})
			if errors.Is(err, engine.ErrPaced) {
				continue
			}
			if err != nil || l.Route != route {
				t.Fatalf("%v: lease %+v, %v; want %s", now.Sub(paceStart), l, err, route)
			}
			o := site(i, now)
			if o.Class == engine.Blocked {
				bannedBy[i] = gi
			} else {
				sent[i] = append(sent[i], now)
			}
			if err := g.e.Report(now, l, o); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range f.gs {
			f.sweep(g, now)
		}
		f.settle()
		if learnedAt.IsZero() {
			stA, _ := a.e.Pace(now, "s.com")
			stB, _ := b.e.Pace(now, "s.com")
			if stA.Tolerance > 0 && stB.Tolerance > 0 {
				learnedAt = now
				for _, st := range []engine.PaceStatus{stA, stB} {
					if st.Tolerance > tolerate || st.Processes != 2 {
						t.Fatalf("learned %v requests a window (site: %d), %d processes", st.Tolerance, tolerate, st.Processes)
					}
				}
				t.Logf("tolerance %.1f learned by %v", stA.Tolerance, now.Sub(paceStart))
			}
			continue
		}
		for i := range exits {
			if !bannedAt[i].IsZero() {
				continue
			}
			n := 0
			for _, at := range sent[i] {
				if now.Sub(at) < time.Minute {
					n++
				}
			}
			if now.Sub(learnedAt) > 5*time.Second { // what the exit sent before the hold has had its window
				if n > worst {
					t.Logf("%v: r%d sent %d in the last minute", now.Sub(paceStart), i, n)
				}
				worst = max(worst, n)
			}
		}
	}
	if learnedAt.IsZero() {
		t.Fatalf("no tolerance learned; bans at %v", bannedAt)
	}
	if bannedBy[0] == bannedBy[1] && bannedBy[1] == bannedBy[2] {
		t.Fatalf("the wave's bans all came through gateway %d: the test must split them", bannedBy[0])
	}
	for i := 3; i < exits; i++ {
		if !bannedAt[i].IsZero() {
			t.Errorf("r%d banned at %v, after the tolerance was learned at %v", i, bannedAt[i].Sub(paceStart), learnedAt.Sub(paceStart))
		}
		if len(sent[i]) < 25 {
			t.Errorf("r%d sent %d in all: the hold starved it", i, len(sent[i]))
		}
	}
	t.Logf("the most an exit sent in a minute under the hold: %d", worst)
	if worst >= tolerate {
		t.Errorf("an exit sent %d in a minute under the hold, the site tolerates %d", worst, tolerate)
	}
	// Counts are the fleet's: what gateway a reads of r3 is what the site
	// saw in the engine's window (whole buckets of 10 s), less what b sent
	// since its last round.
	end := paceStart.Add((26 + 149) * time.Second)
	_, p := pairPace(a, end, "s.com", "r3")
	width := int64(10 * time.Second)
	site3 := 0
	for _, at := range sent[3] {
		if at.UnixNano()/width > end.UnixNano()/width-6 {
			site3++
		}
	}
	if p.Sent < site3-2 || p.Local == p.Sent {
		t.Errorf("a counts %d sent by r3 (%d its own), the site saw %d", p.Sent, p.Local, site3)
	}
}

// (3) Two gateways pacing a target each send half of its limit; when one
// stops heartbeating, the other takes the whole of it again.
func TestSharedPaceShares(t *testing.T) {
	f := newPaceFleet(t, 2, 1, Options{PaceLive: 300 * time.Millisecond})
	now := f.learnRate()
	a, b := f.gs[0], f.gs[1]
	for _, g := range f.gs {
		if st, p := pairPace(g, now, "s.com", "r0"); st.Processes != 2 || p.Own >= p.Rate {
			t.Fatalf("%d processes, own rate %v of %v", st.Processes, p.Own, p.Rate)
		}
	}
	// a stops: no more Sweeps, so no more rounds. b, still sweeping, sees
	// its heartbeat age past PaceLive.
	f.gs = f.gs[1:]
	waitFor(t, "b takes the whole limit", func() bool {
		f.exchange(now)
		st, p := pairPace(b, now, "s.com", "r0")
		return st.Processes == 1 && p.Own == p.Rate
	})
	leased := 0
	for i := range 500 { // 5 s, 100 asks a second
		at := now.Add(time.Duration(i) * 10 * time.Millisecond)
		if f.attempt(b, at, "r0", "s.com", served) {
			leased++
		}
	}
	if leased < 18 || leased > 22 {
		t.Errorf("b alone sent %d in 5 s, want the whole 4/s", leased)
	}
	// a comes back: the share is halved again.
	f.gs = []gateway{a, b}
	now = now.Add(5 * time.Second)
	f.attempt(a, now, "r0", "s.com", served)
	waitFor(t, "the share halves again", func() bool {
		f.exchange(now)
		st, _ := pairPace(b, now, "s.com", "r0")
		return st.Processes == 2
	})
}

// (4) Cut off from Redis, a gateway paces alone with the whole of what it
// learned, without an error or a wait on the request path; a limit it
// learns meanwhile reaches the others once Redis answers again.
func TestSharedPaceOutage(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	link := newCutter(t, addr)
	f := &paceFleet{t: t, routes: 2}
	f.gs = []gateway{
		f.gateway(newStore(t, link.addr, prefix, Options{Resync: time.Hour}), 0),
		f.gateway(newStore(t, addr, prefix, Options{}), 1),
	}
	a, b := f.gs[0], f.gs[1]
	now := f.learnRate()
	if st, _ := pairPace(a, now, "s.com", "r0"); st.Processes != 2 {
		t.Fatalf("%d processes before the outage", st.Processes)
	}

	link.cut()
	// The first round that fails degrades a's store; from then on its
	// engine paces alone.
	waitFor(t, "a degrades", func() bool { a.e.Sweep(now); return a.s.Healthy() != nil })
	a.e.Sweep(now)
	st, p := pairPace(a, now, "s.com", "r0")
	if st.Processes != 1 || p.Own != p.Rate || p.Rate == 0 {
		t.Fatalf("degraded: %d processes, own %v of %v; want the whole learned limit", st.Processes, p.Own, p.Rate)
	}
	// Requests go on, paced at the whole rate, with no error but ErrPaced;
	// a 429 on r1 is learned locally.
	leased := 0
	for i := range 200 { // 2 s
		at := now.Add(time.Duration(i) * 10 * time.Millisecond)
		start := time.Now()
		if f.attempt(a, at, "r0", "s.com", served) {
			leased++
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a request waited %v with Redis out of reach", d)
		}
	}
	if leased < 7 || leased > 10 {
		t.Errorf("degraded, a sent %d in 2 s; want its learned 4/s alone", leased)
	}
	now = now.Add(2 * time.Second)
	f.attempt(a, now, "r1", "s.com", rateLimited)
	if _, p := pairPace(a, now, "s.com", "r1"); p.Rate == 0 {
		t.Fatal("a did not learn r1's rate while degraded")
	}

	link.restore(t)
	waitFor(t, "a recovers", func() bool { a.e.Sweep(now); return a.s.Healthy() == nil })
	waitFor(t, "b holds r1 to what a learned in the outage", func() bool {
		f.exchange(now)
		_, p := pairPace(b, now, "s.com", "r1")
		return p.Rate > 0
	})
}

// SharePace hands over and returns at once while the store's round is
// stuck on a Redis that accepts and never answers.
func TestSharePaceNeverWaits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never read, never answered
		}
	}()
	s, err := Open("redis://"+ln.Addr().String()+"/0", Options{Prefix: "blackhole", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.AddRoute(0, "r0")
	s.AddTarget(1, "s.com")
	done := make(chan struct{})
	go func() { s.paceLoop(t.Context()); close(done) }()
	t.Cleanup(func() { s.Close(); <-done })
	out := engine.PaceNews{
		Now: t0, Window: time.Minute, Width: 10 * time.Second,
		Pairs: []engine.PairLimit{{Route: 0, Target: 1, Rate: 2, Cut: t0}},
		Sent:  []engine.PaceCount{{Route: 0, Target: 1, Bucket: t0 / int64(10*time.Second), N: 1}},
	}
	s.SharePace(out) // the round starts and hangs
	waitFor(t, "the round is under way", func() bool { return len(s.pace.wake) == 0 })
	start := time.Now()
	for range 100 {
		s.SharePace(out)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("100 SharePace calls took %v while Redis hung", d)
	}
}

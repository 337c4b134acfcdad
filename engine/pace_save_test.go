package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// learnedPace is an engine of 5 routes whose site s.com froze: r0 and r1
// tripped sending 1 request/s each (r0's 429 froze the site, r1's, to an
// attempt leased before, is a guessed pair's), r2 was held by the
// freeze's guess, and r3 and r4 never went there. It returns the engine
// and when it froze.
func learnedPace(t *testing.T, cfg Config) (*Engine, time.Time) {
	t.Helper()
	e := newTestEngine(t, cfg, 5)
	e.watch(e.target("s.com"))
	now := start
	for i := range 30 {
		now = start.Add(time.Duration(i) * time.Second / 3)
		attemptAt(t, e, now, fmt.Sprintf("r%d", i%3), "s.com", 5, okOutcome)
	}
	var leases []Lease
	for _, id := range []string{"r0", "r1"} {
		l := leaseOf(t, e, now, id, "s.com", 5)
		leases = append(leases, l)
	}
	for _, l := range leases {
		e.Report(now, l, rateLimited)
	}
	return e, now
}

// TestRestorePaceHoldsWhatWasLearned: an engine restored from another's
// saved pacing, through JSON as a file carries it, holds each pair to the
// rate the other held it to, the freeze's guess as a guess, and an exit
// new to the frozen site to the site's frozen rate, as the other would
// have.
func TestRestorePaceHoldsWhatWasLearned(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxRemovedShare: -1, PanicThreshold: -1}
	a, now := learnedPace(t, cfg)
	saved := a.SavePace(now.Add(time.Second))
	if len(saved.Pairs) != 3 || len(saved.Targets) != 1 {
		t.Fatalf("saved %+v, want r0, r1 and r2's rates and s.com frozen", saved)
	}
	data, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	var loaded SavedPace
	if err := json.Unmarshal(data, &loaded); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	b := newTestEngine(t, cfg, 5)
	if n := b.RestorePace(later, loaded); n != 3 {
		t.Fatalf("restored %d pairs, want 3", n)
	}
	for slot := range int32(3) {
		want := heldRate(a, slot, "s.com", later)
		if got := heldRate(b, slot, "s.com", later); want == 0 || math.Abs(got-want) > 1e-9*want {
			t.Errorf("r%d held to %v after the restore, want %v as before it", slot, got, want)
		}
	}
	if pa, pb := a.target("s.com").pace.Load().pair(2), b.target("s.com").pace.Load().pair(2); !pa.guess || !pb.guess {
		t.Errorf("r2's hold a guess before the restore %v, after it %v: want a guess both", pa.guess, pb.guess)
	}
	// r3 never went to s.com before or after: a new exit there starts at
	// the frozen rate, here as there.
	attemptAt(t, a, later, "r3", "s.com", 5, okOutcome)
	attemptAt(t, b, later, "r3", "s.com", 5, okOutcome)
	want := heldRate(a, 3, "s.com", later)
	if got := heldRate(b, 3, "s.com", later); want == 0 || got != want {
		t.Errorf("a new exit held to %v after the restore, want the frozen %v", got, want)
	}
	// Held means held: the pair at its rate waits for a token.
	tb := b.target("s.com")
	b.takePace(tb, 0, later.UnixNano())
	if wait := b.paceWait(tb, 0, later.UnixNano()); wait <= 0 {
		t.Errorf("r0 asked again right after a request: waits %v, want its rate to hold it", wait)
	}
}

// TestRestorePaceSkips: what cannot or need not be restored is left out,
// and the rest restored.
func TestRestorePaceSkips(t *testing.T) {
	t.Parallel()
	now := start.Add(time.Hour)
	good := SavedPair{Route: "r0", Target: "s.com", Rate: 2, Ceiling: 3, Cut: now.Add(-time.Minute), Active: now.Add(-time.Second)}
	with := func(f func(*SavedPair)) SavedPair { p := good; f(&p); return p }
	tests := []struct {
		desc string
		cfg  Config
		pair SavedPair
		want int
	}{
		{"a pair of a route the engine has", Config{}, good, 1},
		{"an unknown route", Config{}, with(func(p *SavedPair) { p.Route = "gone" }), 0},
		{"a limit idle for PairTTL", Config{PairTTL: time.Minute}, with(func(p *SavedPair) { p.Active = now.Add(-time.Minute) }), 0},
		{"a zero rate", Config{}, with(func(p *SavedPair) { p.Rate = 0 }), 0},
		{"a NaN rate", Config{}, with(func(p *SavedPair) { p.Rate = math.NaN() }), 0},
		{"an infinite rate", Config{}, with(func(p *SavedPair) { p.Rate = math.Inf(1) }), 0},
		{"a negative ceiling", Config{}, with(func(p *SavedPair) { p.Ceiling = -1 }), 0},
		{"no cut", Config{}, with(func(p *SavedPair) { p.Cut = time.Time{} }), 0},
		{"a cut past 2262", Config{}, with(func(p *SavedPair) { p.Cut = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }), 0},
		{"learned pacing off", Config{PaceStart: -1}, good, 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, tt.cfg, 2)
			if n := e.RestorePace(now, SavedPace{Pairs: []SavedPair{tt.pair}}); n != tt.want {
				t.Errorf("restored %d, want %d", n, tt.want)
			}
		})
	}
	t.Run("a pair with a rate of its own", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 2)
		e.watch(e.target("s.com"))
		attemptAt(t, e, now, "r0", "s.com", 2, rateLimited)
		own := heldRate(e, 0, "s.com", now)
		if n := e.RestorePace(now, SavedPace{Pairs: []SavedPair{good}}); n != 0 || heldRate(e, 0, "s.com", now) != own {
			t.Errorf("restored %d, held to %v: want its own %v kept", n, heldRate(e, 0, "s.com", now), own)
		}
	})
	t.Run("a clock that was ahead", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 2)
		ahead := with(func(p *SavedPair) { p.Cut, p.Active = now.Add(time.Hour), now.Add(time.Hour) })
		if n := e.RestorePace(now, SavedPace{Pairs: []SavedPair{ahead}}); n != 1 {
			t.Fatalf("restored %d, want 1", n)
		}
		if got := heldRate(e, 0, "s.com", now); got != ahead.Rate {
			t.Errorf("held to %v, want %v", got, ahead.Rate)
		}
	})
}

// TestSavePaceLeavesForgottenLimits: a limit that has held nothing back for
// PairTTL is not saved, as evict would forget it.
func TestSavePaceLeavesForgottenLimits(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxRemovedShare: -1, PanicThreshold: -1, PairTTL: 10 * time.Minute}
	e, now := learnedPace(t, cfg)
	if n := len(e.SavePace(now.Add(9 * time.Minute)).Pairs); n != 3 {
		t.Errorf("%d pairs saved 9 minutes on, want 3", n)
	}
	if n := len(e.SavePace(now.Add(10 * time.Minute)).Pairs); n != 0 {
		t.Errorf("%d pairs saved 10 idle minutes on, want none", n)
	}
}

// TestRestorePaceTolerance: a site's tolerance, learned from a young wave
// of bans, reads the same in an engine restored from the saved pacing, the
// scouts' head start included, and a hold-off after a lift holds off there
// too.
func TestRestorePaceTolerance(t *testing.T) {
	t.Parallel()
	a := newTestEngine(t, Config{}, 8)
	tp := a.watch(a.target("s.com"))
	span := youngWave(a, tp)
	saved := a.SavePace(start.Add(span / 2))
	if len(saved.Targets) != 1 || saved.Targets[0].Tolerance == 0 || saved.Targets[0].Wide == 0 {
		t.Fatalf("saved %+v, want s.com's young tolerance", saved.Targets)
	}
	b := newTestEngine(t, Config{}, 8)
	b.RestorePace(start.Add(span/2), saved)
	tb := b.target("s.com").pace.Load()
	for _, when := range []time.Duration{span / 2, span, 2 * span, time.Minute} {
		for _, slot := range []int32{0, 1} { // a scout and another
			at := start.Add(when).UnixNano()
			want := tp.toleranceFor(&a.cfg, slot, at)
			if got := tb.toleranceFor(&b.cfg, slot, at); math.Abs(got-want) > 1e-9*want {
				t.Errorf("r%d at %v: tolerance %.3f after the restore, want %.3f as before it", slot, when, got, want)
			}
		}
	}

	tp.mu.Lock()
	tp.holdOff = start.Add(time.Hour).UnixNano()
	tp.mu.Unlock()
	c := newTestEngine(t, Config{}, 8)
	c.RestorePace(start, a.SavePace(start))
	if got := c.target("s.com").pace.Load().holdOff; got != tp.holdOff {
		t.Errorf("hold-off %v after the restore, want %v", got, tp.holdOff)
	}

	for _, st := range []SavedTarget{
		{Target: "s.com", Tolerance: 20, Ceiling: 30, At: start.Add(-24 * time.Hour)}, // grown past PaceMax since
		{Target: "s.com", Tolerance: math.NaN(), Ceiling: 30, At: start},
		{Target: "s.com", Tolerance: 20, Ceiling: -1, At: start},
		{Target: "s.com", Tolerance: 20, Ceiling: 30},
	} {
		d := newTestEngine(t, Config{}, 2)
		d.RestorePace(start, SavedPace{Targets: []SavedTarget{st}})
		if tol := d.target("s.com").pace.Load().toleranceAt(&d.cfg, start.UnixNano()); tol != 0 {
			t.Errorf("%+v restored as a tolerance of %v, want none", st, tol)
		}
	}
}

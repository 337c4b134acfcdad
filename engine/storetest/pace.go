package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// RunPace runs the suite for stores that share learned pacing
// (engine.PaceSharer): what one store is handed reaches the others by the
// promises of that interface. newFleet returns a function opening stores
// over one backend of the subtest's own; each store it opens serves until
// the subtest ends. The suite announces routes 0..3 and targets 1..3 to
// each, by the same names.
//
// An exchange is asynchronous (SharePace never waits), so each check asks
// again, every few milliseconds, for up to 10 s.
func RunPace(t *testing.T, newFleet func(t *testing.T) func() engine.Store) {
	const width = 10 * time.Second
	bucket := t0 / int64(width)
	// announce gives s the suite's routes and targets.
	announce := func(t *testing.T, s engine.Store) engine.PaceSharer {
		t.Helper()
		for r := range int32(4) {
			s.AddRoute(r, fmt.Sprintf("route-%d", r))
		}
		for n := int32(1); n <= 3; n++ {
			s.AddTarget(n, fmt.Sprintf("target-%d.example", n))
		}
		ps, ok := s.(engine.PaceSharer)
		if !ok {
			t.Fatalf("%T does not share pacing", s)
		}
		return ps
	}
	fleet := func(t *testing.T, n int) []engine.PaceSharer {
		open := newFleet(t)
		var out []engine.PaceSharer
		for range n {
			out = append(out, announce(t, open()))
		}
		return out
	}
	// news is an exchange at t0 handing what is given.
	news := func(n engine.PaceNews) engine.PaceNews {
		n.Now, n.Window, n.Width = t0, time.Minute, width
		return n
	}
	// until hands s out (once), then nothing, until the news it returns
	// satisfy cond.
	until := func(t *testing.T, what string, s engine.PaceSharer, out engine.PaceNews, cond func(in engine.PaceNews) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for next := news(out); !cond(s.SharePace(next)); next = news(engine.PaceNews{}) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	limit := engine.PairLimit{Route: 1, Target: 2, Rate: 3, Ceiling: 5, Cut: t0, Base: 0, Epoch: t0, Since: t0 + 1, First: true}

	t.Run("a pair's limit reaches the others", func(t *testing.T) {
		s := fleet(t, 2)
		s[0].SharePace(news(engine.PaceNews{Pairs: []engine.PairLimit{limit}}))
		until(t, "the other store hears it", s[1], engine.PaceNews{}, func(in engine.PaceNews) bool {
			return slices.Contains(in.Pairs, limit)
		})
	})

	t.Run("a target's limit reaches a store opened later", func(t *testing.T) {
		open := newFleet(t)
		a, b := announce(t, open()), announce(t, open())
		tol := engine.TargetLimit{Target: 3, Tolerance: 12.5, Ceiling: 20, At: t0, HoldOff: t0 + 9}
		a.SharePace(news(engine.PaceNews{Targets: []engine.TargetLimit{tol}}))
		until(t, "the other store hears it", b, engine.PaceNews{}, func(in engine.PaceNews) bool {
			return slices.Contains(in.Targets, tol)
		})
		late := announce(t, open())
		until(t, "a store opened after hears it", late, engine.PaceNews{}, func(in engine.PaceNews) bool {
			return slices.Contains(in.Targets, tol)
		})
	})

	t.Run("concurrent limits end on the stricter everywhere", func(t *testing.T) {
		open := newFleet(t)
		a, b := announce(t, open()), announce(t, open())
		loose, strict := limit, limit
		loose.Rate, loose.Cut = 4, t0+2
		strict.Rate, strict.Cut = 2, t0+1 // older, but learned without knowing loose
		a.SharePace(news(engine.PaceNews{Pairs: []engine.PairLimit{loose}}))
		b.SharePace(news(engine.PaceNews{Pairs: []engine.PairLimit{strict}}))
		until(t, "the looser's store takes the stricter", a, engine.PaceNews{}, func(in engine.PaceNews) bool {
			return slices.Contains(in.Pairs, strict)
		})
		late := announce(t, open())
		until(t, "a store opened after hears the stricter", late, engine.PaceNews{}, func(in engine.PaceNews) bool {
			if slices.Contains(in.Pairs, loose) {
				t.Fatal("a store opened after heard the looser limit")
			}
			return slices.Contains(in.Pairs, strict)
		})
	})

	t.Run("counts sum across stores and shares count the stores", func(t *testing.T) {
		s := fleet(t, 2)
		mine := engine.PaceCount{Route: 0, Target: 1, Epoch: 7, Bucket: bucket, N: 3}
		theirs := engine.PaceCount{Route: 0, Target: 1, Epoch: 7, Bucket: bucket, N: 4}
		s[0].SharePace(news(engine.PaceNews{Sent: []engine.PaceCount{mine}}))
		s[1].SharePace(news(engine.PaceNews{Sent: []engine.PaceCount{theirs}}))
		for i, want := range []engine.PaceCount{theirs, mine} {
			until(t, "a store hears the other's count", s[i], engine.PaceNews{}, func(in engine.PaceNews) bool {
				return slices.Contains(in.Others, want) && slices.Contains(in.Shares, engine.PaceShare{Target: 1, Procs: 2}) && in.Fleet == 2
			})
		}
		// More sent: the others' count is the total, not the last batch.
		s[1].SharePace(news(engine.PaceNews{Sent: []engine.PaceCount{theirs}}))
		total := theirs
		total.N = 8
		until(t, "a store hears the other's total", s[0], engine.PaceNews{}, func(in engine.PaceNews) bool {
			return slices.Contains(in.Others, total)
		})
	})

	t.Run("wave bans and seen pairs reach the others", func(t *testing.T) {
		s := fleet(t, 2)
		ban := engine.PaceBan{Route: 2, Target: 1, At: t0, Sent: 21, Most: 17}
		seen := engine.PairSeen{Route: 2, Target: 1, Banned: t0, OK: t0 - 1}
		s[0].SharePace(news(engine.PaceNews{Bans: []engine.PaceBan{ban}, Seen: []engine.PairSeen{seen}}))
		var bans []engine.PaceBan
		var seens []engine.PairSeen
		until(t, "the other hears both", s[1], engine.PaceNews{}, func(in engine.PaceNews) bool {
			bans, seens = append(bans, in.Bans...), append(seens, in.Seen...)
			return slices.Contains(bans, ban) && slices.Contains(seens, seen)
		})
	})
}

package engine

import (
	"fmt"
	"testing"
	"time"
)

// A route that joins a pool of veterans, as after a reload, is priced as
// the pool's typical route once its check passes and its slow start is
// over: it gets its share of the traffic, and keeps it while it answers
// as well as they do. Priced at the fixed prior instead, it would get a
// small fraction of its share and lose almost every comparison.
func TestNewRouteJoiningAWarmPoolGetsItsShare(t *testing.T) {
	t.Parallel()
	for _, picker := range []Picker{PowerOfTwo{}, WeightedRandom{}} {
		t.Run(fmt.Sprintf("%T", picker), func(t *testing.T) {
			t.Parallel()
			e, err := New(Config{Seed: 9, Picker: picker}, nil)
			if err != nil {
				t.Fatal(err)
			}
			const veterans = 10
			now := start
			check := func() {
				for _, job := range e.ProbeJobs(nil) {
					if err := e.ReportProbe(now, job, Outcome{Class: OK, Latency: 5 * time.Millisecond}); err != nil {
						t.Fatal(err)
					}
				}
			}
			serve := func(n int) map[string]int {
				picks := make(map[string]int)
				for range n {
					now = now.Add(10 * time.Millisecond)
					l := mustAcquire(t, e, now, Request{Target: "site.test"})
					picks[l.Route]++
					e.Report(now, l, Outcome{Class: OK, Latency: 100 * time.Millisecond})
					if picks[l.Route]%50 == 0 {
						e.Sweep(now)
					}
				}
				return picks
			}
			for i := range veterans {
				if err := e.AddRoute(now, RouteSpec{ID: fmt.Sprintf("r%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			check()
			now = now.Add(e.Config().SlowStart)
			e.Sweep(now)
			serve(3000) // 300 answers each: veterans

			if err := e.AddRoute(now, RouteSpec{ID: "new"}); err != nil {
				t.Fatal(err)
			}
			check()
			now = now.Add(e.Config().SlowStart)
			e.Sweep(now)
			const n = 2200
			picks := serve(n)
			fair := n / (veterans + 1)
			if picks["new"] < fair/2 {
				t.Errorf("the new route got %d of %d picks, want at least half its fair share of %d (picks %v)", picks["new"], n, fair, picks)
			}
		})
	}
}

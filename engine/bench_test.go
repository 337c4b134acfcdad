package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchPool builds an engine with a realistic mix: 5% of routes cooling,
// 10% suspect, and each route with route×target records on two of the 100
// targets, a third of them cooling.
func benchPool(b *testing.B, routes int) (*Engine, []string) {
	return benchPoolTiers(b, routes, 0)
}

// benchPoolTiers is benchPool with every costlyEvery-th route on tier 1
// (0: every route on tier 0).
func benchPoolTiers(b *testing.B, routes, costlyEvery int) (*Engine, []string) {
	return benchPoolOf(b, routes, costlyEvery, true)
}

// benchPoolOf is benchPoolTiers; without limited, no site answers 429,
// and no rate holds any pair.
func benchPoolOf(b *testing.B, routes, costlyEvery int, limited bool) (*Engine, []string) {
	b.Helper()
	e, err := New(Config{UncheckedCandidates: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	targets := make([]string, 100)
	for i := range targets {
		targets[i] = fmt.Sprintf("site%d.example", i)
	}
	for i := range routes {
		id := fmt.Sprintf("r%d", i)
		spec := RouteSpec{ID: id}
		if costlyEvery > 0 && i%costlyEvery == 0 {
			spec.Tier = 1
		}
		if err := e.AddRoute(start, spec); err != nil {
			b.Fatal(err)
		}
		switch {
		case i%20 == 0:
			e.Feedback(start, id, targets[0], Outcome{Class: ProxyAuth})
		case i%10 == 1:
			for range 2 {
				e.Feedback(start, id, targets[0], Outcome{Class: ProxyTimeout})
			}
		}
		e.Feedback(start, id, targets[i%100], Outcome{Class: Blocked})
		c := Target5xx
		if limited && i%3 == 0 {
			c = RateLimited
		}
		e.Feedback(start, id, targets[(i*7+3)%100], Outcome{Class: c, RetryAfter: time.Hour})
	}
	return e, targets
}

// BenchmarkAcquireReport measures one pick and its report. The cost must
// not grow with the pool: compare routes=1000 with routes=100000.
func BenchmarkAcquireReport(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			e, targets := benchPool(b, n)
			now := start
			b.ReportAllocs()
			b.ResetTimer()
			acquireReport(b, e, targets, &now, b.N)
		})
	}
	// A pool of two cost tiers, a tenth of it costly: what tiers add.
	b.Run("routes=1000/tiers=2", func(b *testing.B) {
		e, targets := benchPoolTiers(b, 1000, 10)
		now := start
		b.ReportAllocs()
		b.ResetTimer()
		acquireReport(b, e, targets, &now, b.N)
	})
}

// benchStep is the virtual time between two picks: 10,000 picks a second,
// 100 per target, which the pool's learned pacing (a few requests a second
// per pair once a target has frozen) can carry, as a real gateway's load.
const benchStep = 100 * time.Microsecond

// acquireReport runs n picks and their reports, benchStep apart from
// *now, over targets in turn.
func acquireReport(b *testing.B, e *Engine, targets []string, now *time.Time, n int) {
	for i := range n {
		*now = now.Add(benchStep)
		l, err := e.Acquire(*now, Request{Target: targets[i%len(targets)]})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Report(*now, l, Outcome{Class: OK, Latency: 40 * time.Millisecond}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReportParallel is the same with GOMAXPROCS goroutines.
func BenchmarkAcquireReportParallel(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			e, targets := benchPool(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			var tick, busy atomic.Int64 // one virtual clock for every goroutine
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(tick.Add(1))
					now := start.Add(time.Duration(i) * benchStep)
					l, err := e.Acquire(now, Request{Target: targets[i%len(targets)]})
					switch {
					case errors.Is(err, ErrBusy), errors.Is(err, ErrPaced):
						// Two goroutines' picks reach the clock out of
						// order: now and then a frozen target's pairs are
						// all at their rate for the one that comes late
						// (ErrPaced), or the route drawn fills up before
						// its lease (ErrBusy).
						busy.Add(1)
						continue
					case err != nil:
						b.Error(err)
						return
					}
					e.Report(now, l, Outcome{Class: OK, Latency: 40 * time.Millisecond})
				}
			})
			b.ReportMetric(float64(busy.Load())/float64(b.N), "busy/op")
		})
	}
}

// BenchmarkPairMemory reports the heap held per route×target record.
func BenchmarkPairMemory(b *testing.B) {
	const routes = 1000
	e, err := New(Config{UncheckedCandidates: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, routes)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
		e.AddRoute(start, RouteSpec{ID: ids[i]})
	}
	targets := make([]string, b.N/routes+1)
	for i := range targets {
		targets[i] = fmt.Sprintf("site%d.example", i)
		e.target(targets[i]) // intern first: targets are not pairs
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range b.N {
		route, target := ids[i%routes], targets[i/routes]
		// A success after each ban makes the route's latest outcome at
		// the target a success, which is what the incident guard counts:
		// the bans of every route are not the site failing, and each
		// creates its pair record.
		e.Feedback(start, route, target, Outcome{Class: Blocked})
		e.Feedback(start, route, target, okOutcome)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	pairs := 0
	for _, id := range ids {
		st, _ := e.Route(id)
		pairs += len(st.Targets)
	}
	if pairs != b.N {
		b.Fatalf("%d pair records for %d bans", pairs, b.N)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(pairs), "B/pair")
	runtime.KeepAlive(e)
}

// BenchmarkTargetMemory reports the heap held per interned target that has
// only seen successes: a crawler meets millions of sites.
func BenchmarkTargetMemory(b *testing.B) {
	e, err := New(Config{UncheckedCandidates: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	e.AddRoute(start, RouteSpec{ID: "r0"})
	names := make([]string, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("site%d.example", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for _, name := range names {
		e.Feedback(start, "r0", name, okOutcome)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "B/target")
	runtime.KeepAlive(e)
	runtime.KeepAlive(names)
}

package engine

import (
	"testing"
	"time"
)

// TestLeaseTiming checks the deadline and hedge delay a lease carries, and
// Timing's second look at a Provisional one.
func TestLeaseTiming(t *testing.T) {
	t.Parallel()
	const site = "shop.example"
	const timeout = 30 * time.Second
	// answer has route id carry n leased requests to the site in d each.
	answer := func(e *Engine, id string, d time.Duration, n int) {
		var others []string
		for _, r := range []string{"r0", "r1", "r2"} {
			if r != id {
				others = append(others, r)
			}
		}
		for range n {
			l := mustAcquire(t, e, start, Request{Target: site, Avoid: others})
			if err := e.Report(start, l, Outcome{Class: OK, Latency: d}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		desc        string
		timeout     time.Duration
		setup       func(e *Engine)
		provisional bool
		minDeadline time.Duration
		maxDeadline time.Duration
		hedge       bool
	}{
		{desc: "no timeout, no deadline", setup: func(*Engine) {}},
		{desc: "nothing known: the timeout, to be looked at again", timeout: timeout, setup: func(*Engine) {},
			provisional: true, minDeadline: timeout, maxDeadline: timeout},
		{desc: "the pair's own times", timeout: timeout, setup: func(e *Engine) { answer(e, "r0", 200*time.Millisecond, 50) },
			minDeadline: time.Second, maxDeadline: 2 * time.Second, hedge: true},
		{desc: "the floor under fast answers", timeout: timeout, setup: func(e *Engine) { answer(e, "r0", 5*time.Millisecond, 50) },
			minDeadline: time.Second, maxDeadline: time.Second, hedge: true},
		{desc: "capped by the timeout", timeout: 2 * time.Second, setup: func(e *Engine) { answer(e, "r0", 3*time.Second, 50) },
			minDeadline: 2 * time.Second, maxDeadline: 2 * time.Second, hedge: true},
		{
			// The site's tail is the slow exit's: a route that never
			// answered gets the site's median, not that tail, so that its
			// silence is cut (and is evidence) within a client's patience.
			desc: "a route that never answered, at a site with slow exits", timeout: timeout,
			setup: func(e *Engine) {
				for range 25 {
					answer(e, "r1", 100*time.Millisecond, 1)
					answer(e, "r2", time.Second, 1)
				}
			},
			minDeadline: time.Second, maxDeadline: 1500 * time.Millisecond, hedge: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Config{}, 3)
			tt.setup(e)
			l := mustAcquire(t, e, start, Request{Target: site, Avoid: []string{"r1", "r2"}, Timeout: tt.timeout})
			if l.Provisional != tt.provisional || l.Deadline < tt.minDeadline || l.Deadline > tt.maxDeadline || (l.HedgeAfter > 0) != tt.hedge {
				t.Errorf("deadline %v, hedge after %v, provisional %v; want a deadline in [%v, %v], hedge %v, provisional %v",
					l.Deadline, l.HedgeAfter, l.Provisional, tt.minDeadline, tt.maxDeadline, tt.hedge, tt.provisional)
			}
		})
	}

	t.Run("a slow route's hedge: its own tail while known, the site's once not sampled", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 3)
		answer(e, "r0", time.Second, 20)
		answer(e, "r1", 100*time.Millisecond, 50)
		answer(e, "r2", 100*time.Millisecond, 50)
		decay := e.Config().LatencyDecay
		for _, tt := range []struct {
			at       time.Time
			min, max time.Duration
		}{
			{start, time.Second, 3 * time.Second},                                                 // known slow: not hedged on every pick
			{start.Add(decay), time.Second, 3 * time.Second},                                      // still current
			{start.Add(decay + time.Millisecond), 100 * time.Millisecond, 300 * time.Millisecond}, // a question: hedged at the site's pace
		} {
			l := mustAcquire(t, e, tt.at, Request{Target: site, Avoid: []string{"r1", "r2"}, Timeout: timeout})
			if l.HedgeAfter < tt.min || l.HedgeAfter > tt.max {
				t.Errorf("at +%v: hedge after %v, want [%v, %v]", tt.at.Sub(start), l.HedgeAfter, tt.min, tt.max)
			}
			if l.Deadline < time.Second {
				t.Errorf("at +%v: deadline %v, want the route's own (≥ 1s): a slow exit is not cut at the site's pace", tt.at.Sub(start), l.Deadline)
			}
			if err := e.Report(tt.at, l, Outcome{Class: Canceled}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a provisional lease, once the pool has answered", func(t *testing.T) {
		t.Parallel()
		e := newTestEngine(t, Config{}, 2)
		l := mustAcquire(t, e, start, Request{Target: site, Avoid: []string{"r1"}, Timeout: timeout})
		if !l.Provisional {
			t.Fatalf("lease %+v: want provisional", l)
		}
		if d, _ := e.Timing(start, l, timeout); d != timeout {
			t.Errorf("Timing before any answer: %v, want the timeout", d)
		}
		answer(e, "r1", 100*time.Millisecond, 3)
		if d, _ := e.Timing(start, l, timeout); d != time.Second {
			t.Errorf("Timing after answers: %v, want the 1s floor", d)
		}
	})
}

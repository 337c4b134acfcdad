package pacing

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a manual clock for the paths that never wait (MaxWait 0);
// the waiting paths run in a synctest bubble instead.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// same gives every target the limits l.
func same(l Limits) func(string) Limits { return func(string) Limits { return l } }

// wantPaced fails unless err is a *Error with reason and, when
// retryAfter is not negative, that RetryAfter within a millisecond.
func wantPaced(t *testing.T, err error, reason string, retryAfter time.Duration) {
	t.Helper()
	var pe *Error
	switch {
	case !errors.As(err, &pe):
		t.Fatalf("got %v, want a *Error %q", err, reason)
	case pe.Reason != reason:
		t.Fatalf("got %v, want reason %q", err, reason)
	case retryAfter >= 0 && (pe.RetryAfter-retryAfter).Abs() > time.Millisecond:
		t.Fatalf("got RetryAfter %v, want %v", pe.RetryAfter, retryAfter)
	}
}

// admit calls Admit and fails the test on an error.
func admit(t *testing.T, p *Pacer, target string) func() {
	t.Helper()
	release, err := p.Admit(context.Background(), target)
	if err != nil {
		t.Fatalf("Admit(%q): %v", target, err)
	}
	return release
}

// goAdmit calls Admit in a new goroutine; the channel gets its result.
func goAdmit(ctx context.Context, p *Pacer, target string) <-chan error {
	done := make(chan error, 1)
	go func() {
		release, err := p.Admit(ctx, target)
		if err == nil {
			release()
		}
		done <- err
	}()
	return done
}

// pending fails if done has a result already.
func pending(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Admit returned %v, want it still waiting", err)
	default:
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		l     Limits
		field string // "" means valid
	}{
		{desc: "zero"},
		{desc: "all set", l: Limits{Rate: 0.5, Burst: 2, MaxConcurrent: 4, MaxWait: time.Second, MaxQueue: 10, PairRate: 1, PairBurst: 1}},
		{desc: "negative rate", l: Limits{Rate: -1}, field: "rate"},
		{desc: "NaN rate", l: Limits{Rate: math.NaN()}, field: "rate"},
		{desc: "infinite rate", l: Limits{Rate: math.Inf(1)}, field: "rate"},
		{desc: "negative burst", l: Limits{Burst: -1}, field: "burst"},
		{desc: "negative max_concurrent", l: Limits{MaxConcurrent: -2}, field: "max_concurrent"},
		{desc: "negative max_wait", l: Limits{MaxWait: -time.Second}, field: "max_wait"},
		{desc: "negative max_queue", l: Limits{MaxQueue: -1}, field: "max_queue"},
		{desc: "negative pair_rate", l: Limits{PairRate: math.Inf(-1)}, field: "pair_rate"},
		{desc: "NaN pair_rate", l: Limits{PairRate: math.NaN()}, field: "pair_rate"},
		{desc: "negative pair_burst", l: Limits{PairBurst: -1}, field: "pair_burst"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			err := tc.l.Validate()
			var le *LimitsError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("got %v, want valid", err)
			case tc.field == "":
			case !errors.As(err, &le) || le.Field != tc.field:
				t.Fatalf("got %v, want a *LimitsError for %q", err, tc.field)
			case err.Error() != tc.field+": must be a finite number ≥ 0":
				t.Fatalf("got %q", err)
			}
		})
	}
}

// Over 10s of fake time, callers that keep asking get Rate per second plus
// the burst, spaced at least 1/Rate apart.
func TestPaceRateHonoured(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Limits: same(Limits{Rate: 5, Burst: 1, MaxWait: time.Minute})})
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(10*time.Second))
		defer cancel()
		var (
			mu       sync.Mutex
			admitted []time.Duration
			wg       sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for {
					release, err := p.Admit(ctx, "t")
					if err != nil {
						return // refused: the next token comes after the deadline
					}
					mu.Lock()
					admitted = append(admitted, time.Since(start))
					mu.Unlock()
					release()
				}
			})
		}
		wg.Wait()
		if want := 5*10 + 1; len(admitted) < want-1 || len(admitted) > want+1 {
			t.Errorf("admitted %d in 10s, want %d±1", len(admitted), want)
		}
		slices.Sort(admitted)
		for i := 1; i < len(admitted); i++ {
			if gap := admitted[i] - admitted[i-1]; gap < 200*time.Millisecond-time.Millisecond {
				t.Fatalf("admissions %d and %d only %v apart, want ≥ 200ms", i-1, i, gap)
			}
		}
	})
}

// With MaxWait 0, a request beyond the bucket is refused at once, with
// RetryAfter the time until the next token, and costs no token.
func TestPaceRateRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		l     Limits
		burst int           // admitted at once
		retry time.Duration // RetryAfter of the next
	}{
		{desc: "rate 5, burst 1", l: Limits{Rate: 5, Burst: 1}, burst: 1, retry: 200 * time.Millisecond},
		{desc: "rate 5, default burst", l: Limits{Rate: 5}, burst: 5, retry: 200 * time.Millisecond},
		{desc: "rate 0.5, default burst", l: Limits{Rate: 0.5}, burst: 1, retry: 2 * time.Second},
		{desc: "rate 2, burst 3", l: Limits{Rate: 2, Burst: 3}, burst: 3, retry: 500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			p := New(Config{Limits: same(tc.l), Now: clock.Now})
			for range tc.burst {
				admit(t, p, "t")()
			}
			for range 3 { // refusals do not push the next token further away
				_, err := p.Admit(context.Background(), "t")
				wantPaced(t, err, "rate", tc.retry)
			}
			clock.Advance(tc.retry - time.Millisecond)
			_, err := p.Admit(context.Background(), "t")
			wantPaced(t, err, "rate", time.Millisecond)
			clock.Advance(time.Millisecond)
			admit(t, p, "t")()
		})
	}
}

func TestPaceConcurrency(t *testing.T) {
	t.Parallel()
	l := Limits{MaxConcurrent: 2, MaxWait: 5 * time.Second}
	t.Run("waits for a release", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(l)})
			first, second := admit(t, p, "t"), admit(t, p, "t")
			defer second()
			start := time.Now()
			done := goAdmit(context.Background(), p, "t")
			synctest.Wait()
			pending(t, done)
			time.Sleep(time.Second)
			first()
			first() // idempotent: frees one slot, not two
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != time.Second {
				t.Errorf("admitted after %v, want 1s, at the release", d)
			}
			// The waiter has come and gone: two slots minus second's.
			release := admit(t, p, "t")
			defer release()
			_, err := p.Admit(context.Background(), "t")
			wantPaced(t, err, "concurrency", 5*time.Second)
		})
	})
	t.Run("refused after MaxWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(l)})
			defer admit(t, p, "t")()
			defer admit(t, p, "t")()
			start := time.Now()
			_, err := p.Admit(context.Background(), "t")
			wantPaced(t, err, "concurrency", 5*time.Second)
			if d := time.Since(start); d != 5*time.Second {
				t.Errorf("refused after %v, want MaxWait", d)
			}
		})
	})
	t.Run("MaxWait 0 refuses at once", func(t *testing.T) {
		t.Parallel()
		p := New(Config{Limits: same(Limits{MaxConcurrent: 1})})
		defer admit(t, p, "t")()
		_, err := p.Admit(context.Background(), "t")
		wantPaced(t, err, "concurrency", time.Second)
	})
	t.Run("never more than MaxConcurrent in flight", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{MaxConcurrent: 3, MaxWait: time.Hour})})
			var inFlight, most atomic.Int32
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					for range 10 {
						release, err := p.Admit(context.Background(), "t")
						if err != nil {
							t.Error(err)
							return
						}
						n := inFlight.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(10 * time.Millisecond)
						inFlight.Add(-1)
						release()
					}
				})
			}
			wg.Wait()
			if m := most.Load(); m != 3 {
				t.Errorf("at most %d in flight, want 3", m)
			}
		})
	})
}

// Beyond MaxQueue waiting (for a slot or a token), a request is refused at
// once.
func TestPaceQueueBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		l    Limits
	}{
		{desc: "waiting for a slot", l: Limits{MaxConcurrent: 1, MaxQueue: 3, MaxWait: time.Minute}},
		{desc: "waiting for a token", l: Limits{Rate: 0.1, Burst: 1, MaxQueue: 3, MaxWait: time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p := New(Config{Limits: same(tc.l)})
				release := admit(t, p, "t")
				var waiters []<-chan error
				for range 3 {
					waiters = append(waiters, goAdmit(context.Background(), p, "t"))
				}
				synctest.Wait()
				start := time.Now()
				_, err := p.Admit(context.Background(), "t")
				wantPaced(t, err, "queue_full", time.Minute)
				if time.Since(start) != 0 {
					t.Errorf("queue_full after %v, want at once", time.Since(start))
				}
				release()
				for _, w := range waiters {
					if err := <-w; err != nil {
						t.Errorf("waiter: %v", err)
					}
				}
			})
		})
	}
}

// A cancelled wait returns ctx.Err() and gives back its queue place, its
// slot and its token.
func TestPaceCancel(t *testing.T) {
	t.Parallel()
	t.Run("waiting for a slot", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{MaxConcurrent: 1, MaxQueue: 1, MaxWait: time.Minute})})
			release := admit(t, p, "t")
			ctx, cancel := context.WithCancel(context.Background())
			done := goAdmit(ctx, p, "t")
			synctest.Wait()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			p.mu.Lock()
			tgt, _ := p.targets.get("t")
			waiting, queued := tgt.waiting, tgt.slotQ.Len()
			p.mu.Unlock()
			if waiting != 0 || queued != 0 {
				t.Fatalf("%d waiting, %d queued after cancel, want none", waiting, queued)
			}
			done = goAdmit(context.Background(), p, "t") // the queue place is free
			synctest.Wait()
			release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			admit(t, p, "t")() // and so is the slot
		})
	})
	t.Run("granted a slot as it is cancelled", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{MaxConcurrent: 1, MaxWait: time.Minute})})
			release := admit(t, p, "t")
			ctx, cancel := context.WithCancel(context.Background())
			done := goAdmit(ctx, p, "t")
			synctest.Wait()
			release() // hands the slot to the waiter,
			cancel()  // which wakes cancelled and must hand it back
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			_, err := p.Admit(context.Background(), "t")
			if err != nil {
				t.Fatalf("slot not given back: %v", err)
			}
		})
	})
	t.Run("waiting for a token", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{Rate: 1, Burst: 1, MaxConcurrent: 1, MaxWait: time.Minute})})
			admit(t, p, "t")()
			start := time.Now()
			ctx, cancel := context.WithCancel(context.Background())
			done := goAdmit(ctx, p, "t") // holds the slot, waits for the 1s token
			time.Sleep(500 * time.Millisecond)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			// The slot is free and the token is back: the next request gets
			// the token due at 1s, not the one at 2s.
			admit(t, p, "t")()
			if d := time.Since(start); d != time.Second {
				t.Errorf("admitted after %v, want 1s", d)
			}
		})
	})
	t.Run("token would come after the deadline", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{Rate: 1, Burst: 1, MaxWait: time.Minute})})
			admit(t, p, "t")()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := p.Admit(ctx, "t")
			wantPaced(t, err, "rate", time.Second)
			if time.Since(start) != 0 {
				t.Errorf("refused after %v, want at once", time.Since(start))
			}
		})
	})
}

// Update reaches existing entries on their next use, without disturbing
// requests in flight.
func TestPaceUpdate(t *testing.T) {
	t.Parallel()
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		p := New(Config{Limits: same(Limits{Rate: 1, Burst: 1}), Now: clock.Now})
		admit(t, p, "t")()
		_, err := p.Admit(context.Background(), "t")
		wantPaced(t, err, "rate", time.Second)
		p.Update(same(Limits{Rate: 10, Burst: 1}))
		_, err = p.Admit(context.Background(), "t")
		wantPaced(t, err, "rate", 100*time.Millisecond)
		clock.Advance(100 * time.Millisecond)
		admit(t, p, "t")()
	})
	t.Run("concurrency", func(t *testing.T) {
		t.Parallel()
		p := New(Config{Limits: same(Limits{MaxConcurrent: 2})})
		a, b := admit(t, p, "t"), admit(t, p, "t")
		p.Update(same(Limits{MaxConcurrent: 1}))
		_, err := p.Admit(context.Background(), "t")
		wantPaced(t, err, "concurrency", time.Second)
		a()
		_, err = p.Admit(context.Background(), "t") // b is still in flight
		wantPaced(t, err, "concurrency", time.Second)
		b()
		release := admit(t, p, "t")
		p.Update(same(Limits{MaxConcurrent: 3}))
		defer admit(t, p, "t")()
		defer admit(t, p, "t")()
		release()
	})
	t.Run("raised bound admits waiters", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{MaxConcurrent: 1, MaxWait: time.Minute})})
			release := admit(t, p, "t")
			defer release()
			done := goAdmit(context.Background(), p, "t")
			synctest.Wait()
			p.Update(same(Limits{MaxConcurrent: 3, MaxWait: time.Minute}))
			admit(t, p, "t")() // the refresh grants the waiter a slot too
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("to no limits", func(t *testing.T) {
		t.Parallel()
		p := New(Config{Limits: same(Limits{MaxConcurrent: 1})})
		admit(t, p, "idle")()
		busy := admit(t, p, "busy")
		p.Update(nil)
		admit(t, p, "idle")()
		admit(t, p, "busy")() // no longer bounded
		busy()
		p.mu.Lock()
		_, idleKept := p.targets.get("idle")
		p.mu.Unlock()
		if idleKept {
			t.Error("an idle entry without limits is kept")
		}
	})
}

// A target without limits gets no entry and costs no allocation.
func TestPaceUnlimited(t *testing.T) {
	limits := func(target string) Limits {
		if target == "paced" {
			return Limits{Rate: 1}
		}
		return Limits{}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		desc string
		p    *Pacer
	}{
		{desc: "no limits function", p: New(Config{})},
		{desc: "zero limits", p: New(Config{Limits: limits})},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				release, err := tc.p.Admit(ctx, "free")
				if err != nil {
					t.Fatal(err)
				}
				release()
				if err := tc.p.Pair(ctx, "r1", "free"); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per Admit and Pair, want 0", allocs)
			}
			if n, m := len(tc.p.targets.index), len(tc.p.pairs.index); n != 0 || m != 0 {
				t.Errorf("%d targets, %d pairs kept, want none", n, m)
			}
		})
	}
}

// The LRU keeps at most MaxTargets idle entries, and never drops a busy one.
func TestPaceLRU(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	p := New(Config{
		Limits:     same(Limits{Rate: 1, Burst: 1, MaxConcurrent: 1, PairRate: 1}),
		MaxTargets: 3,
		Now:        clock.Now,
	})
	sizes := func() (targets, pairs int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.targets.index), p.pairs.order.Len()
	}
	for i := range 10 {
		admit(t, p, fmt.Sprint("idle", i))()
		if err := p.Pair(context.Background(), fmt.Sprint("r", i), "idle0"); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := sizes(); n != 3 || m != 3 {
		t.Fatalf("%d targets, %d pairs kept, want 3 each", n, m)
	}
	var releases []func()
	for i := range 4 {
		releases = append(releases, admit(t, p, fmt.Sprint("busy", i)))
	}
	for i := range 10 {
		admit(t, p, fmt.Sprint("more", i))()
	}
	if n, _ := sizes(); n != 5 {
		t.Errorf("%d targets kept with 4 busy, want 5: the busy ones and the newest", n)
	}
	for i := range 4 { // kept, with their state: bucket empty, slot taken
		_, err := p.Admit(context.Background(), fmt.Sprint("busy", i))
		wantPaced(t, err, "concurrency", time.Second)
	}
	for _, release := range releases {
		release()
	}
	admit(t, p, "last")()
	if n, _ := sizes(); n != 3 {
		t.Errorf("%d targets kept once idle, want 3", n)
	}
}

// Pair refuses at once when the route×target token is further off than
// MaxWait, without taking it, and waits for it otherwise.
func TestPacePair(t *testing.T) {
	t.Parallel()
	t.Run("MaxWait 0", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		p := New(Config{Limits: same(Limits{PairRate: 1}), Now: clock.Now})
		ctx := context.Background()
		if err := p.Pair(ctx, "r1", "t"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			err := p.Pair(ctx, "r1", "t")
			wantPaced(t, err, "politeness", time.Second)
			if pe := err.(*Error); pe.Route != "r1" || pe.Target != "t" {
				t.Errorf("got %+v, want route r1, target t", pe)
			}
		}
		if err := p.Pair(ctx, "r2", "t"); err != nil {
			t.Errorf("another route: %v", err)
		}
		if err := p.Pair(ctx, "r1", "u"); err != nil {
			t.Errorf("another target: %v", err)
		}
		// Admit is not paced by PairRate.
		admit(t, p, "t")()
		admit(t, p, "t")()
		clock.Advance(time.Second) // the refusals took no token
		if err := p.Pair(ctx, "r1", "t"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("waits up to MaxWait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{PairRate: 1, MaxWait: 2 * time.Second})})
			ctx := context.Background()
			start := time.Now()
			for i := range 3 {
				if err := p.Pair(ctx, "r1", "t"); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d != time.Duration(i)*time.Second {
					t.Errorf("token %d after %v, want %ds", i, d, i)
				}
			}
			// Two waiters take the tokens at 3s and 4s; a third would wait 3s.
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if err := p.Pair(ctx, "r1", "t"); err != nil {
						t.Error(err)
					}
				})
			}
			synctest.Wait()
			err := p.Pair(ctx, "r1", "t")
			wantPaced(t, err, "politeness", 3*time.Second)
			wg.Wait()
			if d := time.Since(start); d != 4*time.Second {
				t.Errorf("waiters done after %v, want 4s", d)
			}
		})
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			p := New(Config{Limits: same(Limits{PairRate: 1, MaxWait: 2 * time.Second})})
			if err := p.Pair(context.Background(), "r1", "t"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Pair(ctx, "r1", "t") }()
			time.Sleep(500 * time.Millisecond)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			start := time.Now()
			if err := p.Pair(context.Background(), "r1", "t"); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != 500*time.Millisecond {
				t.Errorf("token after %v, want 500ms: the cancelled one is back", d)
			}
		})
	})
}

func TestPaceErrorText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{Target: "example.com:443", Reason: "rate", RetryAfter: 200 * time.Millisecond}, "paced: rate example.com:443, retry after 200ms"},
		{&Error{Target: "example.com:443", Route: "r1", Reason: "politeness", RetryAfter: time.Second}, "paced: politeness example.com:443 via r1, retry after 1s"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

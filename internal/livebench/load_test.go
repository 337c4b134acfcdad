package livebench

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// shortLoad is a load of a few workers for a fraction of a second over
// testSites, for tests.
func shortLoad(d time.Duration) load {
	l := newLoad(Options{Duration: d, Workers: 4, Timeout: 200 * time.Millisecond}.withDefaults())
	l.mix = []siteWeight{{"shop.test", 1}, {"news.test", 1}}
	return l
}

func TestLoadStopsByItselfAndCountsWhatItSaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc          string
		shapes        []Shape
		wantCompleted bool
		wantFailed    bool
		wantOutcome   string // an outcome the attempts must include
	}{
		{"healthy exits complete every task", []Shape{fast(), fast()}, true, false, outcomeOK},
		{"a captcha page is not a completed task", []Shape{fast().on("shop.test", captcha).on("news.test", captcha)}, false, true, outcomeCaptcha},
		{"a ban is retried then fails", []Shape{fast().on("shop.test", banned).on("news.test", banned)}, false, true, "http 403"},
		{"a blackhole times out", []Shape{blackholed()}, false, true, outcomeTimeout},
		{"a dead exit is refused", []Shape{dead()}, false, true, outcomeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			f := testFleet(t, tt.shapes...)
			clients := directClients(f, 4)
			defer closeClients(clients...)
			const d = 700 * time.Millisecond
			start := time.Now()
			res := shortLoad(d).run(t.Context(), &roundRobin{clients: clients})
			// The load ends at its duration: attempts in flight are cut then.
			if took := time.Since(start); took > d+3*time.Second {
				t.Fatalf("the load took %v for a duration of %v", took, d)
			}
			if (res.completed > 0) != tt.wantCompleted || (res.failed > 0) != tt.wantFailed {
				t.Fatalf("completed %d, failed %d; want completed %v, failed %v (outcomes %v)",
					res.completed, res.failed, tt.wantCompleted, tt.wantFailed, res.outcomes)
			}
			if res.outcomes[tt.wantOutcome].count == 0 {
				t.Fatalf("no %q attempt among %v", tt.wantOutcome, res.outcomes)
			}
			if got := len(res.latencies); got != res.completed+res.failed {
				t.Fatalf("%d latencies for %d finished tasks", got, res.completed+res.failed)
			}
			if res.failed > 0 && res.attempts < 3*res.failed {
				t.Fatalf("%d attempts for %d failed tasks: a failed task makes 3", res.attempts, res.failed)
			}
		})
	}
}

func TestLoadOracleCompletesOnAMixedFleet(t *testing.T) {
	t.Parallel()
	f := testFleet(t, dead(), blackholed(), fast().on("shop.test", banned), fast().on("news.test", captcha), fast())
	clients := directClients(f, 4)
	defer closeClients(clients...)
	res := shortLoad(500*time.Millisecond).run(t.Context(), newOracle(f.world, clients, 4, 1))
	if res.failed > 0 || res.completed == 0 {
		t.Fatalf("the oracle: completed %d, failed %d, attempts %d (%v)", res.completed, res.failed, res.attempts, res.outcomes)
	}
	// On a loaded machine a fast exit may answer after the client's
	// 200 ms: that timeout is the machine's, and retried. Any other
	// failure, or a request to the blackhole, is the oracle's mistake.
	for outcome := range res.outcomes {
		if outcome != outcomeOK && outcome != outcomeTimeout {
			t.Errorf("the oracle tried an exit that fails: %v", res.outcomes)
		}
	}
	if n := f.exits[1].requests.Load(); n > 0 {
		t.Errorf("the oracle sent %d requests to the blackholed exit", n)
	}
}

func TestSiteMixFollowsTheWeights(t *testing.T) {
	t.Parallel()
	l := load{mix: []siteWeight{{"a.test", 3}, {"b.test", 1}}}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for range 4000 {
		counts[l.site(rng)]++
	}
	if a := counts["a.test"]; a < 2800 || a > 3200 {
		t.Fatalf("a.test drawn %d of 4000, want about 3000 (%v)", a, counts)
	}
}

// lateContext is a run's context past its deadline whose timer has not
// fired yet, as a loaded machine shows it to a worker for a while.
type lateContext struct {
	context.Context
	end time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.end, true }

// countingRouter routes every attempt to a client whose transport counts
// the requests it is asked to send and answers each 200.
type countingRouter struct{ sent atomic.Int64 }

func (r *countingRouter) route(ctx context.Context, _ string, _ []int) (*http.Client, int, error) {
	return &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		r.sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}, 0, ctx.Err()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNoAttemptPastTheEnd: once the run's deadline has passed, a task
// sends nothing, though the context has not noticed yet; such requests
// reached the exits uncounted by the load (TestRunPoolInRounds, under the
// race detector: the oracle's exits counted 26 requests for its 17
// attempts, more than one cut per worker per round allows).
func TestNoAttemptPastTheEnd(t *testing.T) {
	t.Parallel()
	ctx := lateContext{Context: t.Context(), end: time.Now().Add(-time.Millisecond)}
	r := &countingRouter{}
	var res loadResult
	shortLoad(time.Second).task(ctx, r, rand.New(rand.NewPCG(1, 2)), &res)
	if n := r.sent.Load(); n != 0 || res.attempts != 0 || res.cut != 1 {
		t.Fatalf("past the end: %d requests sent, %d attempts, %d cut; want 0, 0, 1", n, res.attempts, res.cut)
	}
}

package redisstore

// Benchmarks for the targets: at least 20,000 acquire+report/s per
// process with the Redis store, and a propagation p99 of at most 100 ms on
// loopback. The memory store runs in the same benchmark so the two read
// side by side:
//
//	go test -run '^$' -bench . -benchtime 3s ./engine/redisstore/

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

const (
	benchRoutes  = 100
	benchTargets = 20
	// benchLimited: every benchLimited-th route has max_inflight, so a
	// quarter of the leases take the Redis lease script and its release.
	benchLimited     = 4
	benchMaxInflight = 64
	// benchChildRun is how long each child process of the two-process
	// benchmark runs, whatever -benchtime says.
	benchChildRun     = 3 * time.Second
	benchChildWorkers = 16
)

// benchEngine is an engine over store with the benchmark's routes, and
// the names of its targets. Every route×target pair already has its
// record, as after a minute of the benchmark's traffic (its failures create
// them, and they live for PairTTL): the run is at its steady state from
// the first op, and an OK costs the same whatever b.N.
func benchEngine(tb testing.TB, store engine.Store) (*engine.Engine, []string) {
	tb.Helper()
	// Unchecked candidates, as the engine's own benchmarks: nothing runs
	// the probe jobs here, and with checks the only route the picks could
	// take was the one whose outcomes announced the targets.
	e, err := engine.New(engine.Config{UncheckedCandidates: true}, store)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	ids := make([]string, benchRoutes)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
		spec := engine.RouteSpec{ID: ids[i]}
		if i%benchLimited == 0 {
			spec.MaxInflight = benchMaxInflight
		}
		if err := e.AddRoute(now, spec); err != nil {
			tb.Fatal(err)
		}
	}
	targets := make([]string, benchTargets)
	for i := range targets {
		targets[i] = fmt.Sprintf("site%d.example", i)
	}
	sorted := slices.Sorted(slices.Values(targets))
	// Create the pair records as a session's first lease does (engine
	// Acquire: an OpTouch whose Change it does not follow): failures would
	// create them too, but would open incidents. Slots and target numbers
	// are the engine's by order of announcement; the check below proves
	// every route got its own records.
	cfg := e.Config()
	for _, target := range targets {
		if err := e.Feedback(now, ids[0], target, engine.Outcome{Class: engine.OK}); err != nil { // announces the target
			tb.Fatal(err)
		}
	}
	for slot := range int32(benchRoutes) {
		for n := range int32(benchTargets) {
			store.Update(&cfg, engine.Key{Route: slot, Target: n + 1}, engine.Op{Kind: engine.OpTouch, Create: true}, now.UnixNano())
		}
	}
	for _, id := range ids {
		st, _ := e.Route(id)
		got := make([]string, 0, len(st.Targets))
		for _, p := range st.Targets {
			got = append(got, p.Target)
		}
		if slices.Sort(got); !slices.Equal(got, sorted) {
			tb.Fatalf("route %s has pair records for %v after warming, want %v", id, got, sorted)
		}
	}
	return e, targets
}

// benchOutcome is the outcome op i reports: mostly successes, 2% proxy
// timeouts (the route's global record) and 2% target 5xx (the
// route×target pair). A multiplicative hash spreads the failures over the
// targets, which go by i in turn. Not bans, which would make the run
// depend on tolerance learning: at this benchmark's hundreds of requests
// a second a site, random bans land on the exits that sent the most, and
// until a wave's bans had to agree on a count they taught each site a
// tolerance that paced the run into failing (docs/design/005-cost.md).
// This benchmark measures the store.
func benchOutcome(i uint64) engine.Outcome {
	switch (i * 0x9E3779B97F4A7C15 >> 32) % 50 {
	case 0:
		return engine.Outcome{Class: engine.ProxyTimeout}
	case 1:
		return engine.Outcome{Class: engine.Target5xx}
	}
	return engine.Outcome{Class: engine.OK, Latency: 40 * time.Millisecond}
}

// drive runs acquire+report of req on e from workers goroutines, op i for
// every i that more accepts, until the first error; op i's target is one of
// targets in turn. It returns the ops done. Times are the wall clock, as in
// a gateway.
func drive(e *engine.Engine, req engine.Request, targets []string, workers int, more func(i uint64) bool) (uint64, error) {
	var next, done atomic.Uint64
	var failed atomic.Bool
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			req := req
			for i := next.Add(1) - 1; !failed.Load() && more(i); i = next.Add(1) - 1 {
				req.Target = targets[i%uint64(len(targets))]
				l, err := e.Acquire(time.Now(), req)
				if err == nil {
					err = e.Report(time.Now(), l, benchOutcome(i))
				}
				if err != nil {
					failed.Store(true)
					errs <- err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return done.Load(), <-errs
}

// roundTrips is a go-redis hook counting the calls a client makes: one per
// command (a script that must be loaded first costs two) and one per
// pipeline.
type roundTrips struct{ n atomic.Uint64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// countingStore is newStore with a round-trip counter on its client, and
// the production Options: a call slower than the default Timeout degrades
// the store, and checkShared then fails the benchmark. The hook goes on
// before Run: adding it to a client in use would race.
func countingStore(tb testing.TB, addr, prefix string) (*Store, *roundTrips) {
	tb.Helper()
	s, err := Open("redis://"+addr+"/0", Options{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	rt := new(roundTrips)
	s.rdb.AddHook(rt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	<-s.Ready()
	tb.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return s, rt
}

// checkShared fails the benchmark if s fell back to its local model during
// the run: its figures would not be the Redis store's.
func checkShared(tb testing.TB, s *Store) {
	tb.Helper()
	if st := s.Stats(); st.Degraded || st.Errors > 0 {
		tb.Fatalf("the store lost Redis during the run (%d failed calls, %d outages): not a Redis figure", st.Errors, st.Outages)
	}
}

// BenchmarkAcquireReport measures one Acquire and its Report, the hot path
// of every attempt, at 1, 4 and 16 concurrent workers in one process, on
// the memory store and on the Redis store. ns/op is wall time per op
// across the workers, so ops/s is its inverse; rtt/op counts the Redis
// store's round trips.
func BenchmarkAcquireReport(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		b.Run("store="+store, func(b *testing.B) {
			for _, workers := range []int{1, 4, 16} {
				b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
					var s *Store
					var rt *roundTrips
					var e *engine.Engine
					var targets []string
					if store == "redis" {
						addr := redisAddr(b)
						s, rt = countingStore(b, addr, testPrefix(b, addr))
						e, targets = benchEngine(b, s)
					} else {
						e, targets = benchEngine(b, engine.NewMemoryStore())
					}
					b.ReportAllocs()
					b.ResetTimer()
					var before uint64
					if rt != nil {
						before = rt.n.Load()
					}
					n := uint64(b.N)
					if _, err := drive(e, engine.Request{}, targets, workers, func(i uint64) bool { return i < n }); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
					if s != nil {
						b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "rtt/op")
						checkShared(b, s)
					}
				})
			}
		})
	}
}

// benchChild is what a child process of the two-process benchmark
// reports.
type benchChild struct {
	Ops       uint64  `json:"ops"`
	Seconds   float64 `json:"seconds"`
	Trips     uint64  `json:"round_trips"`
	Conflicts uint64  `json:"conflicts"`
}

// BenchmarkAcquireReportTwoProcesses runs two gateway processes (children
// of this test binary) against one prefix, each doing acquire+report with
// 16 workers for benchChildRun, started together once both are set up,
// and reports their total and their mean per process. ns/op is set to
// wall time per op of the pair, the inverse of the total.
func BenchmarkAcquireReportTwoProcesses(b *testing.B) {
	addr := redisAddr(b)
	prefix := testPrefix(b, addr)
	var ops, trips, conflicts uint64
	var total float64
	rounds := 0
	for b.Loop() {
		results, err := runBenchChildren(addr, prefix, 2)
		if err != nil {
			b.Fatal(err)
		}
		rounds++
		for _, r := range results {
			total += float64(r.Ops) / r.Seconds
			ops += r.Ops
			trips += r.Trips
			conflicts += r.Conflicts
		}
	}
	total /= float64(rounds)
	b.ReportMetric(total, "ops/s")
	b.ReportMetric(total/2, "ops/s/proc")
	b.ReportMetric(1e9/total, "ns/op")
	b.ReportMetric(float64(trips)/float64(ops), "rtt/op")
	b.ReportMetric(float64(conflicts)/float64(ops), "conflicts/op")
}

// runBenchChildren runs n children of TestBenchChildProcess: each sets up,
// says "ready" and waits; once all are ready they are told to go, so their
// runs overlap whole. Everything is bounded by benchChildRun and a margin
// for startup and shutdown.
func runBenchChildren(addr, prefix string, n int) ([]benchChild, error) {
	ctx, cancel := context.WithTimeout(context.Background(), benchChildRun+30*time.Second)
	defer cancel()
	type child struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Scanner
		// what it printed: stdout as read here; stderr, copied by exec,
		// only once Wait returned
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, n)
	defer func() {
		cancel() // kills those still running after a failure
		for _, c := range children {
			if c != nil {
				c.cmd.Wait()
			}
		}
	}()
	for i := range children {
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBenchChildProcess$")}
		c.cmd.Env = append(os.Environ(), "SWITCHYARD_TEST_REDIS="+addr, "REDISSTORE_PREFIX="+prefix, "REDISSTORE_BENCH_CHILD=1")
		c.cmd.Stderr = &c.stderr
		in, err := c.cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := c.cmd.Start(); err != nil {
			return nil, err
		}
		c.in, c.out, children[i] = in, bufio.NewScanner(out), c
	}
	// next returns c's next line on stdout, or the error it ended with.
	next := func(c *child) (string, error) {
		if c.out.Scan() {
			c.stdout.Write(c.out.Bytes())
			c.stdout.WriteByte('\n')
			return c.out.Text(), nil
		}
		err := c.cmd.Wait()
		return "", fmt.Errorf("bench child ended early: %v\n%s%s", err, c.stdout.Bytes(), c.stderr.Bytes())
	}
	for _, c := range children {
		for line := ""; line != "ready"; {
			var err error
			if line, err = next(c); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.in, "go\n"); err != nil {
			return nil, err
		}
	}
	results := make([]benchChild, n)
	for i, c := range children {
		for results[i].Seconds == 0 {
			line, err := next(c)
			if err != nil {
				return nil, err
			}
			json.Unmarshal([]byte(line), &results[i]) // other lines are the test framework's
		}
	}
	return results, nil
}

// TestBenchChildProcess is a child's body in
// BenchmarkAcquireReportTwoProcesses: it runs only when started with
// REDISSTORE_BENCH_CHILD set, and starts its run when told "go" on stdin.
func TestBenchChildProcess(t *testing.T) {
	if os.Getenv("REDISSTORE_BENCH_CHILD") == "" {
		t.Skip("run by BenchmarkAcquireReportTwoProcesses as another process")
	}
	s, rt := countingStore(t, os.Getenv("SWITCHYARD_TEST_REDIS"), os.Getenv("REDISSTORE_PREFIX"))
	e, targets := benchEngine(t, s)
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("waiting for the start: %v", err)
	}
	began, trips, conflicts := time.Now(), rt.n.Load(), s.Stats().Conflicts
	deadline := began.Add(benchChildRun)
	ops, err := drive(e, engine.Request{}, targets, benchChildWorkers, func(uint64) bool { return time.Now().Before(deadline) })
	elapsed := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	checkShared(t, s)
	out, _ := json.Marshal(benchChild{
		Ops: ops, Seconds: elapsed.Seconds(), Trips: rt.n.Load() - trips,
		Conflicts: s.Stats().Conflicts - conflicts,
	})
	fmt.Println(string(out))
}

// BenchmarkPropagation measures how long a change made through one
// gateway takes to reach another: engine A ejects, then restores, a route
// kept out of the load, and each sample is the time from the start of A's
// call until engine B publishes the same state change, so it includes A's
// write. A and B are two stores in this process, each with its own client
// and subscription, so every change crosses Redis pub/sub as between two
// processes. With load>0, both engines also run acquire+report with that
// many workers each, so B's subscription carries A's traffic too.
func BenchmarkPropagation(b *testing.B) {
	for _, load := range []int{0, 8} {
		b.Run(fmt.Sprintf("load=%d", load), func(b *testing.B) {
			addr := redisAddr(b)
			prefix := testPrefix(b, addr)
			const watched = "watched"
			var stores [2]*Store
			var engines [2]*engine.Engine
			var targets []string
			for i := range stores {
				stores[i], _ = countingStore(b, addr, prefix)
				engines[i], targets = benchEngine(b, stores[i])
				if err := engines[i].AddRoute(time.Now(), engine.RouteSpec{ID: watched}); err != nil {
					b.Fatal(err)
				}
			}
			a, bb := engines[0], engines[1]
			sub := bb.Subscribe(4096, engine.EventState)
			defer sub.Close()

			stop := make(chan struct{})
			var bg sync.WaitGroup
			bgErrs := make([]error, len(engines))
			// Stopped before the stores close, even when a sample fails.
			stopLoad := sync.OnceFunc(func() { close(stop); bg.Wait() })
			defer stopLoad()
			if load > 0 {
				req := engine.Request{Avoid: []string{watched}}
				running := func(uint64) bool {
					select {
					case <-stop:
						return false
					default:
						return true
					}
				}
				for i, e := range engines {
					bg.Go(func() { _, bgErrs[i] = drive(e, req, targets, load, running) })
				}
			}

			var samples []time.Duration
			var events []engine.Event
			eject := true
			for b.Loop() {
				events = sub.Poll(events[:0]) // B's own changes and older remote ones
				want, change := engine.Ejected, a.Eject
				if !eject {
					want, change = engine.Healthy, a.Restore
				}
				eject = !eject
				began := time.Now()
				if err := change(began, watched); err != nil {
					b.Fatal(err)
				}
				if err := awaitState(sub, watched, want, time.Second); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(began))
			}
			stopLoad()
			if err := errors.Join(bgErrs...); err != nil {
				b.Fatal(err)
			}
			if sub.Dropped() > 0 {
				b.Logf("B's subscription dropped %d events", sub.Dropped())
			}
			for _, s := range stores {
				checkShared(b, s)
			}
			slices.Sort(samples)
			b.ReportMetric(ms(percentile(samples, 0.50)), "ms-p50")
			b.ReportMetric(ms(percentile(samples, 0.99)), "ms-p99")
			b.ReportMetric(ms(samples[len(samples)-1]), "ms-max")
		})
	}
}

// awaitState waits up to limit for a state event taking route to want.
func awaitState(sub *engine.Subscription, route string, want engine.State, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return fmt.Errorf("B did not see %s become %v within %v: %w", route, want, limit, err)
		}
		if ev.Route == route && ev.Target == "" && ev.To == want {
			return nil
		}
	}
}

// percentile is the nearest-rank q-quantile of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

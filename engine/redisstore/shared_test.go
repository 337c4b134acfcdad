package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()

// pair is two stores over one prefix: two processes' views of one pool.
func pair(t *testing.T) (a, b *Store, addr, prefix string) {
	t.Helper()
	addr = redisAddr(t)
	prefix = testPrefix(t, addr)
	a, b = newStore(t, addr, prefix, Options{}), newStore(t, addr, prefix, Options{})
	for _, s := range []*Store{a, b} {
		s.AddRoute(0, "r0")
		s.AddRoute(1, "r1")
		s.AddTarget(1, "example.com")
	}
	return a, b, addr, prefix
}

// sharedRecord reads a record straight from Redis.
func sharedRecord(t *testing.T, addr, key string) (engine.Health, int64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	vals, err := c.HMGet(context.Background(), key, "v", "h").Result()
	if err != nil || vals[0] == nil {
		t.Fatalf("record %s: %v %v", key, vals, err)
	}
	ver, _ := parseVersion(vals[0])
	var h engine.Health
	if err := h.UnmarshalBinary([]byte(vals[1].(string))); err != nil {
		t.Fatal(err)
	}
	return h, ver
}

// Reports through both stores at once: no update is lost, and each
// threshold fires exactly once between them.
func TestSharedUpdatesAreAtomic(t *testing.T) {
	a, b, addr, prefix := pair(t)
	cfg := engine.DefaultConfig()
	cfg.MaxRemovedShare = -1
	const perWorker, workers = 20, 8
	var suspect, cooling atomic.Int32
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perWorker {
					op := engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyTimeout}}
					ch, _ := s.Update(&cfg, engine.Key{Route: 0}, op, t0)
					switch {
					case ch.Changed() && ch.To == engine.Suspect:
						suspect.Add(1)
					case ch.Changed() && ch.To == engine.Cooling:
						cooling.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	h, _ := sharedRecord(t, addr, prefix+":{r0}:g")
	if want := uint32(2 * workers * perWorker); h.Samples != want {
		t.Errorf("shared record has %d samples, want %d: updates were lost", h.Samples, want)
	}
	if suspect.Load() != 1 || cooling.Load() != 1 {
		t.Errorf("%d transitions to suspect and %d to cooling, want exactly one each", suspect.Load(), cooling.Load())
	}
	if c := a.Stats().Conflicts + b.Stats().Conflicts; c == 0 {
		t.Log("no compare-and-set conflicts: the two stores never raced")
	}
}

// When a cooldown ends, both processes try the wake; exactly one gets the
// probe job.
func TestSharedWakeOnce(t *testing.T) {
	a, b, _, _ := pair(t)
	cfg := engine.DefaultConfig()
	ch, _ := a.Update(&cfg, engine.Key{Route: 1}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyAuth}}, t0)
	if ch.To != engine.Cooling {
		t.Fatalf("407 left %v", ch.To)
	}
	waitFor(t, "b sees the cooling", func() bool { h, _ := b.Read(engine.Key{Route: 1}); return h.State == engine.Cooling })
	var probes atomic.Int32
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b, a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := engine.Op{Kind: engine.OpWake, Gen: ch.Gen, CheckGen: true}
			if w, _ := s.Update(&cfg, engine.Key{Route: 1}, op, ch.Until); w.Probe {
				probes.Add(1)
			}
		}()
	}
	wg.Wait()
	if probes.Load() != 1 {
		t.Fatalf("%d wakers issued a probe job, want exactly 1", probes.Load())
	}
}

// A pair created by one process reaches the other, and so does an
// incident flag.
func TestSharedPairsAndIncidents(t *testing.T) {
	a, b, _, _ := pair(t)
	cfg := engine.DefaultConfig()
	op := engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.Blocked}, Create: true}
	a.Update(&cfg, engine.Key{Route: 0, Target: 1}, op, t0)
	waitFor(t, "b sees the pair", func() bool { h, ok := b.Read(engine.Key{Route: 0, Target: 1}); return ok && h.ConsecFail == 1 })
	if !a.SetIncident(1, engine.Target5xx, true) || b.SetIncident(1, engine.Target5xx, true) {
		t.Fatal("the incident flag did not open exactly once")
	}
	waitFor(t, "b sees the incident", func() bool { c, ok := b.Incident(1); return ok && c == engine.Target5xx })
	if !b.SetIncident(1, engine.Target5xx, false) {
		t.Fatal("b could not close the incident")
	}
	waitFor(t, "a sees it closed", func() bool { _, ok := a.Incident(1); return !ok })

	// A target b meets after a wrote its pair: the pair waits for it.
	a.AddTarget(2, "late.example")
	a.Update(&cfg, engine.Key{Route: 1, Target: 2}, op, t0)
	time.Sleep(50 * time.Millisecond) // let b receive it before it knows the target
	b.AddTarget(2, "late.example")
	waitFor(t, "b takes the waiting pair", func() bool { _, ok := b.Read(engine.Key{Route: 1, Target: 2}); return ok })
}

// Sessions bound through one process are found by the other.
func TestSharedSessions(t *testing.T) {
	a, b, _, _ := pair(t)
	now := time.Now().UnixNano()
	a.Bind("crawl-7", 1, now+int64(time.Minute))
	if r, ok := b.Session("crawl-7", now); !ok || r != 1 {
		t.Fatalf("b found session → %d, %v", r, ok)
	}
	if _, ok := b.Session("crawl-8", now); ok {
		t.Fatal("an unknown session was found")
	}
}

// max_inflight holds across processes: two stores in this process, and
// two child processes.
func TestSharedMaxInflight(t *testing.T) {
	a, b, addr, prefix := pair(t)
	var held, peak atomic.Int32
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					rec, ok := s.Lease(engine.LeaseRecord{Route: 0, Taken: time.Now().UnixNano(), Expires: time.Now().Add(time.Minute).UnixNano()}, 2)
					if !ok {
						continue
					}
					n := held.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(100 * time.Microsecond)
					held.Add(-1)
					s.Release(rec.ID)
				}
			}()
		}
	}
	wg.Wait()
	if peak.Load() > 2 || peak.Load() == 0 {
		t.Errorf("peak %d leases held at once, want 1..2", peak.Load())
	}

	// Two processes.
	results := make([]childResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runChild(t, addr, prefix, "inflight")
		}()
	}
	wg.Wait()
	// Fairness is not promised: on a loaded machine one process may hold
	// the route for the other's whole run.
	if granted := results[0].Granted + results[1].Granted; granted == 0 || results[0].Violations+results[1].Violations != 0 {
		t.Errorf("two processes: %+v; want leases granted and never two held at once", results)
	}
}

// A lease its holder never released (it crashed) stops holding capacity
// once it expires.
func TestSharedLeaseOfACrashedProcess(t *testing.T) {
	a, b, _, _ := pair(t)
	if _, ok := a.Lease(engine.LeaseRecord{Route: 0, Taken: time.Now().UnixNano(), Expires: time.Now().Add(200 * time.Millisecond).UnixNano()}, 1); !ok {
		t.Fatal("first lease refused")
	}
	if _, ok := b.Lease(engine.LeaseRecord{Route: 0, Taken: time.Now().UnixNano(), Expires: time.Now().Add(time.Minute).UnixNano()}, 1); ok {
		t.Fatal("max_inflight=1 let a second lease through")
	}
	waitFor(t, "the abandoned lease expires", func() bool {
		rec, ok := b.Lease(engine.LeaseRecord{Route: 0, Taken: time.Now().UnixNano(), Expires: time.Now().Add(time.Minute).UnixNano()}, 1)
		if ok {
			b.Release(rec.ID)
		}
		return ok
	})
}

// childResult is what a child process reports.
type childResult struct {
	Granted, Violations int // mode "inflight"
	Suspect, Cooling    int // mode "report": transitions this process made
}

// runChild runs this test binary as another gateway process doing mode.
func runChild(t *testing.T, addr, prefix, mode string) childResult {
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$")
	cmd.Env = append(os.Environ(), "SWITCHYARD_TEST_REDIS="+addr, "REDISSTORE_CHILD="+mode, "REDISSTORE_PREFIX="+prefix)
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("child: %v\n%s", err, out)
		return childResult{}
	}
	var r childResult
	for _, line := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &r) == nil {
			return r
		}
	}
	t.Errorf("child printed no result:\n%s", out)
	return r
}

// TestChildProcess is the child's body: it runs only when runChild
// starts this binary with REDISSTORE_CHILD set.
func TestChildProcess(t *testing.T) {
	mode := os.Getenv("REDISSTORE_CHILD")
	if mode == "" {
		t.Skip("run by the tests as another process")
	}
	addr, prefix := os.Getenv("SWITCHYARD_TEST_REDIS"), os.Getenv("REDISSTORE_PREFIX")
	s, err := Open("redis://"+addr+"/0", Options{Prefix: prefix, Timeout: time.Second}) // as newStore: CI loads the machine
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The children's leases go to a route of their own: a lease the parent
	// could not release under load would otherwise hold it for a minute.
	route := "r0"
	if mode == "inflight" {
		route = "children"
	}
	s.AddRoute(0, route)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	var r childResult
	if mode == "report" {
		r = reportFailures(s)
	}
	for i := 0; mode == "inflight" && i < 300; i++ {
		rec, ok := s.Lease(engine.LeaseRecord{Route: 0, Taken: time.Now().UnixNano(), Expires: time.Now().Add(time.Minute).UnixNano()}, 1)
		if !ok {
			continue
		}
		r.Granted++
		if n, _ := c.Incr(ctx, prefix+":holders").Result(); n > 1 {
			r.Violations++
		}
		time.Sleep(200 * time.Microsecond)
		c.Decr(ctx, prefix+":holders")
		s.Release(rec.ID)
	}
	if err := s.Healthy(); err != nil {
		t.Fatalf("child lost Redis: %v", err)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// childReports is how many failures each child process reports, from
// childWorkers goroutines.
const childReports, childWorkers = 160, 8

// reportFailures reports childReports proxy timeouts on r0 at once and
// counts the transitions this process made.
func reportFailures(s *Store) childResult {
	cfg := engine.DefaultConfig()
	cfg.MaxRemovedShare = -1
	var suspect, cooling atomic.Int32
	var wg sync.WaitGroup
	for range childWorkers {
		wg.Go(func() {
			for range childReports / childWorkers {
				op := engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyTimeout}}
				ch, _ := s.Update(&cfg, engine.Key{Route: 0}, op, t0)
				switch {
				case ch.Changed() && ch.To == engine.Suspect:
					suspect.Add(1)
				case ch.Changed() && ch.To == engine.Cooling:
					cooling.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return childResult{Suspect: int(suspect.Load()), Cooling: int(cooling.Load())}
}

// Two processes report failures on one route at once: no update is lost
// and each threshold fires in exactly one of them.
func TestSharedUpdatesAcrossProcesses(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	results := make([]childResult, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = runChild(t, addr, prefix, "report") })
	}
	wg.Wait()
	h, _ := sharedRecord(t, addr, prefix+":{r0}:g")
	if want := uint32(len(results) * childReports); h.Samples != want {
		t.Errorf("shared record has %d samples, want %d: updates were lost", h.Samples, want)
	}
	suspect, cooling := results[0].Suspect+results[1].Suspect, results[0].Cooling+results[1].Cooling
	if suspect != 1 || cooling != 1 {
		t.Errorf("transitions across processes: %d to suspect, %d to cooling; want exactly one each (%+v)", suspect, cooling, results)
	}
}

// waitFor polls cond for up to 10 s: milliseconds when the machine is
// idle, seconds when CI loads it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Successes on a healthy record are written in batches, not one round trip
// each, and still reach the other process within the flush period.
func TestSuccessesAreBatched(t *testing.T) {
	a, b, _, _ := pair(t)
	cfg := engine.DefaultConfig()
	ok := func() {
		op := engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.OK, Latency: time.Millisecond}}
		a.Update(&cfg, engine.Key{Route: 0}, op, time.Now().UnixNano())
	}
	for range cfg.RecoverAfter {
		ok() // candidate → healthy: transitions are written at once
	}
	if h, _ := a.Read(engine.Key{Route: 0}); h.State != engine.Healthy {
		t.Fatalf("r0 is %v", h.State)
	}
	before := a.Stats().Writes
	const n = 200
	for range n {
		ok()
	}
	waitFor(t, "b sees every success", func() bool {
		h, _ := b.Read(engine.Key{Route: 0})
		return h.Samples == uint32(cfg.RecoverAfter+n)
	})
	if w := a.Stats().Writes - before; w > n/10 {
		t.Errorf("%d successes took %d writes", n, w)
	}
	// A failure is written at once, successes waiting before it included.
	ok()
	op := engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyAuth}}
	if ch, _ := a.Update(&cfg, engine.Key{Route: 0}, op, time.Now().UnixNano()); ch.To != engine.Cooling {
		t.Fatalf("407 left %v", ch.To)
	}
	h, _ := b.Read(engine.Key{Route: 0})
	waitFor(t, "b sees the cooling", func() bool { h, _ = b.Read(engine.Key{Route: 0}); return h.State == engine.Cooling })
	if h.Samples != uint32(cfg.RecoverAfter+n+2) {
		t.Errorf("b has %d samples, want %d", h.Samples, cfg.RecoverAfter+n+2)
	}
}

// A route added while running (a reload) gets its shared record at once,
// not at the next periodic resync.
func TestRouteAddedWhileRunning(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	a := newStore(t, addr, prefix, Options{})
	b := newStore(t, addr, prefix, Options{Resync: time.Hour})
	a.AddRoute(0, "late")
	cfg := engine.DefaultConfig()
	a.Update(&cfg, engine.Key{Route: 0}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyAuth}}, time.Now().UnixNano())
	b.AddRoute(0, "late")
	waitFor(t, "b reads the record of a route it was given late", func() bool {
		h, _ := b.Read(engine.Key{Route: 0})
		return h.State == engine.Cooling
	})
}

// An engine whose clock is behind Redis's (a simulator's virtual time, a
// replay) still gets max_inflight: the lease set's TTL does not come from
// the engine's clock. Regression: it expired at once and lifted the limit.
func TestLeasesOnAnEngineClockBehind(t *testing.T) {
	a, _, _, _ := pair(t)
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	rec := engine.LeaseRecord{Route: 0, Taken: past, Expires: past + int64(time.Minute)}
	if _, ok := a.Lease(rec, 1); !ok {
		t.Fatal("first lease refused")
	}
	if _, ok := a.Lease(rec, 1); ok {
		t.Fatal("max_inflight=1 let a second lease through on an engine clock in the past")
	}
}

// idleStore is a store under prefix that is not running: no notification
// or resync reaches it, so only its own calls can tell its listener.
func idleStore(t *testing.T, addr, prefix string) *Store {
	t.Helper()
	s, err := Open("redis://"+addr+"/0", Options{Prefix: prefix, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A record taken from another process reaches the listener before the
// call that took it returns: an Update whose compare-and-set lost, and a
// notification. Regression: they waited for another goroutine, so the
// engine followed the Update's Change before the record it started from,
// and its selection lagged what Read already said.
func TestTakenRecordsReachTheListenerFirst(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	a, b := newStore(t, addr, prefix, Options{}), idleStore(t, addr, prefix)
	var heard []string
	b.Listen(func(k engine.Key, old engine.Health, _ bool, now engine.Health) {
		heard = append(heard, fmt.Sprintf("%d: %v → %v", k.Route, old.State, now.State))
	})
	for _, s := range []*Store{a, b} {
		s.AddRoute(0, "dead")
		s.AddRoute(1, "good")
	}
	cfg := engine.DefaultConfig()
	check := func(c engine.Class) engine.Op {
		return engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: c, Probe: true}, CheckGen: true}
	}

	// Both check a new route; a's report is written first.
	if ch, _ := a.Update(&cfg, engine.Key{Route: 0}, check(engine.ProxyConnectFailed), t0); ch.To != engine.Cooling {
		t.Fatalf("a's failed check left %v", ch.To)
	}
	ch, _ := b.Update(&cfg, engine.Key{Route: 0}, check(engine.ProxyConnectFailed), t0)
	if ch.From != engine.Cooling || ch.Changed() {
		t.Errorf("b's check on a's record: %v → %v %q, want a stale report on cooling", ch.From, ch.To, ch.Reason)
	}
	if want := "0: candidate → cooling"; len(heard) != 1 || heard[0] != want {
		t.Fatalf("when b's Update returned, its listener had heard %q; want [%q]", heard, want)
	}

	// A notification of a's record.
	a.Update(&cfg, engine.Key{Route: 1}, check(engine.OK), t0)
	h, ver := sharedRecord(t, addr, prefix+":{good}:g")
	b.applyRecord("good", "", record{h: h, ver: ver})
	if want := "1: candidate → healthy"; len(heard) != 2 || heard[1] != want {
		t.Fatalf("when b took a's record, its listener had heard %q; want %q last", heard, want)
	}
}

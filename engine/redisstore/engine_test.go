package redisstore

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// gateway is one process's engine over its own store.
type gateway struct {
	e *engine.Engine
	s *Store
}

func newGateways(t *testing.T, n int, routes ...string) []gateway {
	t.Helper()
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	var gs []gateway
	for range n {
		s := newStore(t, addr, prefix, Options{})
		e, err := engine.New(engine.Config{MaxRemovedShare: -1}, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range routes {
			if err := e.AddRoute(time.Now(), engine.RouteSpec{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		gs = append(gs, gateway{e: e, s: s})
	}
	return gs
}

// A failure burst reported through process A makes process B stop using
// the route within the documented staleness (100 ms; the test allows
// seconds for a loaded CI machine and logs what it measured:
// BenchmarkPropagation measures it).
func TestPropagation(t *testing.T) {
	gs := newGateways(t, 2, "r1", "r2", "r3")
	a, b := gs[0], gs[1]
	start := time.Now()
	for range 4 {
		l, err := a.e.Acquire(time.Now(), engine.Request{Target: "example.com", Avoid: []string{"r2", "r3"}})
		if err != nil || l.Route != "r1" {
			t.Fatalf("lease %+v %v", l, err)
		}
		a.e.Report(time.Now(), l, engine.Outcome{Class: engine.ProxyConnectFailed})
	}
	if st, _ := a.e.Route("r1"); st.Health.State != engine.Cooling {
		t.Fatalf("r1 is %v on A after the burst", st.Health.State)
	}
	for {
		if st, _ := b.e.Route("r1"); st.Health.State == engine.Cooling && st.Weight == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("B still weighs r1 10 s after A cooled it")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("B stopped weighing r1 %v after A's first report", time.Since(start).Round(time.Millisecond))
	for range 200 {
		l, err := b.e.Acquire(time.Now(), engine.Request{Target: "example.com"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Route == "r1" {
			t.Fatal("B leased the route A cooled")
		}
		b.e.Report(time.Now(), l, engine.Outcome{Class: engine.OK, Latency: time.Millisecond})
	}
}

// Two gateways check their new routes at start, one of which refuses
// connections, and A's reports are written first: once B's own checks
// return, having found A's records, B weighs the good routes and leaves
// the dead one out. Regression: B's engine heard of A's records later,
// from another goroutine; until then it weighed all three as unchecked,
// panicked, and leased the dead route.
func TestBothGatewaysCheckNewRoutes(t *testing.T) {
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	now := time.Now()
	var b *engine.Engine
	for _, s := range []*Store{newStore(t, addr, prefix, Options{}), idleStore(t, addr, prefix)} {
		e, err := engine.New(engine.Config{MaxRemovedShare: -1, Seed: 1}, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"dead", "good1", "good2"} {
			if err := e.AddRoute(now, engine.RouteSpec{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		for _, job := range e.ProbeJobs(nil) {
			o := engine.Outcome{Class: engine.OK, Latency: time.Millisecond}
			if job.Route == "dead" {
				o.Class = engine.ProxyConnectFailed
			}
			e.ReportProbe(now, job, o)
		}
		b = e
	}
	for range 100 {
		l, err := b.Acquire(now, engine.Request{Target: "example.com"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Route == "dead" || l.Panic {
			t.Fatalf("B leased %s (panic %v) after its checks found A's records", l.Route, l.Panic)
		}
		b.Report(now, l, engine.Outcome{Class: engine.OK, Latency: time.Millisecond})
	}
}

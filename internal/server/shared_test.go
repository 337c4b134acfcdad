package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/redistest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// sharedGateway runs a server over cfg with the shared state at addr under
// prefix, until the test ends; it returns the server and its proxy client.
func sharedGateway(t *testing.T, lines, addr, prefix string) (*Server, *http.Client, string) {
	t.Helper()
	cfg := configOf(t, lines)
	cfg.State = config.State{URL: "redis://" + addr + "/0", Prefix: prefix, Timeout: 100 * time.Millisecond, Resync: time.Second}
	cfg.Engine.MaxRemovedShare = -1
	g := runServer(t, cfg, nil)
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: g.proxy})}
	t.Cleanup(tr.CloseIdleConnections)
	return g.s, &http.Client{Transport: tr, Timeout: 5 * time.Second}, g.admin
}

// Two gateway processes share one Redis: the refusals one of them meets
// take the route out of the other's rotation too.
func TestSharedStateAcrossGateways(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		addr := redistest.Addr(t)
		prefix := redistest.Prefix(t, addr)
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		defer site.Close()
		good1, good2 := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		lines := "http://" + routetest.ClosedPort(t) + " id=dead\n" + good1.URL.String() + " id=good1\n" + good2.URL.String() + " id=good2\n"
		a, clientA, _ := sharedGateway(t, lines, addr, prefix)
		b, clientB, _ := sharedGateway(t, lines, addr, prefix)

		// The dead route never sees users' traffic: its check before it
		// would cools it.
		deadline := time.Now().Add(10 * time.Second)
		for st, _ := a.Engine().Route("dead"); st.Health.State != engine.Cooling; st, _ = a.Engine().Route("dead") {
			if time.Now().After(deadline) {
				t.Fatalf("gateway A left the dead route %v", st.Health.State)
			}
			resp, err := clientA.Get(site.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if via := resp.Header.Get("X-Switchyard-Route"); via == "dead" {
				t.Fatal("gateway A sent users' traffic to the unchecked dead route")
			}
		}
		// B learns of dead from A, or from its own check, and weighs good1
		// and good2 once checked: until then no judged route is usable and
		// B panics across all three, as a gateway just started does.
		// Weight is what B's selection weighs, not the record it reads.
		for !coolingIn(b, "dead") || !weighs(b, "good1") || !weighs(b, "good2") {
			if time.Now().After(deadline) {
				t.Fatal("gateway B never had dead cooling and good1 and good2 weighed")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// An attempt may be hedged, or cut by its deadline on a loaded
		// machine, and another take its place: what must not happen is an
		// attempt through dead.
		outcomes := b.Engine().Subscribe(1024, engine.EventOutcome)
		defer outcomes.Close()
		for range 20 {
			resp, err := clientB.Get(site.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("through B: %d after %s attempts, via %s", resp.StatusCode, resp.Header.Get("X-Switchyard-Attempts"), resp.Header.Get("X-Switchyard-Route"))
			}
		}
		for _, ev := range outcomes.Poll(nil) {
			if ev.Route == "dead" && !ev.Probe {
				t.Fatalf("gateway B sent users' traffic to dead, which A found refusing: %v", ev.Class)
			}
		}
	})
}

// coolingIn reports whether s's engine has route id cooling.
func coolingIn(s *Server, id string) bool {
	st, _ := s.Engine().Route(id)
	return st.Health.State == engine.Cooling
}

// weighs reports whether s's selection gives route id users' traffic.
func weighs(s *Server, id string) bool {
	st, _ := s.Engine().Route(id)
	return st.Weight > 0
}

// Redis dies mid-load: every request still succeeds, /readyz says degraded;
// Redis comes back empty: the gateway writes back what it knows and says
// ready.
func TestSharedStateOutage(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		redisSrv := redistest.Start(t)
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		defer site.Close()
		p := routetest.NewProxy(t, routetest.Behavior{})
		_, client, admin := sharedGateway(t, p.URL.String()+" id=p max_inflight=8\n", redisSrv.Addr, "outage")
		readyz := func() string {
			resp, err := http.Get(admin + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Errorf("/readyz: %d %s", resp.StatusCode, body)
			}
			return string(body)
		}
		waitReady := func(want string) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for got := readyz(); !strings.HasPrefix(got, want); got = readyz() {
				if time.Now().After(deadline) {
					t.Fatalf("/readyz says %q, want %q", got, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		waitReady("ready")

		var sent, failed atomic.Int64
		var firstFailure atomic.Pointer[string] // what the first failed request got
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100_000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := client.Get(site.URL)
					sent.Add(1)
					switch {
					case err != nil:
						failed.Add(1)
						why := err.Error()
						firstFailure.CompareAndSwap(nil, &why)
					case resp.StatusCode != 200:
						failed.Add(1)
						body, _ := io.ReadAll(resp.Body)
						why := fmt.Sprintf("%d %s", resp.StatusCode, body)
						firstFailure.CompareAndSwap(nil, &why)
					}
					if err == nil {
						resp.Body.Close()
					}
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		redisSrv.Stop()
		waitReady("degraded: redis at " + redisSrv.Addr + " unreachable")
		time.Sleep(300 * time.Millisecond) // load on local state
		redisSrv.Restart()
		waitReady("ready")
		time.Sleep(200 * time.Millisecond)
		close(stop)
		wg.Wait()
		if failed.Load() != 0 || sent.Load() == 0 {
			why := ""
			if f := firstFailure.Load(); f != nil {
				why = ", the first with " + *f
			}
			t.Fatalf("%d of %d requests failed across the outage%s", failed.Load(), sent.Load(), why)
		}
		c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
		defer c.Close()
		if n, err := c.HGet(context.Background(), "outage:{p}:g", "v").Int(); err != nil || n == 0 {
			t.Errorf("the route's record is not back in the restarted Redis: %d %v", n, err)
		}
		t.Logf("%d requests across the outage, none failed", sent.Load())
	})
}

package gateway

// Live loopback benchmarks: real sockets on 127.0.0.1 from client to fake
// upstream proxies (routetest) to an httptest target. Benchmarks only, so
// `go test` without -bench never runs them.
//
//	go test -run '^$' -bench Live -benchtime 2000x ./internal/gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/frontdoor"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

const (
	benchTaskTimeout    = 5 * time.Second // whole task, every attempt included
	benchAttemptTimeout = 1 * time.Second // one attempt, gateway and round-robin alike
	benchMaxAttempts    = 3
)

// benchPage is what benchTarget answers: a 4 KiB HTML page, as a
// crawler fetches, which the gateway reads the start of and judges.
var benchPage = func() string {
	var page strings.Builder
	page.WriteString("<!doctype html><html><head><title>Shop</title></head><body>\n")
	for i := 0; page.Len() < 4<<10; i++ {
		fmt.Fprintf(&page, `<div class="item"><a href="/p/%d">Item %d</a><span class="price">EUR %d.99</span></div>`+"\n", i, i, 20+i)
	}
	page.WriteString("</body></html>\n")
	return page.String()
}()

// benchTarget is a target on 127.0.0.1 answering 200 with benchPage,
// closed by b.Cleanup.
func benchTarget(b *testing.B) *httptest.Server {
	b.Helper()
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, benchPage)
	}))
	b.Cleanup(tg.Close)
	return tg
}

// benchGateway starts a gateway over proxies with the engine's default
// config (newEnv takes *testing.T and pins a round-robin picker, so it is
// not used here), behind the front door that serves it in production. The
// returned stop closes the server and the gateway's idle connections.
func benchGateway(b *testing.B, cfg Config, proxies []*routetest.Proxy) (gw *url.URL, stop func()) {
	b.Helper()
	lines := make([]string, len(proxies))
	for i, p := range proxies {
		lines[i] = proxyLine(p, "")
	}
	list, err := route.ParseList("bench", []byte(strings.Join(lines, "\n")))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	routes := make([]*route.Route, len(list))
	for i := range list {
		routes[i] = &list[i]
		if err := e.AddRoute(time.Now(), routes[i].Spec()); err != nil {
			b.Fatal(err)
		}
	}
	g, err := New(cfg, e, routes)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &frontdoor.Server{Handler: g}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, func() {
		srv.Close()
		<-served
		g.Close()
	}
}

// proxyTransport sends every request through proxy u, keeping up to
// idle connections alive.
func proxyTransport(u *url.URL, idle int) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyURL(u),
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     30 * time.Second,
	}
}

// get performs one GET and reports whether it was a 200 "ok", and the
// response's X-Switchyard-Attempts (0 when absent).
func get(ctx context.Context, c *http.Client, target string) (ok bool, attempts int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, 0
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 2*int64(len(benchPage))))
	attempts, _ = strconv.Atoi(resp.Header.Get(headerAttempts))
	return err == nil && resp.StatusCode == http.StatusOK && string(body) == benchPage, attempts
}

// runTasks runs b.N tasks on a fixed pool of workers and reports the
// completion rate and the upstream attempts per completed task. Each task
// returns whether it completed and the upstream attempts it made.
func runTasks(b *testing.B, workers int, task func() (ok bool, attempts int)) {
	var next, completed, attempts atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				ok, n := task()
				attempts.Add(int64(n))
				if ok {
					completed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(completed.Load())/float64(b.N), "completion")
	if c := completed.Load(); c > 0 {
		b.ReportMetric(float64(attempts.Load())/float64(c), "attempts/task")
	} else {
		b.ReportMetric(0, "attempts/task")
	}
}

// BenchmarkLivePool compares the gateway with blind client-side rotation
// over a pool of 10 proxies of which 3 are bad (refused, 407, blackhole),
// 16 concurrent workers, one GET per task with up to 3 upstream attempts.
func BenchmarkLivePool(b *testing.B) {
	tg := benchTarget(b)
	// The bad proxies are spread out (positions 2, 5, 8), so blind
	// rotation is not penalised by meeting them back to back.
	bad := map[int]routetest.Behavior{2: {Refuse: true}, 5: {Answer407: true}, 8: {Blackhole: true}}
	proxies := make([]*routetest.Proxy, 10)
	for i := range proxies {
		proxies[i] = routetest.NewProxy(b, bad[i]) // zero Behavior: healthy
	}
	const workers = 16

	b.Run("policy=switchyard", func(b *testing.B) {
		// A fresh gateway and engine per run, so each run pays for its
		// own learning. Handshake covers TLS/SOCKS5/CONNECT; for a plain
		// HTTP proxy answering nothing, AttemptTimeout is what cuts the
		// blackhole.
		gw, stop := benchGateway(b, Config{
			MaxAttempts:    benchMaxAttempts,
			AttemptTimeout: benchAttemptTimeout,
			Timeouts:       route.Timeouts{Handshake: 200 * time.Millisecond},
		}, proxies)
		defer stop()
		tr := proxyTransport(gw, workers)
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: benchTaskTimeout}
		runTasks(b, workers, func() (bool, int) {
			return get(context.Background(), c, tg.URL)
		})
	})

	b.Run("policy=client_round_robin", func(b *testing.B) {
		clients := make([]*http.Client, len(proxies))
		for i, p := range proxies {
			tr := proxyTransport(p.URL, workers)
			defer tr.CloseIdleConnections()
			clients[i] = &http.Client{Transport: tr, Timeout: benchAttemptTimeout}
		}
		var rr atomic.Uint64
		runTasks(b, workers, func() (bool, int) {
			ctx, cancel := context.WithTimeout(context.Background(), benchTaskTimeout)
			defer cancel()
			for n := 1; n <= benchMaxAttempts; n++ {
				c := clients[(rr.Add(1)-1)%uint64(len(clients))]
				if ok, _ := get(ctx, c, tg.URL); ok {
					return true, n
				}
				if ctx.Err() != nil {
					return false, n
				}
			}
			return false, benchMaxAttempts
		})
	})
}

// BenchmarkLiveOverhead measures what the gateway adds on a healthy path:
// one healthy fake proxy, one target, keep-alive clients. With 64 clients
// on a small machine the latency is mostly queueing; one client shows what
// a single request pays. B/op, allocs/op and cpu-us/op count the whole
// process (client, gateway, proxy, target): the gateway's own are the
// difference between the two paths.
func BenchmarkLiveOverhead(b *testing.B) {
	for _, clients := range []int{64, 1} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { liveOverhead(b, clients) })
	}
}

func liveOverhead(b *testing.B, clients int) {
	tg := benchTarget(b)
	// A proxy that keeps connections alive, as real ones do: otherwise
	// every request pays for a dial on both paths, which hides what the
	// gateway itself costs.
	p := routetest.NewProxy(b, routetest.Behavior{KeepAlive: true})
	bench := func(b *testing.B, proxy *url.URL) {
		tr := proxyTransport(proxy, clients)
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: benchTaskTimeout}
		var mu sync.Mutex
		lat := make([]time.Duration, 0, b.N)
		var failed atomic.Int64
		one := func() {
			start := time.Now()
			ok, _ := get(context.Background(), c, tg.URL)
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
			if !ok {
				failed.Add(1)
			}
		}
		cpu0 := cpuTime(b)
		b.ResetTimer()
		if clients == 1 {
			for range b.N {
				one()
			}
		} else {
			b.SetParallelism(max(1, (clients+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					one()
				}
			})
		}
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Errorf("%d of %d requests failed on a healthy path", n, b.N)
		}
		slices.Sort(lat)
		pct := func(q float64) float64 {
			if len(lat) == 0 {
				return 0
			}
			return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds())
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		b.ReportMetric(pct(0.50), "p50-us")
		b.ReportMetric(pct(0.99), "p99-us")
		// The whole process's: client, gateway, proxy and target alike.
		b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	}

	b.Run("path=direct_to_proxy", func(b *testing.B) { bench(b, p.URL) })
	b.Run("path=through_gateway", func(b *testing.B) {
		gw, stop := benchGateway(b, Config{}, []*routetest.Proxy{p})
		defer stop()
		bench(b, gw)
	})
	if clients == 1 {
		// The same with a request log line per request, as serve writes
		// by default (text, here to nowhere).
		b.Run("path=through_gateway_logged", func(b *testing.B) {
			gw, stop := benchGateway(b, Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, []*routetest.Proxy{p})
			defer stop()
			bench(b, gw)
		})
	}
}

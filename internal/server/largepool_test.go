package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// BenchmarkLargePool runs the whole gateway over a pool of many routes
// (issue 17: 100,000), and over ten, for a while each under a fixed
// number of clients, and
// reports what a crawler would see: answers other than 200, requests per
// second, and what the process holds: its most file descriptors, RSS and
// connections open upstream. The routes are distinct credentials on ten
// fake proxies on 127.0.0.1, so no two routes share a connection, as with
// a list of distinct exits; HTTP proxies, or with
// SWITCHYARD_LARGE_SCHEME=socks5 SOCKS5 ones.
//
//	go test -run '^$' -bench LargePool -benchtime 1x ./internal/server
//	SWITCHYARD_LARGE_ROUTES=100000 SWITCHYARD_LARGE_FOR=30s go test -run '^$' -bench LargePool -benchtime 1x -timeout 20m ./internal/server
func BenchmarkLargePool(b *testing.B) {
	n, run, kind := 10_000, 10*time.Second, routetest.HTTPProxy
	if v := os.Getenv("SWITCHYARD_LARGE_ROUTES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("SWITCHYARD_LARGE_ROUTES=%q: want a positive count", v)
		}
	}
	if v := os.Getenv("SWITCHYARD_LARGE_FOR"); v != "" {
		var err error
		if run, err = time.ParseDuration(v); err != nil || run <= 0 {
			b.Fatalf("SWITCHYARD_LARGE_FOR=%q: want a duration", v)
		}
	}
	switch v := os.Getenv("SWITCHYARD_LARGE_SCHEME"); v {
	case "", "http":
	case "socks5":
		kind = routetest.SOCKS5Proxy
	default:
		b.Fatalf("SWITCHYARD_LARGE_SCHEME=%q: want http or socks5", v)
	}
	// Ten routes, one per proxy, beside the large pool: what the pool's
	// size costs, measured in the same run.
	for _, routes := range []int{10, n} {
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) { largePool(b, routes, run, kind) })
	}
}

func largePool(b *testing.B, n int, run time.Duration, kind routetest.Kind) {
	const clients = 16
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer site.Close()
	proxies := make([]*routetest.Proxy, 10)
	for i := range proxies {
		proxies[i] = routetest.NewProxy(b, routetest.Behavior{KeepAlive: true, Kind: kind})
	}
	var list strings.Builder
	for i := range n {
		fmt.Fprintf(&list, "%s://u%d:pw@%s\n", proxies[i%len(proxies)].URL.Scheme, i, proxies[i%len(proxies)].URL.Host)
	}
	for range b.N {
		proxy, adm := listen(b), listen(b)
		s, err := New(configOf(b, list.String()), Listeners{Proxy: proxy, Admin: adm}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, 5*time.Second) }()

		var answers sync.Map // status → *atomic.Int64
		count := func(status int) {
			v, _ := answers.LoadOrStore(status, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}
		var fds, rss, upstream atomic.Int64
		sampled := make(chan struct{})
		stop := time.Now().Add(run)
		go func() { // the process's peaks, every 100 ms
			defer close(sampled)
			for time.Now().Before(stop) {
				raise(&fds, descriptors())
				raise(&rss, residentBytes())
				raise(&upstream, s.gateway.UpstreamConns())
				time.Sleep(100 * time.Millisecond)
			}
		}()
		gateway := &url.URL{Scheme: "http", Host: proxy.Addr().String()}
		var wg sync.WaitGroup
		var errs atomic.Int64
		b.ResetTimer()
		for range clients {
			wg.Go(func() {
				tr := &http.Transport{Proxy: http.ProxyURL(gateway)}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
				for i := 0; time.Now().Before(stop) && i < 10_000_000; i++ {
					resp, err := client.Get(site.URL + "/")
					if err != nil {
						errs.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					count(resp.StatusCode)
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		<-sampled
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		var ok, other int64
		answers.Range(func(k, v any) bool {
			if c := v.(*atomic.Int64).Load(); k.(int) == http.StatusOK {
				ok += c
			} else {
				other += c
				b.Logf("%d answers %d", c, k.(int))
			}
			return true
		})
		b.ReportMetric(float64(ok)/run.Seconds(), "ok/s")
		b.ReportMetric(float64(other+errs.Load()), "not-ok")
		b.ReportMetric(float64(fds.Load()), "max-fds")
		b.ReportMetric(float64(rss.Load())/(1<<20), "max-RSS-MiB")
		b.ReportMetric(float64(upstream.Load()), "max-upstream-conns")
	}
}

// raise sets v to x when x is larger.
func raise(v *atomic.Int64, x int64) {
	for old := v.Load(); x > old && !v.CompareAndSwap(old, x); old = v.Load() {
	}
}

// descriptors is how many file descriptors the process has open, 0 where
// /proc does not say.
func descriptors() int64 {
	entries, _ := os.ReadDir("/proc/self/fd")
	return int64(len(entries))
}

// residentBytes is the process's resident set, 0 where /proc does not say.
func residentBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

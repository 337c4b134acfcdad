package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/config"
)

// BenchmarkStartup measures what serve does before it listens: load the
// config and the proxy list, then build the engine, the gateway and the
// admin API over every route. It reports the heap kept per route once
// built (issue 17: a million routes start in under 5 s, under 1 KB each).
// The routes are proxies with credentials on distinct addresses, which
// are never dialed.
//
//	go test -run '^$' -bench Startup -benchtime 1x ./internal/server
//	SWITCHYARD_STARTUP_ROUTES=1000000 go test -run '^$' -bench Startup -benchtime 1x ./internal/server
func BenchmarkStartup(b *testing.B) {
	n := 100_000
	if v := os.Getenv("SWITCHYARD_STARTUP_ROUTES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("SWITCHYARD_STARTUP_ROUTES=%q: want a positive count", v)
		}
	}
	list := filepath.Join(b.TempDir(), "proxies.txt")
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "http://u%d:pw@10.%d.%d.%d:%d\n", i, i>>16&255, i>>8&255, i&255, 3128+i%7)
	}
	if err := os.WriteFile(list, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	src := config.Source{Env: []string{}, Flags: []config.Setting{{Key: "routes.file", Value: list}}}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		proxy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		admin, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		cfg, err := config.Load(src)
		if err != nil {
			b.Fatal(err)
		}
		s, err := New(cfg, Listeners{Proxy: proxy, Admin: admin}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/route")
		done, stop := context.WithCancel(b.Context())
		stop()
		if err := s.Run(done, 0); err != nil { // stops what New started
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

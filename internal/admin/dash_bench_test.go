package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
)

// BenchmarkDashboard10k is the server's side of one dashboard refresh over
// 10,000 routes with evidence on 50 targets: each endpoint with a fresh
// engine snapshot, as after the snapshot's 500 ms, gzip off.
func BenchmarkDashboard10k(b *testing.B) {
	var list strings.Builder
	for i := range 10_000 {
		fmt.Fprintf(&list, "http://127.0.0.1:%d id=r%05d provider=p%02d\n", 20000+i, i, i%20)
	}
	parsed, err := route.ParseList("10k", []byte(list.String()))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Config{Seed: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	routes := make([]*route.Route, len(parsed))
	for i := range parsed {
		routes[i] = &parsed[i]
		if err := e.AddRoute(now, parsed[i].Spec()); err != nil {
			b.Fatal(err)
		}
		for k := range 5 {
			if err := e.Feedback(now, parsed[i].ID, fmt.Sprintf("site%02d.example", (i+k*7)%50), engine.Outcome{Class: engine.Blocked}); err != nil {
				b.Fatal(err)
			}
		}
	}
	s := NewServer(e, fixedRoutes(b, routes), NewMetrics(e, nil), Options{})
	defer s.Close()
	for _, path := range []string{"/api/dash/overview", "/api/dash/routes", "/api/dash/heatmap", "/api/dash/targets"} {
		b.Run(strings.TrimPrefix(path, "/api/dash/"), func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			b.ReportAllocs()
			for b.Loop() {
				s.forgetSnapshot()
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
				_, _ = io.Copy(io.Discard, w.Body)
			}
		})
	}
}

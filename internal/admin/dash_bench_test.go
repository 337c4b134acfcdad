package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/admin/admintest"
)

// BenchmarkDashboard10k is the server's side of one dashboard refresh over
// 10,000 routes with evidence on 50 targets: each endpoint with a fresh
// engine snapshot, as after the snapshot's 500 ms, gzip off.
func BenchmarkDashboard10k(b *testing.B) {
	e, routes := admintest.Pool(b, 10_000, 50)
	s := NewServer(e, routes, NewMetrics(e, nil), Options{})
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

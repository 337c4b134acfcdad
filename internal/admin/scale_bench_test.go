package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// BenchmarkAdmin100k is the admin's answers over 100,000 routes, a third
// of them with a pair record, each after one attempt: /api/routes' pages
// and filters, the summary (a fresh snapshot each time, as after its
// 500 ms) and /metrics with and without the series labelled by route.
// resp-bytes is the answer's size, gzip off.
//
//	go test ./internal/admin/ -run '^$' -bench Admin100k -benchtime 20x
func BenchmarkAdmin100k(b *testing.B) {
	e, s := newPool(b, 100_000)
	// Counted with the series on, as a gateway that turned them off would
	// have: auto drops them, so it comes last.
	s.metrics.SetPerRoute(PerRouteOn)
	for _, id := range e.RouteIDs(nil, 0) {
		s.metrics.ObserveAttempt(id, engine.OK, time.Millisecond)
	}
	for _, bc := range []struct {
		name, path string
		perRoute   PerRoute
	}{
		{"routes/first-page", "/api/routes", PerRouteAuto},
		{"routes/a-later-page", "/api/routes?after=r60000", PerRouteAuto},
		{"routes/limit-5000", "/api/routes?limit=5000", PerRouteAuto},
		{"routes/label", "/api/routes?label=provider=p3&label=region=eu", PerRouteAuto},
		{"routes/target", "/api/routes?target=shop.example", PerRouteAuto},
		{"routes/state-none-in", "/api/routes?state=ejected", PerRouteAuto},
		{"summary", "/api/routes/summary", PerRouteAuto},
		{"metrics/per_route=true", "/metrics", PerRouteOn},
		{"metrics/per_route=auto", "/metrics", PerRouteAuto},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s.metrics.SetPerRoute(bc.perRoute)
			req := httptest.NewRequest(http.MethodGet, bc.path, nil)
			b.ReportAllocs()
			var size int
			for b.Loop() {
				s.forgetSnapshot()
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body.String())
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "resp-bytes")
		})
	}
}

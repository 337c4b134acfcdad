package admin

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
)

// A route whose proxy refuses its credentials raises the alarm: one
// warning per route until a reload, /readyz naming it and one gauge
// counting such routes, until an attempt or probe through it succeeds.
func TestProxyAuthAlarm(t *testing.T) {
	t.Parallel()
	type step struct {
		route  string
		class  engine.Class
		probe  bool
		reload func(route string) bool // set: a reload, keeping the failing routes it says
	}
	keepAll := func(string) bool { return true }
	tests := []struct {
		desc      string
		steps     []step
		wantGauge string
		wantReady string // the whole /readyz line
		wantWarns int    // warnings logged
	}{
		{desc: "none", steps: nil, wantGauge: "0", wantReady: "ready\n"},
		{desc: "one route, three 407s: warned once", steps: []step{{route: alice, class: engine.ProxyAuth}, {route: alice, class: engine.ProxyAuth}, {route: alice, class: engine.ProxyAuth, probe: true}},
			wantGauge: "1", wantReady: "ready; 1 route(s) refused by their proxy (407: check their credentials): " + alice + "\n", wantWarns: 1},
		{desc: "two routes, by attempt and by probe", steps: []step{{route: bob, class: engine.ProxyAuth}, {route: alice, class: engine.ProxyAuth, probe: true}},
			wantGauge: "2", wantReady: "ready; 2 route(s) refused by their proxy (407: check their credentials): " + alice + ", " + bob + "\n", wantWarns: 2},
		{desc: "a success clears it", steps: []step{{route: alice, class: engine.ProxyAuth}, {route: alice, class: engine.OK, probe: true}},
			wantGauge: "0", wantReady: "ready\n", wantWarns: 1},
		{desc: "other failures prove nothing", steps: []step{{route: alice, class: engine.ProxyAuth}, {route: alice, class: engine.ProxyTimeout}, {route: alice, class: engine.Blocked}},
			wantGauge: "1", wantReady: "ready; 1 route(s) refused by their proxy (407: check their credentials): " + alice + "\n", wantWarns: 1},
		{desc: "a reload warns again of a route still refused", steps: []step{{route: alice, class: engine.ProxyAuth}, {reload: keepAll}, {route: alice, class: engine.ProxyAuth}},
			wantGauge: "1", wantReady: "ready; 1 route(s) refused by their proxy (407: check their credentials): " + alice + "\n", wantWarns: 2},
		{desc: "a reload with new credentials forgets it", steps: []step{{route: alice, class: engine.ProxyAuth}, {route: bob, class: engine.ProxyAuth}, {reload: func(id string) bool { return id != alice }}},
			wantGauge: "1", wantReady: "ready; 1 route(s) refused by their proxy (407: check their credentials): " + bob + "\n", wantWarns: 2},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			var log logtest.Buffer
			f.m.auth = newProxyAuth(slog.New(slog.NewTextHandler(&log, nil)))
			for _, s := range tc.steps {
				switch {
				case s.reload != nil:
					f.m.ResetProxyAuth(s.reload)
				case s.probe:
					f.m.ObserveProbe(s.route, s.class)
				default:
					f.m.ObserveAttempt(s.route, s.class, 0)
				}
			}
			if _, _, body := f.do(t, http.MethodGet, "/metrics", ""); !strings.Contains(string(body), "\nswitchyard_routes_proxy_auth_failing "+tc.wantGauge+"\n") {
				t.Errorf("metrics lack switchyard_routes_proxy_auth_failing %s", tc.wantGauge)
			}
			if status, _, body := f.do(t, http.MethodGet, "/readyz", ""); status != http.StatusOK || string(body) != tc.wantReady {
				t.Errorf("/readyz: %d %q, want 200 %q", status, body, tc.wantReady)
			}
			if n := strings.Count(log.String(), "level=WARN"); n != tc.wantWarns {
				t.Errorf("%d warnings, want %d:\n%s", n, tc.wantWarns, log.String())
			}
		})
	}
}

// /readyz names a few failing routes, not 100,000.
func TestProxyAuthReadyIsOneShortLine(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for i := range 1000 {
		f.m.ObserveAttempt(fmt.Sprintf("route-%04d", i), engine.ProxyAuth, 0)
	}
	_, _, body := f.do(t, http.MethodGet, "/readyz", "")
	want := "ready; 1000 route(s) refused by their proxy (407: check their credentials): route-0000, route-0001, route-0002, route-0003, route-0004, …\n"
	if string(body) != want {
		t.Errorf("/readyz %q, want %q", body, want)
	}
}

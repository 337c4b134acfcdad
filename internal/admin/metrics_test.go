package admin

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		setup func(t *testing.T, f *fixture)
		want  []string // exposition lines
	}{
		{
			desc:  "route gauges from the engine",
			setup: func(*testing.T, *fixture) {},
			want: []string{
				`switchyard_routes{state="candidate"} 2`,
				`switchyard_routes{state="cooling"} 1`,
				`switchyard_routes{state="healthy"} 1`,
				`switchyard_routes{state="suspect"} 0`,
				`switchyard_routes{state="half_open"} 0`,
				`switchyard_routes{state="ejected"} 0`,
				`switchyard_routes{state="draining"} 0`,
				`switchyard_incidents 1`,
				`switchyard_route_score{route="direct"} 0.6`,
				`switchyard_route_inflight{route="` + bob + `"} 0`,
				`switchyard_retries_total 0`,
				`switchyard_hedges_total 0`,
			},
		},
		{
			desc: "gauges follow operator actions and leases",
			setup: func(t *testing.T, f *fixture) {
				if err := f.e.Drain(time.Now(), bob); err != nil {
					t.Fatal(err)
				}
				if err := f.e.Eject(time.Now(), direct); err != nil {
					t.Fatal(err)
				}
				if _, err := f.e.Acquire(time.Now(), engine.Request{Target: "a.example"}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{
				`switchyard_routes{state="candidate"} 1`,
				`switchyard_routes{state="healthy"} 0`,
				`switchyard_routes{state="draining"} 1`,
				`switchyard_routes{state="ejected"} 1`,
				// carol is the only usable route left.
				`switchyard_route_inflight{route="` + carol + `"} 1`,
			},
		},
		{
			desc: "shared state store",
			setup: func(_ *testing.T, f *fixture) {
				f.m.WatchState(func() StateStats {
					return StateStats{Degraded: true, Errors: 3, Writes: 9, Outages: 1, Conflicts: 7, RemoteChanges: 42}
				})
			},
			want: []string{
				`switchyard_state_degraded 1`,
				`switchyard_state_errors_total 3`,
				`switchyard_state_writes_total 9`,
				`switchyard_state_outages_total 1`,
				`switchyard_state_conflicts_total 7`,
				`switchyard_state_remote_changes_total 42`,
			},
		},
		{
			desc: "client connections and restart",
			setup: func(_ *testing.T, f *fixture) {
				f.m.WatchClientConns(func() int64 { return 17 })
				f.m.WatchUpstreamConns(func() int64 { return 5 })
				f.m.WatchRestart(func() []string { return []string{"server"} })
				f.m.ObserveConnCut(CutIdle)
				f.m.ObserveConnCut(CutIdle)
				f.m.ObserveConnCut(CutOverCap)
			},
			want: []string{
				`switchyard_client_conns 17`,
				`switchyard_upstream_conns 5`,
				`switchyard_config_restart_required 1`,
				`switchyard_client_conns_cut_total{reason="idle"} 2`,
				`switchyard_client_conns_cut_total{reason="over_cap"} 1`,
				`switchyard_client_conns_cut_total{reason="header"} 0`,
				`switchyard_client_conns_cut_total{reason="slow_body"} 0`,
			},
		},
		{
			desc: "auth refusals",
			setup: func(_ *testing.T, f *fixture) {
				f.m.ObserveAuthRefusal("denied")
				f.m.ObserveAuthRefusal("throttled")
				f.m.ObserveAuthRefusal("throttled")
			},
			want: []string{
				`switchyard_auth_refused_total{reason="denied"} 1`,
				`switchyard_auth_refused_total{reason="throttled"} 2`,
			},
		},
		{
			desc: "local resource failures",
			setup: func(_ *testing.T, f *fixture) {
				f.m.ObserveLocalError("emfile")
				f.m.ObserveLocalError("emfile")
				f.m.ObserveLocalError("enobufs")
			},
			want: []string{
				`switchyard_local_errors_total{reason="emfile"} 2`,
				`switchyard_local_errors_total{reason="enobufs"} 1`,
				`switchyard_local_errors_total{reason="enfile"} 0`,
				`switchyard_local_errors_total{reason="enomem"} 0`,
				`switchyard_local_errors_total{reason="eaddrnotavail"} 0`,
			},
		},
		{
			desc: "sub-exit failures",
			setup: func(_ *testing.T, f *fixture) {
				f.m.ObserveSubExit(engine.Blocked, true, true)
				f.m.ObserveSubExit(engine.Blocked, true, false)
				f.m.ObserveSubExit(engine.ContentInvalid, false, true)
			},
			want: []string{
				`switchyard_sub_exit_failures_total{class="blocked",effect="retired_spared"} 1`,
				`switchyard_sub_exit_failures_total{class="blocked",effect="retired"} 1`,
				`switchyard_sub_exit_failures_total{class="content_invalid",effect="spared"} 1`,
			},
		},
		{
			desc: "requests, attempts, retries and hedges",
			setup: func(_ *testing.T, f *fixture) {
				f.m.ObserveRequest(http.MethodGet, engine.OK, 2, 1, time.Millisecond)
				f.m.ObserveRequest("BREW", engine.Blocked, 0, 0, time.Millisecond)
				f.m.ObserveAttempt(alice, engine.ProxyTimeout, 1500*time.Millisecond)
				f.m.ObserveAttempt(bob, engine.OK, 200*time.Millisecond)
				f.m.ObserveAttempt(bob, engine.OK, 300*time.Millisecond)
			},
			want: []string{
				`switchyard_requests_total{method="GET",result="ok"} 1`,
				`switchyard_requests_total{method="other",result="blocked"} 1`,
				`switchyard_retries_total 2`,
				`switchyard_hedges_total 1`,
				`switchyard_attempts_total{class="proxy_timeout",route="` + alice + `"} 1`,
				`switchyard_attempts_total{class="ok",route="` + bob + `"} 2`,
				`switchyard_attempt_seconds_count{class="ok"} 2`,
				`switchyard_attempt_seconds_sum{class="ok"} 0.5`,
				`switchyard_attempt_seconds_bucket{class="proxy_timeout",le="2.5"} 1`,
				`switchyard_attempt_seconds_bucket{class="proxy_timeout",le="1"} 0`,
			},
		},
		{
			desc: "waits for reserved tokens",
			setup: func(_ *testing.T, f *fixture) {
				f.m.ObserveReservedWait(30 * time.Millisecond)
				f.m.ObserveReservedWait(200 * time.Millisecond)
			},
			want: []string{
				`switchyard_reserved_wait_seconds_count 2`,
				`switchyard_reserved_wait_seconds_sum 0.23`,
				`switchyard_reserved_wait_seconds_bucket{le="0.025"} 0`,
				`switchyard_reserved_wait_seconds_bucket{le="0.05"} 1`,
				`switchyard_reserved_wait_seconds_bucket{le="0.25"} 2`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			tc.setup(t, f)
			status, h, body := f.do(t, http.MethodGet, "/metrics", "")
			if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
				t.Fatalf("GET /metrics: %d %q", status, h.Get("Content-Type"))
			}
			lines := make(map[string]bool)
			for l := range strings.Lines(string(body)) {
				lines[strings.TrimSuffix(l, "\n")] = true
			}
			for _, w := range tc.want {
				if !lines[w] {
					t.Errorf("missing %q in\n%s", w, body)
				}
			}
		})
	}
}

// /metrics has the process's own health beside the gateway's: the Go
// runtime's and the process's collectors.
func TestMetricsProcessCollectors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	_, _, body := f.do(t, http.MethodGet, "/metrics", "")
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds_count", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} {
		found := false
		for l := range strings.Lines(string(body)) {
			if value, ok := strings.CutPrefix(l, name+" "); ok && strings.TrimSpace(value) != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s sample in /metrics", name)
		}
	}
}

// scrape is a server's /metrics: its samples, and how many of them are
// labelled by route.
func scrape(t *testing.T, s *Server) (samples, byRoute int, body string) {
	t.Helper()
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", w.Code)
	}
	body = w.Body.String()
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, "#") {
			continue
		}
		samples++
		if strings.Contains(l, `route="`) {
			byRoute++
		}
	}
	return samples, byRoute, body
}

// TestMetricsPerRoute scrapes pools of several sizes in each mode, after
// an attempt through every route: the series labelled by route are there
// or not as the mode says, and without them the scrape's size does not
// grow with the pool.
func TestMetricsPerRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		routes  int
		mode    PerRoute
		byRoute bool
	}{
		{"auto, a small pool", 10, PerRouteAuto, true},
		{"auto, at the threshold", PerRouteAutoMax, PerRouteAuto, true},
		{"auto, above the threshold", PerRouteAutoMax + 1, PerRouteAuto, false},
		{"auto, 5,000 routes", 5000, PerRouteAuto, false},
		{"on, 5,000 routes", 5000, PerRouteOn, true},
		{"off, a small pool", 10, PerRouteOff, false},
		{"off, 5,000 routes", 5000, PerRouteOff, false},
	}
	// The samples without per-route series, whatever the pool's size.
	var pool atomic.Int64
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e, s := newPool(t, tc.routes)
			s.metrics.SetPerRoute(tc.mode)
			for _, id := range e.RouteIDs(nil, 0) {
				s.metrics.ObserveAttempt(id, engine.OK, time.Millisecond)
			}
			samples, byRoute, body := scrape(t, s)
			switch {
			case tc.byRoute && byRoute != 3*tc.routes:
				t.Errorf("%d series labelled by route, want 3 per route (attempts, inflight, score)", byRoute)
			case !tc.byRoute && byRoute != 0:
				t.Errorf("%d series labelled by route, want none", byRoute)
			case !tc.byRoute:
				if p := pool.Swap(int64(samples)); p != 0 && p != int64(samples) {
					t.Errorf("%d samples, %d in another pool without per-route series", samples, p)
				}
			}
			for _, pooled := range []string{`switchyard_attempt_seconds_count{class="ok"} ` + strconv.Itoa(tc.routes), `switchyard_routes{state="candidate"} `} {
				if !strings.Contains(body, pooled) {
					t.Errorf("no %s", pooled)
				}
			}
		})
	}
}

// TestMetricsPerRouteFollowsReloads checks that under auto the series
// labelled by route go once the pool grows past the threshold, as a
// reload adding routes grows it, and that those counted until then are
// dropped.
func TestMetricsPerRouteFollowsReloads(t *testing.T) {
	t.Parallel()
	e, s := newPool(t, PerRouteAutoMax)
	s.metrics.ObserveAttempt("r00001", engine.OK, time.Millisecond)
	if _, byRoute, _ := scrape(t, s); byRoute != 2*PerRouteAutoMax+1 {
		t.Fatalf("%d series labelled by route at the threshold", byRoute)
	}
	if err := e.AddRoute(time.Now(), engine.RouteSpec{ID: "one-more"}); err != nil {
		t.Fatal(err)
	}
	s.metrics.ObserveAttempt("r00001", engine.OK, time.Millisecond)
	if _, byRoute, _ := scrape(t, s); byRoute != 0 {
		t.Errorf("%d series labelled by route past the threshold", byRoute)
	}
	// Turned on again, by hand: nothing counted before shows.
	s.metrics.SetPerRoute(PerRouteOn)
	if _, _, body := scrape(t, s); strings.Contains(body, "switchyard_attempts_total{") {
		t.Errorf("attempts kept from while the series were on:\n%s", body)
	}
}

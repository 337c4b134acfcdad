package admin

import (
	"net/http"
	"strings"
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

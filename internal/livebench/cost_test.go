package livebench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBulkSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want int64
	}{
		{"/bulk/1", 1},
		{"/bulk/104857600", 100 << 20},
		{"/bulk/1073741824", maxBulk},
		{"/bulk/1073741825", 0}, // more than a site streams
		{"/bulk/0", 0},
		{"/bulk/-5", 0},
		{"/bulk/ten", 0},
		{"/bulk/", 0},
		{"/p/1", 0},
		{"/x/bulk/5", 0},
	}
	for _, tt := range tests {
		if got := bulkSize(tt.path); got != tt.want {
			t.Errorf("bulkSize(%q) = %d, want %d", tt.path, got, tt.want)
		}
	}
}

func TestInterleaveRotates(t *testing.T) {
	t.Parallel()
	var order []int
	if err := interleave(3, 3, func(i int) error { order = append(order, i); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 1, 2, 0, 2, 0, 1}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestRunnable(t *testing.T) {
	t.Parallel()
	cs := []contender{
		{name: "a", missing: always},
		{name: "b", missing: func(Options) string { return "b is not on PATH" }},
		{name: "c", missing: always},
	}
	tests := []struct {
		desc        string
		contenders  []string
		run         []string
		skippedWant []string
	}{
		{"all", nil, []string{"a", "c"}, []string{"b: skipped, b is not on PATH"}},
		{"a subset", []string{"c"}, []string{"c"}, nil},
		{"a subset with the missing one", []string{"a", "b"}, []string{"a"}, []string{"b: skipped, b is not on PATH"}},
	}
	for _, tt := range tests {
		run, skipped := runnable(cs, Options{Contenders: tt.contenders})
		var names []string
		for _, c := range run {
			names = append(names, c.name)
		}
		if !slices.Equal(names, tt.run) || !slices.Equal(skipped, tt.skippedWant) {
			t.Errorf("%s: run %v skipped %v, want %v and %v", tt.desc, names, skipped, tt.run, tt.skippedWant)
		}
	}
}

// costCellsOf is a report's cells for one contender: every cell gets
// res, the tunnel cell tunnel.
func costCellsOf(res, tunnel cellResult) []cellResult {
	cells := make([]cellResult, len(costCells))
	for k := range cells {
		cells[k] = res
	}
	cells[cellIndex("tunnel")] = tunnel
	return cells
}

// latencies are n latencies, the last of them (the p99 of 100) slow.
func latencies(n int, fast, slow time.Duration) []time.Duration {
	l := make([]time.Duration, n)
	for i := range l {
		l[i] = fast
	}
	l[n-1] = slow
	return l
}

func TestCostReportRatios(t *testing.T) {
	t.Parallel()
	sec := time.Second
	full := costReport{
		opts:  Options{Duration: 4 * time.Second, Rounds: 2, Timeout: 3 * time.Second},
		order: []string{costDirect, costHAProxy, costGoFloor, costSwitchyard},
		cells: map[string][]cellResult{
			costDirect: costCellsOf(
				cellResult{ops: 100, elapsed: sec, latencies: latencies(100, 100*time.Microsecond, time.Millisecond)},
				cellResult{ops: 1, bytes: 100 << 20, elapsed: sec / 10, latencies: []time.Duration{sec / 10}}),
			costHAProxy: costCellsOf(
				cellResult{ops: 80, elapsed: sec, cpu: 8 * time.Millisecond, hasCPU: true, latencies: latencies(100, 200*time.Microsecond, 3*time.Millisecond)},
				cellResult{ops: 1, bytes: 100 << 20, elapsed: sec / 4, cpu: 80 * time.Millisecond, hasCPU: true, latencies: []time.Duration{sec / 4}}),
			costGoFloor: costCellsOf(
				cellResult{ops: 60, elapsed: sec, cpu: 9 * time.Millisecond, hasCPU: true, latencies: latencies(100, 150*time.Microsecond, 2*time.Millisecond)},
				cellResult{ops: 1, bytes: 100 << 20, elapsed: sec / 2, cpu: 40 * time.Millisecond, hasCPU: true, latencies: []time.Duration{sec / 2}}),
			costSwitchyard: costCellsOf(
				cellResult{ops: 40, failed: 2, firstErr: "502 Bad Gateway", elapsed: sec, cpu: 12 * time.Millisecond, hasCPU: true, latencies: latencies(100, 300*time.Microsecond, 5*time.Millisecond)},
				cellResult{ops: 1, bytes: 100 << 20, elapsed: sec / 5, cpu: 20 * time.Millisecond, hasCPU: true, latencies: []time.Duration{sec / 5}}),
		},
	}
	noHAProxy := full
	noHAProxy.order = []string{costDirect, costSwitchyard}
	noHAProxy.cells = map[string][]cellResult{costDirect: full.cells[costDirect], costSwitchyard: full.cells[costSwitchyard]}
	noHAProxy.skipped = []string{"haproxy: skipped, haproxy is not on PATH"}

	get16, tunnel := cellIndex("get16"), cellIndex("tunnel")
	tests := []struct {
		desc        string
		rep         costReport
		wantMetrics map[string]float64
		wantLines   []string
	}{
		{
			desc: "every contender",
			rep:  full,
			wantMetrics: map[string]float64{
				"switchyard/haproxy_get16_rate": 0.5, "switchyard/haproxy_get16_cpu": 3, // 300 µs ÷ 100 µs per request
				"switchyard/haproxy_tunnel_rate": 1.25, "switchyard/haproxy_tunnel_cpu": 0.25,
				"switchyard/go-floor_get16_rate": 40.0 / 60, "switchyard/go-floor_tunnel_rate": 2.5,
				"switchyard_added_p99_ms_get16":   4,
				"switchyard/upstream_tunnel_rate": 0.5,
			},
			wantLines: []string{
				"| GET, 16 keep-alive clients | switchyard | 40 req/s | 300 µs | 5.0 ms | 300 µs/req | 2 |",
				"| GET, 16 keep-alive clients | direct | 100 req/s | 100 µs | 1.0 ms | — | 0 |",
				"| 100 MiB through one tunnel, one at a time | haproxy | 400 MiB/s | 250 ms | 250 ms | 80 ms/transfer | 0 |",
				"| GET, 16 keep-alive clients | 0.50 | 3.00 | 0.67 | 2.00 | 0.75 | 0.40 | 0.80 | +4.0 ms | +2.0 ms |",
				"| 100 MiB through one tunnel, one at a time | 1.25 | 0.25 | 2.50 | 0.50 | 0.50 | 0.50 | 0.40 | +100 ms | +150 ms |",
				"- switchyard's added p99 over direct at 16 clients: +4.0 ms",
				"- 100 MiB through one tunnel, one at a time: switchyard 0.50× the upstream alone's throughput, haproxy 0.40×",
				"- switchyard, GET, 1 keep-alive client: 2 failed, the first: 502 Bad Gateway",
				"4s per cell per contender in 2 round(s)",
			},
		},
		{
			desc: "without HAProxy",
			rep:  noHAProxy,
			wantMetrics: map[string]float64{
				"switchyard_added_p99_ms_get16":   4,
				"switchyard/upstream_tunnel_rate": 0.5,
			},
			wantLines: []string{
				"| haproxy: skipped, haproxy is not on PATH |",
				"| GET, 16 keep-alive clients | — | — | — | — | — | 0.40 | — | +4.0 ms | — |",
				"- 100 MiB through one tunnel, one at a time: switchyard 0.50× the upstream alone's throughput, haproxy —×",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got := map[string]float64{}
			tt.rep.reportMetrics(func(v float64, unit string) { got[unit] = v })
			for unit, want := range tt.wantMetrics {
				if v, ok := got[unit]; !ok || v < want*0.999 || v > want*1.001 {
					t.Errorf("metric %s = %v (reported %v), want %v", unit, v, ok, want)
				}
			}
			if _, ok := got["switchyard/haproxy_get16_rate"]; ok != (tt.rep.cells[costHAProxy] != nil) {
				t.Errorf("a ratio to haproxy reported %v with haproxy's cells %v", ok, tt.rep.cells[costHAProxy] != nil)
			}
			var b strings.Builder
			tt.rep.write(&b)
			for _, line := range tt.wantLines {
				if !strings.Contains(b.String(), line) {
					t.Errorf("report lacks %q:\n%s", line, b.String())
				}
			}
		})
	}
	if _, ok := full.addedP99(costSwitchyard, get16); !ok {
		t.Error("no added p99 with direct's cells")
	}
	if _, ok := full.cpuRatio(costSwitchyard, costDirect, tunnel); ok {
		t.Error("a CPU ratio to a contender without CPU")
	}
}

// TestRunCostDirect runs every cell once, briefly, with the one contender
// in the benchmark's process: the fleet, the cells' clients, the tunnel's
// bulk transfer and the report's wiring, without a gateway to build.
func TestRunCostDirect(t *testing.T) {
	direct := costContenders(nil, "")[0]
	opts := Options{Duration: 200 * time.Millisecond, Contenders: []string{costDirect}}.withDefaults()
	rep, err := runCost(t.Context(), []contender{direct}, opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for k, cell := range costCells {
		res := rep.cells[costDirect][k]
		if res.ops == 0 || res.failed != 0 || res.hasCPU || len(res.latencies) != res.ops {
			t.Errorf("%s: %d ok, %d failed (%s), CPU %v, %d latencies", cell.name, res.ops, res.failed, res.firstErr, res.hasCPU, len(res.latencies))
		}
		if res.elapsed < opts.Duration {
			t.Errorf("%s: a load of %v ended after %v", cell.name, opts.Duration, res.elapsed)
		}
	}
	if r := rep.cells[costDirect][cellIndex("tunnel")]; r.bytes != int64(r.ops)*tunnelBytes {
		t.Errorf("%d tunnels pulled %d bytes", r.ops, r.bytes)
	}
}

package livebench

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/sim"
)

func TestShapeKind(t *testing.T) {
	t.Parallel()
	sites := []string{"shop.test", "news.test"}
	tests := []struct {
		shape Shape
		want  string
	}{
		{fast(), "fast"},
		{slow(), "slow"},
		{dead(), "dead"},
		{blackholed(), "blackholed"},
		{auth407(), "407"},
		{flaky(), "flaky"},
		{fast().blackholedDuring(0.2, 0.6), "fast+blackholed 20–60%"},
		{fast().on("shop.test", banned), "fast+banned@shop.test"},
		{slow().on("news.test", captcha).on("shop.test", rateLimited(2, time.Second)).on("news.test", rateLimited(2, time.Second)),
			"slow+captcha@news.test+limited@all"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.shape.kind(sites); got != tt.want {
				t.Fatalf("kind = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPoolsAreValidAndSmall(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, p := range pools() {
		if names[p.name] {
			t.Errorf("pool %s twice", p.name)
		}
		names[p.name] = true
		if _, err := newWorld(p.shapes, siteNames(), 1); err != nil {
			t.Errorf("pool %s: %v", p.name, err)
		}
		if n := len(p.shapes); n < 3 || n > 30 {
			t.Errorf("pool %s has %d exits", p.name, n)
		}
	}
	if len(names) != 9 {
		t.Errorf("%d pools, want the eight cases a–f, h and i and the healthy reference", len(names))
	}
}

func TestReportTable(t *testing.T) {
	t.Parallel()
	p := pool{name: "x", about: "two exits", shapes: []Shape{fast(), slow()}}
	rep := poolReport{pool: p, opts: Options{}.withDefaults(), skipped: []string{"haproxy: skipped, haproxy is not on PATH"}, rows: []row{
		{contender: "oracle", res: loadResult{elapsed: 10 * time.Second, completed: 1000, attempts: 1000,
			latencies: []time.Duration{time.Millisecond}, outcomes: tallies{"ok": {1000, time.Second}}}, exitRequests: []int64{1000, 0}},
		{contender: "switchyard", res: loadResult{elapsed: 10 * time.Second, completed: 250, failed: 250, attempts: 500,
			latencies: []time.Duration{time.Millisecond, time.Second}, outcomes: tallies{"ok": {250, time.Second}, "client timeout": {250, 3 * time.Second}}},
			exitRequests: []int64{300, 200}, cpu: 50 * time.Millisecond, hasCPU: true, notes: []string{"a note"}},
	}}
	if got := rep.vsOracle()["switchyard"]; got != 0.25 {
		t.Fatalf("switchyard ÷ oracle = %v, want 0.25", got)
	}
	reportHas(t, rep,
		"| oracle | 100.0 | 1.00 | 100.0% | 1.00 | 1.00 |",
		"| switchyard | 25.0 | 0.25 | 50.0% | 2.00 | 2.00 |",
		"| 100 |\n", // CPU µs per request: 50 ms / 500
		"haproxy: skipped, haproxy is not on PATH",
		"client timeout 250 (75% of attempt time), ok 250 (25% of attempt time)",
		"fast×1 300, slow×1 200",
		"  - a note",
	)
}

// reportHas fails t unless rep's report holds every one of wants.
func reportHas(t *testing.T, rep poolReport, wants ...string) {
	t.Helper()
	var b strings.Builder
	rep.write(&b)
	for _, want := range wants {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReportSimulated: the simulator's figures follow the live table, and
// a stand-in more than disagreement from its live contender is named;
// one whose contender did not run is not, nor one that stands for none.
func TestReportSimulated(t *testing.T) {
	t.Parallel()
	run := func(contender string, completed int) row {
		return row{contender: contender, res: loadResult{elapsed: 10 * time.Second, completed: completed, attempts: completed}}
	}
	rows := []row{run("oracle", 1000), run("switchyard", 900), run("haproxy", 500)}
	rep := poolReport{pool: pool{name: "x"}, opts: Options{}.withDefaults(), rows: rows,
		simulated: []sim.Summary{{ThroughputRatio: 1}, {ThroughputRatio: 0.93}, {ThroughputRatio: 0.80}, {ThroughputRatio: 0.2}, {ThroughputRatio: 0.98}}}
	reportHas(t, rep,
		"Simulator, this pool as a scenario (÷ its oracle, completed, p95): oracle 1.00 (0.0%, p95 0 µs), switchyard 0.93",
		"least_loaded (haproxy) 0.80",
		"round_robin 0.20 (0.0%, p95 0 µs), oracle_learning 0.98 (0.0%, p95 0 µs)\n",
		"disagree by more than 0.05: least_loaded (haproxy) 0.80 simulated, 0.50 live\n",
	)
}

func TestReportWithoutTheOracleHasNoRatios(t *testing.T) {
	t.Parallel()
	rep := poolReport{pool: pool{name: "x"}, opts: Options{}.withDefaults(), rows: []row{
		{contender: "switchyard", res: loadResult{elapsed: time.Second, completed: 10, attempts: 10}},
	}}
	var b strings.Builder
	rep.write(&b)
	if !strings.Contains(b.String(), "| switchyard | 10.0 | — |") {
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP switchyard_attempts_total Attempts.
# TYPE switchyard_attempts_total counter
switchyard_attempts_total{class="ok",route="http://127.0.0.1:1"} 12
switchyard_attempts_total{class="canceled",route="http://127.0.0.1:2"} 3
switchyard_routes{state="healthy"} 2
switchyard_retries_total 5
garbage{
`
	got := parseMetrics(text)
	if len(got) != 4 {
		t.Fatalf("%d samples: %+v", len(got), got)
	}
	if s := got[1]; s.name != "switchyard_attempts_total" || s.labels["class"] != "canceled" || s.labels["route"] != "http://127.0.0.1:2" || s.value != 3 {
		t.Fatalf("second sample %+v", s)
	}
	if s := got[3]; s.name != "switchyard_retries_total" || s.value != 5 {
		t.Fatalf("last sample %+v", s)
	}
}

func TestFormatCounts(t *testing.T) {
	t.Parallel()
	if got := formatCounts(map[string]float64{"b": 1, "a": 1, "c": 5, "z": 0}); got != "c 5, a 1, b 1" {
		t.Fatalf("got %q", got)
	}
	if got := formatCounts(nil); got != "none" {
		t.Fatalf("got %q", got)
	}
}

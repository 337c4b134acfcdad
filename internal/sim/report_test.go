package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// writeFailer fails every write, to check that errors reach the caller.
type writeFailer struct{}

func (writeFailer) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTableLayout(t *testing.T) {
	t.Parallel()
	summaries := []Summary{
		{Scenario: "dead-exits", Policy: "oracle", Throughput: 152.3, ThroughputRatio: 1, CompletionRate: 1, AttemptsPerCompleted: 1, P50ms: 80, P95ms: 120, P99ms: 150},
		{Scenario: "dead-exits", Policy: "switchyard", Throughput: 150.1, ThroughputRatio: 0.9855, CompletionRate: 0.9987, AttemptsPerCompleted: 1.04, WastedAttempts: 312,
			P50ms: 85, P95ms: 240, P99ms: 900, DetectMs: 3200, RecoverMs: 15000, FalseEjections: 1, IncidentAttempts: 3},
		{Scenario: "site-down", Policy: "random", CompletionRate: 0.5, AttemptsPerCompleted: 2.5, DetectMs: -1, RecoverMs: -1},
		{Scenario: "dead-exits", Policy: "round-robin", Throughput: 20.04, ThroughputRatio: 0.1316, CompletionRate: 0.91, AttemptsPerCompleted: 1.6, WastedAttempts: 41234,
			P50ms: 85, P95ms: 3100, P99ms: 10000, DetectMs: -1, RecoverMs: 1000, IncidentAttempts: 120},
	}
	want := `scenario dead-exits
policy       tasks/s   vs oracle   completion   att/compl   wasted   p50 ms   p95 ms   p99 ms   detect ms   recover ms   false ej   incident att
oracle         152.3       1.000      100.00%        1.00        0       80      120      150           0            0          0              0
switchyard     150.1*      0.986*      99.87%*       1.04*     312*      85      240*     900*       3200*       15000          1              3*
round-robin     20.0       0.132       91.00%        1.60    41234       85     3100    10000           -         1000*         0*           120

scenario site-down
policy       tasks/s   vs oracle   completion   att/compl   wasted   p50 ms   p95 ms   p99 ms   detect ms   recover ms   false ej   incident att
random           0.0           -       50.00%        2.50        0        0        0        0           -            -          0              0
`
	var b bytes.Buffer
	if err := WriteTable(&b, summaries); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != want {
		t.Errorf("WriteTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableBest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		summaries []Summary
		// wantStars lists, per policy in order, the column heads marked best.
		wantStars [][]string
	}{
		{
			desc: "the oracles never win",
			summaries: []Summary{
				{Policy: "oracle", CompletionRate: 1, WastedAttempts: 0},
				{Policy: "a", CompletionRate: 0.9, WastedAttempts: 5},
				{Policy: "b", CompletionRate: 0.8, WastedAttempts: 4},
				{Policy: "oracle_learning", CompletionRate: 0.95, WastedAttempts: 1},
			},
			wantStars: [][]string{nil, {"completion"}, {"wasted"}, nil},
		},
		{
			desc: "visible ties share the mark",
			summaries: []Summary{
				{Policy: "a", CompletionRate: 0.99991, P50ms: 10.4},
				{Policy: "b", CompletionRate: 0.99992, P50ms: 9.6},
				{Policy: "c", CompletionRate: 0.5, P50ms: 20},
			},
			wantStars: [][]string{{"completion", "p50 ms"}, {"completion", "p50 ms"}},
		},
		{
			desc: "all tied: no mark",
			summaries: []Summary{
				{Policy: "a", FalseEjections: 2, AttemptsPerCompleted: 1},
				{Policy: "b", FalseEjections: 2, AttemptsPerCompleted: 1},
			},
		},
		{
			desc: "a missing time ranks last",
			summaries: []Summary{
				{Policy: "a", DetectMs: -1, RecoverMs: 500},
				{Policy: "b", DetectMs: 900, RecoverMs: -1},
			},
			wantStars: [][]string{{"recover ms"}, {"detect ms"}},
		},
		{
			desc: "non-finite values are missing",
			summaries: []Summary{
				{Policy: "a", CompletionRate: 0.5, AttemptsPerCompleted: math.Inf(1)},
				{Policy: "b", CompletionRate: 0.5, AttemptsPerCompleted: 3},
			},
			wantStars: [][]string{nil, {"att/compl"}},
		},
		{
			desc:      "one policy: nothing to compare",
			summaries: []Summary{{Policy: "a", CompletionRate: 0.7, DetectMs: 10}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WriteTable(&b, tt.summaries); err != nil {
				t.Fatal(err)
			}
			rows := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")[2:] // after scenario and column heads
			if len(rows) != len(tt.summaries) {
				t.Fatalf("got %d rows, want %d:\n%s", len(rows), len(tt.summaries), b.String())
			}
			// These summaries have no price and one seed each.
			shown := slices.DeleteFunc(slices.Clone(tableColumns), func(c tableColumn) bool { return c.priced || c.seeded })
			for i, row := range rows {
				// Cells hold no spaces, so fields are the policy and the columns.
				var stars []string
				for j, cell := range strings.Fields(row)[1:] {
					if strings.HasSuffix(cell, "*") {
						stars = append(stars, shown[j].head)
					}
				}
				var want []string
				if i < len(tt.wantStars) {
					want = tt.wantStars[i]
				}
				if !slices.Equal(stars, want) {
					t.Errorf("%s: marked %q, want %q\n%s", tt.summaries[i].Policy, stars, want, b.String())
				}
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	summaries := []Summary{
		{Scenario: "s", Policy: "a", Tasks: 10, Completed: 9, CompletionRate: 0.9, DetectMs: -1,
			Series: []Point{{At: 1, Completion: 1}}},
		{Scenario: "s", Policy: "b<&>", P99ms: 12.5},
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, summaries); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(summaries) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(summaries), b.String())
	}
	for i, line := range lines {
		var got Summary
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		want := summaries[i]
		want.Series = nil // not part of the JSON
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d = %+v, want %+v", i, got, want)
		}
	}
	if !strings.Contains(lines[0], `"completion_rate":0.9`) {
		t.Errorf("line 0 lacks the json tag names: %s", lines[0])
	}
}

func TestWriteErrors(t *testing.T) {
	t.Parallel()
	summaries := []Summary{{Scenario: "s", Policy: "a"}}
	tests := []struct {
		desc  string
		write func() error
	}{
		{"table", func() error { return WriteTable(writeFailer{}, summaries) }},
		{"json", func() error { return WriteJSON(writeFailer{}, summaries) }},
		{"plot", func() error { return WritePlot(writeFailer{}, "s", summaries) }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if err := tt.write(); err == nil {
				t.Error("write error not returned")
			}
		})
	}
}

// The cost column is there for a scenario whose routes have prices, and
// only for it.
func TestWriteTablePriced(t *testing.T) {
	t.Parallel()
	summaries := []Summary{
		{Scenario: "tiers", Policy: "cheap", Throughput: 10, CompletionRate: 1, Spend: 5, CostPerCompleted: 0.25},
		{Scenario: "tiers", Policy: "costly", Throughput: 10, CompletionRate: 1, Spend: 20, CostPerCompleted: 1},
		{Scenario: "plain", Policy: "any", Throughput: 10, CompletionRate: 1},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, summaries); err != nil {
		t.Fatal(err)
	}
	tables := strings.Split(b.String(), "\n\n")
	if len(tables) != 2 || !strings.Contains(tables[0], "cost/task") || !strings.Contains(tables[0], "0.250*") || strings.Contains(tables[1], "cost/task") {
		t.Errorf("WriteTable:\n%s\nwant cost/task in the priced scenario's table alone, the cheaper marked", b.String())
	}
}

func TestWriteTableSeeded(t *testing.T) {
	t.Parallel()
	one := []Summary{{Scenario: "a", Policy: "p", Throughput: 10, ThroughputRatio: 0.9, CompletionRate: 1}}
	mean := []Summary{{Scenario: "a", Policy: "p", Throughput: 10, ThroughputRatio: 0.9, RatioMin: 0.85, RatioMax: 0.95, Seeds: 4, CompletionRate: 1}}
	var b bytes.Buffer
	if err := WriteTable(&b, one); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "seeds") || strings.Contains(b.String(), " min ") {
		t.Errorf("one seed's table:\n%s\nwant no seeds and no range", b.String())
	}
	b.Reset()
	if err := WriteTable(&b, mean); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "mean of 4 seeds") || !strings.Contains(b.String(), "0.850") || !strings.Contains(b.String(), "0.950") {
		t.Errorf("averaged table:\n%s\nwant the seeds counted and the ratio's range", b.String())
	}
}

package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAverage(t *testing.T) {
	t.Parallel()
	run := func(ratio, p95, detect float64, wasted int) []Summary {
		return []Summary{{Scenario: "s", Policy: "switchyard", Throughput: 100 * ratio, ThroughputRatio: ratio, CompletionRate: ratio,
			WastedAttempts: wasted, P95ms: p95, DetectMs: detect, RecoverMs: -1, Series: []Point{{At: time.Second}}}}
	}
	tests := []struct {
		desc string
		runs [][]Summary
		want Summary
	}{
		{"one run is as it is", [][]Summary{run(0.9, 300, 1000, 3)}, run(0.9, 300, 1000, 3)[0]},
		{"means, ratio range, counts rounded, times over the runs that reached them",
			[][]Summary{run(0.8, 300, -1, 1), run(1.0, 500, 2000, 2), run(0.9, 400, 4000, 2)},
			Summary{Scenario: "s", Policy: "switchyard", Seeds: 3, Throughput: 90, ThroughputRatio: 0.9, RatioMin: 0.8, RatioMax: 1,
				CompletionRate: 0.9, WastedAttempts: 2, P95ms: 400, DetectMs: 3000, RecoverMs: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got := Average(tt.runs)
			if len(got) != 1 {
				t.Fatalf("Average: %d summaries, want 1", len(got))
			}
			// Float sums differ in the last bit from the written means.
			const eps = 1e-9
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"throughput", got[0].Throughput, tt.want.Throughput}, {"ratio", got[0].ThroughputRatio, tt.want.ThroughputRatio},
				{"completion", got[0].CompletionRate, tt.want.CompletionRate}, {"p95", got[0].P95ms, tt.want.P95ms},
			} {
				if d := f.got - f.want; d > eps || d < -eps {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			got[0].Throughput, got[0].ThroughputRatio, got[0].CompletionRate, got[0].P95ms = tt.want.Throughput, tt.want.ThroughputRatio, tt.want.CompletionRate, tt.want.P95ms
			if !reflect.DeepEqual(got[0], tt.want) {
				t.Errorf("Average =\n%+v\nwant\n%+v", got[0], tt.want)
			}
		})
	}
}

// TestBenchSeedsAveragesEachSeedsBench checks that BenchSeeds is the
// average of Bench on each seed in turn, each against its own oracle.
func TestBenchSeedsAveragesEachSeedsBench(t *testing.T) {
	t.Parallel()
	sc, err := Builtin("pool-of-3")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration = 20 * time.Second
	opts := Options{Policies: []string{"least_loaded", "switchyard", "oracle"}}
	got, err := BenchSeeds(sc, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]Summary
	for _, seed := range []uint64{sc.Seed, sc.Seed + 1} {
		seeded := *sc
		seeded.Seed = seed
		out, err := Bench(&seeded, opts)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, out)
	}
	if reflect.DeepEqual(runs[0][1].Throughput, runs[1][1].Throughput) {
		t.Fatalf("seeds %d and %d ran alike: the seed was not used", sc.Seed, sc.Seed+1)
	}
	want := Average(runs)
	for i := range got {
		got[i].AttemptsPerSecond, want[i].AttemptsPerSecond = 0, 0 // wall-clock speed
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BenchSeeds =\n%+v\nwant the average of each seed's Bench\n%+v", got, want)
	}
	if got[2].ThroughputRatio != 1 || got[1].Seeds != 2 || got[1].RatioMin > got[1].ThroughputRatio || got[1].RatioMax < got[1].ThroughputRatio {
		t.Errorf("switchyard %+v, oracle %+v: want the oracle at 1 and the mean within its range", got[1], got[2])
	}
	if _, err := BenchSeeds(sc, 0, opts); err == nil || !strings.Contains(err.Error(), "seeds") {
		t.Errorf("BenchSeeds(0) = %v, want an error naming seeds", err)
	}
}

package sim

import (
	"testing"
	"time"
)

// TestOracleIsAnUpperBound: on every built-in scenario, no policy gets
// meaningfully more work done than the oracle, which knows the ground
// truth and sends each attempt where it will be answered soonest.
func TestOracleIsAnUpperBound(t *testing.T) {
	t.Parallel()
	for _, name := range BuiltinNames() {
		if name == "large" {
			continue // minutes of simulation; the bench runs it
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			sc.Duration = min(sc.Duration, time.Minute)
			out, err := Bench(sc, Options{Policies: []string{"round_robin", "least_loaded", "fastest", "switchyard", "oracle"}, Parallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			oracle := out[len(out)-1]
			for _, s := range out[:len(out)-1] {
				if s.ThroughputRatio > 1.02 {
					t.Errorf("%s did %.1f tasks/s, %.3f of the oracle's %.1f", s.Policy, s.Throughput, s.ThroughputRatio, oracle.Throughput)
				}
				if s.Scenario != name || s.SimulatedSeconds != 60 {
					t.Errorf("summary %+v", s)
				}
			}
		})
	}
}

func TestParseSweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, in string
		want     *Sweep
		err      bool
	}{
		{"one value", "gamma=2", &Sweep{Param: "gamma", Values: []float64{2}}, false},
		{"several", "cool_after=2, 3,4", &Sweep{Param: "cool_after", Values: []float64{2, 3, 4}}, false},
		{"no values", "gamma=", nil, true},
		{"no equals", "gamma", nil, true},
		{"unknown", "beta=1", nil, true},
		{"not a number", "alpha=x", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSweep(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("error %v, want error %v", err, tt.err)
			}
			if tt.want != nil && (got.Param != tt.want.Param || len(got.Values) != len(tt.want.Values)) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

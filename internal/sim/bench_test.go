package sim

import (
	"testing"
)

// TestOracleIsAnUpperBound: on every built-in scenario whose faults are
// states (not load), no policy completes meaningfully more tasks than the
// oracle. rate-limited is load-driven: the oracle knows which routes are
// penalized now, not how much load each can take, so blind round-robin's
// even spread beats it there (see README).
func TestOracleIsAnUpperBound(t *testing.T) {
	t.Parallel()
	for _, name := range BuiltinNames() {
		if name == "rate-limited" || name == "large" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			sc.Tasks = 3000
			out, err := Bench(sc, Options{Policies: []string{"round_robin", "proxyops", "switchyard", "oracle"}, Parallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			oracle := out[len(out)-1]
			for _, s := range out[:len(out)-1] {
				if s.CompletionRate > oracle.CompletionRate+0.005 {
					t.Errorf("%s completed %.4f, oracle %.4f", s.Policy, s.CompletionRate, oracle.CompletionRate)
				}
				if s.Scenario != name || s.Tasks != 3000 {
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

package sim

import "testing"

// TestLookalikeInTheWorld: the gateway's lookalike detector, which the
// runner judges every page with (runner.judge), finds the soft-ban pages
// of the built-in scenarios with no signature configured, and never fires
// on a page asked for, the identical-pages API's one JSON page included.
func TestLookalikeInTheWorld(t *testing.T) {
	t.Parallel()
	// maxPassed is the share of soft-ban pages that may pass as pages:
	// the detector's cold start.
	const maxPassed = 0.05
	for _, name := range []string{"soft-ban", "identical-pages"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Bench(sc, Options{Policies: []string{"round_robin", "switchyard"}, Parallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range out {
				if s.FalseContentInvalid != 0 {
					t.Errorf("%s: %d pages asked for judged content_invalid", s.Policy, s.FalseContentInvalid)
				}
				t.Logf("%s: %d soft-ban pages passed, %d wasted attempts", s.Policy, s.DecoysPassed, s.WastedAttempts)
			}
			// Round-robin sends its share to the soft-banned routes
			// whatever they answer: its wasted attempts are nearly all
			// soft-ban pages, which the detector should mostly catch.
			rr := out[0]
			if rr.WastedAttempts == 0 || float64(rr.DecoysPassed) > maxPassed*float64(rr.WastedAttempts) {
				t.Errorf("round_robin: %d of %d soft-ban pages passed as pages, want at most %.0f%%", rr.DecoysPassed, rr.WastedAttempts, 100*maxPassed)
			}
		})
	}
}

package sim

import (
	"errors"
	"fmt"
	"math"
)

// BenchSeeds runs Bench on seeds of the scenario, its own seed and the
// seeds-1 after it, and averages each policy's summaries over them
// (Average). One seed of a scenario where exits trip limits or bans is
// one draw of a chaotic process: a trip a second earlier or later moves
// its figures by a few percent, so a comparison of policies, or of an
// engine change, is only as good as the seeds it was averaged over.
func BenchSeeds(sc *Scenario, seeds int, opts Options) ([]Summary, error) {
	if seeds < 1 {
		return nil, errors.New("sim: seeds must be at least 1")
	}
	if sc.Seed > math.MaxUint64-uint64(seeds-1) {
		return nil, fmt.Errorf("sim: scenario %s: seed %d leaves no room for %d more", sc.Name, sc.Seed, seeds-1)
	}
	runs := make([][]Summary, seeds)
	for i := range runs {
		seeded := *sc
		seeded.Seed = sc.Seed + uint64(i)
		out, err := Bench(&seeded, opts)
		if err != nil {
			return nil, err
		}
		runs[i] = out
	}
	return Average(runs), nil
}

// Average merges runs of the same policies on the same scenario, one run
// per seed, into one summary per policy: the mean of each figure (counts
// rounded; a time to detect or recover over the seeds that reached it),
// the throughput ratio as the mean of each seed's ratio to that seed's
// oracle, with its lowest and highest in RatioMin and RatioMax, and no
// Series (a plot is of one run). A single run is returned as it is.
func Average(runs [][]Summary) []Summary {
	if len(runs) == 1 {
		return runs[0]
	}
	out := make([]Summary, len(runs[0]))
	for p := range out {
		all := make([]Summary, len(runs))
		for i, run := range runs {
			all[i] = run[p]
		}
		out[p] = average(all)
	}
	return out
}

// average is Average for one policy's runs.
func average(all []Summary) Summary {
	n := float64(len(all))
	mean := func(f func(Summary) float64) float64 {
		sum := 0.0
		for _, s := range all {
			sum += f(s)
		}
		return sum / n
	}
	count := func(f func(Summary) int) int {
		return int(math.Round(mean(func(s Summary) float64 { return float64(f(s)) })))
	}
	// reached is the mean of a time over the runs that measured it
	// (negative: never reached), negative when none did.
	reached := func(f func(Summary) float64) float64 {
		sum, k := 0.0, 0
		for _, s := range all {
			if v := f(s); v >= 0 {
				sum += v
				k++
			}
		}
		if k == 0 {
			return f(all[0])
		}
		return sum / float64(k)
	}
	s := Summary{
		Scenario: all[0].Scenario, Policy: all[0].Policy, Seeds: len(all),
		Throughput:           mean(func(s Summary) float64 { return s.Throughput }),
		ThroughputRatio:      mean(func(s Summary) float64 { return s.ThroughputRatio }),
		Tasks:                count(func(s Summary) int { return s.Tasks }),
		Completed:            count(func(s Summary) int { return s.Completed }),
		CompletionRate:       mean(func(s Summary) float64 { return s.CompletionRate }),
		Attempts:             count(func(s Summary) int { return s.Attempts }),
		AttemptsPerCompleted: mean(func(s Summary) float64 { return s.AttemptsPerCompleted }),
		Hedges:               count(func(s Summary) int { return s.Hedges }),
		WastedAttempts:       count(func(s Summary) int { return s.WastedAttempts }),
		P50ms:                mean(func(s Summary) float64 { return s.P50ms }),
		P95ms:                mean(func(s Summary) float64 { return s.P95ms }),
		P99ms:                mean(func(s Summary) float64 { return s.P99ms }),
		DetectMs:             reached(func(s Summary) float64 { return s.DetectMs }),
		RecoverMs:            reached(func(s Summary) float64 { return s.RecoverMs }),
		FalseEjections:       count(func(s Summary) int { return s.FalseEjections }),
		IncidentAttempts:     count(func(s Summary) int { return s.IncidentAttempts }),
		SessionRestarts:      count(func(s Summary) int { return s.SessionRestarts }),
		Spend:                mean(func(s Summary) float64 { return s.Spend }),
		CostPerCompleted:     mean(func(s Summary) float64 { return s.CostPerCompleted }),
		FalseContentInvalid:  count(func(s Summary) int { return s.FalseContentInvalid }),
		DecoysPassed:         count(func(s Summary) int { return s.DecoysPassed }),
		SimulatedSeconds:     mean(func(s Summary) float64 { return s.SimulatedSeconds }),
		AttemptsPerSecond:    mean(func(s Summary) float64 { return s.AttemptsPerSecond }),
	}
	s.RatioMin, s.RatioMax = all[0].ThroughputRatio, all[0].ThroughputRatio
	for _, r := range all[1:] {
		s.RatioMin, s.RatioMax = min(s.RatioMin, r.ThroughputRatio), max(s.RatioMax, r.ThroughputRatio)
	}
	return s
}

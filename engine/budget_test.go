package engine

import (
	"testing"
	"time"
)

// TestBudget lays out a timeline: 100 requests at t0, then what the budget
// allows in the next second and once its window has moved on.
func TestBudget(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc        string
		cfg         BudgetConfig
		hedgesFirst int // hedges asked for before the retries
		retries     int // retries allowed after them
		hedges      int // of the hedges asked for, allowed
	}{
		{desc: "retries: the floor plus the ratio", cfg: DefaultBudget(), retries: budgetFloor + 20},
		{desc: "a larger ratio", cfg: BudgetConfig{BudgetRatio: 0.5, HedgeRatio: 0.05}, retries: budgetFloor + 50},
		{desc: "hedges: their own cap, no floor, taken from the retry budget",
			cfg: DefaultBudget(), hedgesFirst: 50, hedges: 5, retries: budgetFloor + 20 - 5},
		{desc: "hedging off", cfg: BudgetConfig{BudgetRatio: 0.2}, hedgesFirst: 50, hedges: 0, retries: budgetFloor + 20},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			b := NewBudget(tt.cfg)
			for range 100 {
				b.Request(t0)
			}
			at := t0.Add(time.Second)
			hedges := 0
			for range tt.hedgesFirst {
				if b.Hedge(at) {
					hedges++
				}
			}
			retries := 0
			for range 200 {
				if b.Retry(at) {
					retries++
				}
			}
			if hedges != tt.hedges || retries != tt.retries {
				t.Errorf("allowed %d hedges and %d retries, want %d and %d", hedges, retries, tt.hedges, tt.retries)
			}
			if b.Hedge(at) {
				t.Error("a hedge passed the spent retry budget")
			}
			later := t0.Add(11 * time.Second)
			if !b.Retry(later) {
				t.Error("no retry allowed once the window moved on")
			}
		})
	}
}

package engine

import (
	"math"
	"sync"
	"time"
)

// BudgetConfig tunes a Budget; DefaultBudget holds the defaults. The
// names are the retry section's keys (budget_ratio, hedge_ratio).
type BudgetConfig struct {
	// BudgetRatio caps retries and hedges together at this share of the
	// requests of the last ~10s, plus a floor of 10, so that a failing
	// pool cannot turn into a retry storm (docs/design/007-attempts.md).
	BudgetRatio float64
	// HedgeRatio caps hedges alone at this share of the requests of the
	// last ~10s, within the retry budget; 0 turns hedging off.
	HedgeRatio float64
}

// DefaultBudget is the budget in force unless configured: retries and
// hedges at most 20% of requests, hedges alone at most 5%.
func DefaultBudget() BudgetConfig { return BudgetConfig{BudgetRatio: 0.2, HedgeRatio: 0.05} }

// Budget window: ten one-second buckets, as grpc's retry throttling and
// Envoy's retry budget look at recent traffic only.
const (
	budgetBuckets = 10
	budgetBucket  = time.Second
	// budgetFloor retries per window are always allowed, so that a quiet
	// gateway can still retry its few failures.
	budgetFloor = 10
)

// Budget is the pool-wide budget of extra attempts: retries and hedges
// may take at most a share of recent requests. The attempt loop counts
// each request with Request and asks Retry or Hedge before each extra
// attempt. Time is passed in. Safe for concurrent use.
type Budget struct {
	cfg BudgetConfig // immutable

	mu      sync.Mutex
	buckets [budgetBuckets]budgetCount // guarded by mu; bucket i holds second s with s%budgetBuckets == i
}

type budgetCount struct {
	second                    int64 // Unix second the counts belong to
	requests, retries, hedges int
}

// NewBudget returns a budget with cfg as given.
func NewBudget(cfg BudgetConfig) *Budget { return &Budget{cfg: cfg} }

// Request counts a new client request at now.
func (b *Budget) Request(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucket(now).requests++
}

// Retry reports whether one more retry fits at now, and takes it if so.
func (b *Budget) Retry(now time.Time) bool { return b.take(now, false) }

// Hedge reports whether one more hedge fits at now, and takes it if so: a
// hedge fits the hedge cap and, with the retries, the retry budget.
func (b *Budget) Hedge(now time.Time) bool { return b.cfg.HedgeRatio > 0 && b.take(now, true) }

func (b *Budget) take(now time.Time, hedge bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.bucket(now)
	var requests, retries, hedges int
	for _, c := range b.buckets {
		if cur.second-c.second < budgetBuckets {
			requests += c.requests
			retries += c.retries
			hedges += c.hedges
		}
	}
	if float64(retries+hedges) >= budgetFloor+math.Floor(b.cfg.BudgetRatio*float64(requests)) {
		return false
	}
	if hedge {
		if float64(hedges) >= math.Floor(b.cfg.HedgeRatio*float64(requests)) {
			return false
		}
		cur.hedges++
		return true
	}
	cur.retries++
	return true
}

// bucket returns the bucket of now's second, emptied if it held an older
// second. Caller must hold mu.
func (b *Budget) bucket(now time.Time) *budgetCount {
	s := now.UnixNano() / int64(budgetBucket)
	i := s % budgetBuckets
	if i < 0 { // before 1970: a test clock's zero time
		i += budgetBuckets
	}
	c := &b.buckets[i]
	if c.second != s {
		*c = budgetCount{second: s}
	}
	return c
}

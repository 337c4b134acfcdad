package gateway

import (
	"math"
	"sync"
	"time"
)

// Retry budget window: ten one-second buckets, as grpc's retry throttling
// and Envoy's retry budget look at recent traffic only.
const (
	budgetBuckets = 10
	budgetBucket  = time.Second
	// budgetFloor retries per window are always allowed, so that a quiet
	// gateway can still retry its few failures.
	budgetFloor = 10
)

// retryBudget caps retries pool-wide at a share of recent requests (SPEC
// §2.4): when most exits fail, retrying every request would multiply the
// load on the few good ones.
type retryBudget struct {
	ratio float64 // immutable

	mu      sync.Mutex
	buckets [budgetBuckets]budgetCount // guarded by mu; bucket i holds second s with s%budgetBuckets == i
}

type budgetCount struct {
	second            int64 // Unix second the counts belong to
	requests, retries int
}

func newRetryBudget(ratio float64) *retryBudget { return &retryBudget{ratio: ratio} }

// request counts a new client request at now.
func (b *retryBudget) request(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucket(now).requests++
}

// allow reports whether a retry fits in the budget at now, and counts it
// if so.
func (b *retryBudget) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.bucket(now)
	var requests, retries int
	for _, c := range b.buckets {
		if cur.second-c.second < budgetBuckets {
			requests += c.requests
			retries += c.retries
		}
	}
	if float64(retries) >= budgetFloor+math.Floor(b.ratio*float64(requests)) {
		return false
	}
	cur.retries++
	return true
}

// bucket returns the bucket of now's second, emptied if it held an older
// second. Caller must hold mu.
func (b *retryBudget) bucket(now time.Time) *budgetCount {
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

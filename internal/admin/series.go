package admin

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// latencyBuckets are log-spaced request latency buckets: bucket i holds
// latencies up to 2^(i/4) ms (about 19% apart), from 1 ms to 65 s, so a
// quantile read from them is within one bucket's width of the truth.
const latencyBuckets = 65

// latencyHistogram counts request latencies since start, for the
// dashboard's quantiles; Observe is an atomic add, for the hot path.
type latencyHistogram struct {
	counts [latencyBuckets]atomic.Uint64
}

func (h *latencyHistogram) observe(d time.Duration) { h.counts[bucketOf(d)].Add(1) }

// bucketOf is the bucket of latency d.
func bucketOf(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(4*math.Log2(ms))), latencyBuckets-1)
}

// bucketMS is the upper bound of bucket i, in milliseconds.
func bucketMS(i int) float64 { return math.Exp2(float64(i) / 4) }

// Totals are the gateway's counters since start, as the sampler reads
// them: each point of a Series is the difference of two Totals.
type Totals struct {
	Requests, OK    uint64 // requests that got a route, and of which ended ok
	Attempts        uint64
	Retries, Hedges uint64
	Local           uint64                 // attempts not made for want of the gateway's own resources
	latency         [latencyBuckets]uint64 // requests per latency bucket
}

// totals reads m's counters.
func (m *Metrics) totals() Totals {
	t := Totals{
		Requests: m.requestsTotal.Load(), OK: m.requestsOK.Load(), Attempts: m.attemptsTotal.Load(),
		Retries: m.retriesTotal.Load(), Hedges: m.hedgesTotal.Load(), Local: m.localTotal.Load(),
	}
	for i := range t.latency {
		t.latency[i] = m.latency.counts[i].Load()
	}
	return t
}

// Point is one interval of a Series: the counts between two samples and
// the request latency quantiles in it (0 when no request ended).
type Point struct {
	Time     time.Time // end of the interval
	Seconds  float64   // its length
	Requests uint64
	OK       uint64
	Attempts uint64
	Retries  uint64
	Hedges   uint64
	Local    uint64
	P50MS    float64
	P95MS    float64
}

// Series is a fixed ring of the last points sampled from the gateway's own
// counters, so the dashboard's charts cost bounded memory and need no
// Prometheus. Safe for concurrent use.
type Series struct {
	mu     sync.Mutex
	ring   []Point   // guarded by mu; fixed length
	next   int       // guarded by mu; where the next point goes
	n      int       // guarded by mu; points held
	last   Totals    // guarded by mu; the previous sample
	lastAt time.Time // guarded by mu; when it was taken; zero before the first
}

// NewSeries returns a series holding up to capacity points (at least 1).
func NewSeries(capacity int) *Series {
	return &Series{ring: make([]Point, max(capacity, 1))}
}

// Sample records the interval since the previous sample, ending at now
// with counters t. The first sample only sets the baseline.
func (s *Series) Sample(now time.Time, t Totals) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, at := s.last, s.lastAt
	s.last, s.lastAt = t, now
	if at.IsZero() || !now.After(at) {
		return
	}
	p := Point{
		Time: now, Seconds: now.Sub(at).Seconds(),
		Requests: t.Requests - prev.Requests, OK: t.OK - prev.OK, Attempts: t.Attempts - prev.Attempts,
		Retries: t.Retries - prev.Retries, Hedges: t.Hedges - prev.Hedges, Local: t.Local - prev.Local,
	}
	var delta [latencyBuckets]uint64
	var n uint64
	for i := range delta {
		delta[i] = t.latency[i] - prev.latency[i]
		n += delta[i]
	}
	p.P50MS, p.P95MS = quantile(delta[:], n, 0.5), quantile(delta[:], n, 0.95)
	s.ring[s.next] = p
	s.next = (s.next + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
}

// quantile is the upper bound of the bucket holding the q-quantile of n
// counts, 0 when n is 0.
func quantile(counts []uint64, n uint64, q float64) float64 {
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return bucketMS(i)
		}
	}
	return bucketMS(len(counts) - 1)
}

// Points returns the points held, oldest first.
func (s *Series) Points() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Point, 0, s.n)
	for i := s.n; i >= 1; i-- {
		out = append(out, s.ring[(s.next-i+len(s.ring))%len(s.ring)])
	}
	return out
}

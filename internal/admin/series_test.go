package admin

import (
	"fmt"
	"testing"
	"time"
)

func TestSeriesIsBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	tests := []struct {
		desc     string
		capacity int
		samples  int    // samples taken 1 s apart, the i-th with i requests in total
		want     string // the points' ends, seconds after t0, oldest first
	}{
		{"the first sample is the baseline", 3, 1, "[]"},
		{"partly full", 3, 3, "[1 2]"},
		{"full", 3, 4, "[1 2 3]"},
		{"wrapped drops the oldest", 3, 7, "[4 5 6]"},
		{"capacity one", 1, 5, "[4]"},
		{"capacity zero holds one", 0, 5, "[4]"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			s := NewSeries(tc.capacity)
			for i := range tc.samples {
				s.Sample(t0.Add(time.Duration(i)*time.Second), Totals{Requests: uint64(i * i)})
			}
			var ends []int
			for _, p := range s.Points() {
				ends = append(ends, int(p.Time.Sub(t0)/time.Second))
				// Between samples i-1 and i: i² - (i-1)² requests.
				i := uint64(p.Time.Sub(t0) / time.Second)
				if p.Requests != 2*i-1 || p.Seconds != 1 {
					t.Errorf("point at %ds: %d requests in %vs, want %d in 1s", i, p.Requests, p.Seconds, 2*i-1)
				}
			}
			if got := fmt.Sprint(ends); got != tc.want {
				t.Errorf("points end at %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSeriesIgnoresTimeNotMoving(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	s := NewSeries(10)
	s.Sample(t0, Totals{})
	s.Sample(t0, Totals{Requests: 5})                   // same instant: a new baseline, no point
	s.Sample(t0.Add(-time.Second), Totals{Requests: 6}) // a clock stepping back: likewise
	s.Sample(t0.Add(time.Second), Totals{Requests: 9})
	p := s.Points()
	if len(p) != 1 || p[0].Requests != 3 {
		t.Fatalf("points %+v, want one of 3 requests", p)
	}
}

func TestSeriesLatencyQuantiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		latency  []time.Duration // requests observed in the interval
		p50, p95 float64         // ms, a bucket's upper bound
	}{
		{"none", nil, 0, 0},
		{"sub-millisecond lands in the first bucket", []time.Duration{300 * time.Microsecond}, 1, 1},
		{"one of 100 ms", []time.Duration{100 * time.Millisecond}, bucketMS(27), bucketMS(27)},
		{"a slow tail", append(repeat(20, 10*time.Millisecond), 2*time.Second), bucketMS(14), bucketMS(14)},
		{"a slow tenth", append(repeat(18, 10*time.Millisecond), repeat(2, 2*time.Second)...), bucketMS(14), bucketMS(44)},
		{"beyond the last bucket", []time.Duration{time.Hour}, bucketMS(latencyBuckets - 1), bucketMS(latencyBuckets - 1)},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(nil, nil)
			t0 := time.Unix(1_000_000, 0)
			s := NewSeries(2)
			s.Sample(t0, m.totals())
			for _, d := range tc.latency {
				m.latency.observe(d)
			}
			s.Sample(t0.Add(time.Second), m.totals())
			p := s.Points()[0]
			if p.P50MS != tc.p50 || p.P95MS != tc.p95 {
				t.Errorf("p50 %v p95 %v, want %v %v", p.P50MS, p.P95MS, tc.p50, tc.p95)
			}
			// The bucket's bound is within a bucket's width above the truth.
			for _, d := range tc.latency {
				if ms := float64(d) / float64(time.Millisecond); ms > 1 && ms < bucketMS(latencyBuckets-1) {
					if b := bucketMS(bucketOf(d)); b < ms || b > ms*1.19 {
						t.Errorf("%v in a bucket up to %v ms", d, b)
					}
				}
			}
		})
	}
}

func repeat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

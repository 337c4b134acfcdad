package engine

import (
	"math"
	"sync/atomic"
	"time"
)

// LogNormal estimates a latency distribution from exponentially weighted
// samples: the mean and variance of the log of the time in seconds. Eight
// bytes answer any quantile, on the assumption that latencies are
// log-normal, which their long right tail roughly is.
type LogNormal struct {
	Mean, Var float32 // of ln(seconds); Var is 0 until the first sample
}

// Constants of the estimate: the weight of a new sample, and the variance
// assumed before the spread is known (σ 0.5), so that a deadline drawn
// from one fast sample still leaves room for the usual tail.
const (
	logNormalAlpha    = 0.1
	logNormalPriorVar = 0.25
)

// z-scores of the quantiles the engine asks for.
const (
	zP95 = 1.645
	zP99 = 2.326
)

// Known reports whether the estimate has a sample.
func (d LogNormal) Known() bool { return d.Var > 0 }

func (d *LogNormal) observe(seconds float64) {
	x := math.Log(max(seconds, 1e-6))
	if !d.Known() {
		d.Mean, d.Var = float32(x), logNormalPriorVar
		return
	}
	diff := x - float64(d.Mean)
	incr := logNormalAlpha * diff
	d.Mean = float32(float64(d.Mean) + incr)
	// West's incremental variance; it never reaches 0, so Known holds.
	d.Var = float32(max((1-logNormalAlpha)*(float64(d.Var)+diff*incr), 1e-6))
}

// Quantile returns the latency below which a share of samples lies, given
// as its z-score (zP95, zP99); 0 without a sample.
func (d LogNormal) Quantile(z float64) time.Duration {
	if !d.Known() {
		return 0
	}
	s := math.Exp(float64(d.Mean) + z*math.Sqrt(float64(d.Var)))
	return time.Duration(min(s, 1e6) * float64(time.Second))
}

// atomicLogNormal is a LogNormal that many goroutines update without a
// lock, packed in one word.
type atomicLogNormal struct{ v atomic.Uint64 }

func (a *atomicLogNormal) load() LogNormal {
	v := a.v.Load()
	return LogNormal{Mean: math.Float32frombits(uint32(v >> 32)), Var: math.Float32frombits(uint32(v))}
}

func (a *atomicLogNormal) observe(seconds float64) {
	for {
		old := a.v.Load()
		d := LogNormal{Mean: math.Float32frombits(uint32(old >> 32)), Var: math.Float32frombits(uint32(old))}
		d.observe(seconds)
		if a.v.CompareAndSwap(old, uint64(math.Float32bits(d.Mean))<<32|uint64(math.Float32bits(d.Var))) {
			return
		}
	}
}

func (a *atomicLogNormal) store(d LogNormal) {
	a.v.Store(uint64(math.Float32bits(d.Mean))<<32 | uint64(math.Float32bits(d.Var)))
}

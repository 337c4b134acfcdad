package engine

import (
	"math"
	"testing"
	"time"
)

// TestLatencyPeakEWMA lays out a timeline (t0 + seconds) of samples and
// checks the estimate: it jumps to a spike at once, forgets it over
// LatencyDecay as faster samples come, whatever their rate, and ignores
// fast failures.
func TestLatencyPeakEWMA(t *testing.T) {
	t.Parallel()
	c := testConfig(t) // LatencyDecay 10s
	at := func(s float64) int64 { return t0 + int64(s*float64(time.Second)) }
	var e Evidence
	e.observe(true, true, 100*time.Millisecond, &c, at(0))
	if e.Latency != 0.1 {
		t.Fatalf("first sample: %v, want 0.1", e.Latency)
	}
	e.observe(true, true, 2*time.Second, &c, at(1))
	if e.Latency != 2 {
		t.Fatalf("a spike must be taken at once: %v, want 2", e.Latency)
	}
	// A burst of fast samples in the same instant barely moves it.
	for range 100 {
		e.observe(true, true, 100*time.Millisecond, &c, at(1))
	}
	if e.Latency != 2 {
		t.Errorf("samples in one instant moved the peak to %v", e.Latency)
	}
	// One fast sample a decay time later covers 1-1/e of the way.
	e.observe(true, true, 100*time.Millisecond, &c, at(11))
	want := 2*math.Exp(-1) + 0.1*(1-math.Exp(-1))
	if math.Abs(e.Latency-want) > 1e-9 {
		t.Errorf("after one decay time: %v, want %v", e.Latency, want)
	}
	// Rejections never look fast; timeouts are a lower bound and count.
	before := e.Latency
	e.observe(false, false, time.Millisecond, &c, at(30))
	if e.Latency != before {
		t.Errorf("a fast failure moved the latency from %v to %v", before, e.Latency)
	}
	e.observe(false, true, 3*time.Second, &c, at(31))
	if e.Latency != 3 {
		t.Errorf("a 3s timeout left the latency at %v, want 3", e.Latency)
	}
}

// TestLatencyAgesTowardTypical checks that an exit without new samples
// drifts back toward the pool's typical latency over LatencyForget, so a
// slow exit that lost its traffic is tried again.
func TestLatencyAgesTowardTypical(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	forget := c.LatencyForget
	var slow, fresh Evidence
	slow.observe(true, true, 2*time.Second, &c, t0)
	if got := slow.latencyEstimate(0.2, &c, t0); got != 2 {
		t.Errorf("fresh estimate %v, want 2", got)
	}
	got := slow.latencyEstimate(0.2, &c, t0+int64(forget))
	if want := 0.2 + 1.8*math.Exp(-1); math.Abs(got-want) > 1e-9 {
		t.Errorf("LatencyForget later: %v, want %v", got, want)
	}
	if got := slow.latencyEstimate(0.2, &c, t0+int64(10*forget)); math.Abs(got-0.2) > 1e-3 {
		t.Errorf("ten times LatencyForget later: %v, want about the typical 0.2", got)
	}
	if got := fresh.latencyEstimate(0.2, &c, t0); got != 0.2 {
		t.Errorf("without evidence: %v, want the typical 0.2", got)
	}
}

func TestLogNormalQuantiles(t *testing.T) {
	t.Parallel()
	var d LogNormal
	if d.Known() || d.Quantile(zP99) != 0 {
		t.Fatal("an empty estimate claims to know")
	}
	d.observe(0.1)
	// One sample: the prior spread σ 0.5 around it.
	if got, want := d.Quantile(zP99), time.Duration(0.1*math.Exp(zP99*0.5)*float64(time.Second)); absDuration(got-want) > time.Millisecond {
		t.Errorf("p99 after one sample %v, want %v", got, want)
	}
	// Many samples of a log-normal with median 200ms and σ 0.3 converge.
	var e LogNormal
	for i := range 5000 {
		z := math.Sin(float64(i)*1.7) * math.Sqrt2 // spread with variance 1
		e.observe(0.2 * math.Exp(0.3*z))
	}
	if got := e.Quantile(0); absDuration(got-200*time.Millisecond) > 20*time.Millisecond {
		t.Errorf("median %v, want about 200ms", got)
	}
	if got, want := e.Quantile(zP99), time.Duration(0.2*math.Exp(0.3*zP99)*float64(time.Second)); absDuration(got-want) > want/5 {
		t.Errorf("p99 %v, want about %v", got, want)
	}
	var a atomicLogNormal
	a.observe(0.1)
	if a.load() != d {
		t.Errorf("atomic estimate %+v, want %+v", a.load(), d)
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// pow's shortcuts agree with math.Pow.
func TestPow(t *testing.T) {
	t.Parallel()
	for _, x := range []float64{1e-9, 0.03, 0.5, 1, 1.7, 250} {
		for _, y := range []float64{1, 2, -2, 4, -4, 8, 3, 0.5, -1.5} {
			if got, want := pow(x, y), math.Pow(x, y); math.Abs(got-want) > 1e-12*math.Abs(want) {
				t.Errorf("pow(%g, %g) = %g, want %g", x, y, got, want)
			}
		}
	}
}

package engine

import (
	"math"
	"time"
)

// windowBuckets is the number of buckets in the sliding failure window: the
// window forgets a sixth of its span at a time (as grpc-go's outlier
// detection call counter forgets a whole interval at a time).
const windowBuckets = 6

// Evidence is what the engine has observed of one scope: a route globally, or
// a route against one target. Times are Unix nanoseconds, 0 meaning never.
type Evidence struct {
	Success float64 // EWMA of success, in [0, 1]
	// Latency is the peak-EWMA of the time attempts took, in seconds
	// (docs/design/005-cost.md): it jumps to any slower sample and decays
	// toward faster ones over Config.LatencyDecay. Successes feed it, and so
	// do timeouts, whose elapsed time is a lower bound on what the exit
	// would have taken; fast failures never do, so a 403 in 5ms never
	// makes an exit look fast.
	Latency   float64
	LatencyAt int64 // when Latency last took a sample
	// TTFB is the distribution of successes' time to the response, for
	// attempt deadlines.
	TTFB        LogNormal
	Samples     uint32 // outcomes observed (saturating)
	ConsecFail  uint16 // failures since the last success (saturating)
	ConsecOK    uint16 // successes since the last failure (saturating)
	LastSuccess int64
	LastFailure int64
	window      failWindow
}

// failWindow counts successes and failures in windowBuckets buckets of
// Window/windowBuckets each; head is the bucket number of the newest one.
type failWindow struct {
	head     int64
	ok, fail [windowBuckets]uint16
}

// observe records one outcome at now. timed says latency is a sample of
// the scope's time to an answer: a success of users' traffic, or a
// timeout, whose elapsed time is a lower bound. Other failures, and probes
// (a tunnel set up takes nothing like a request), never feed latency.
func (e *Evidence) observe(success, timed bool, latency time.Duration, c *Config, now int64) {
	x := 0.0
	if success {
		x = 1
	}
	if e.Samples == 0 {
		e.Success = x
	} else {
		e.Success += c.Alpha * (x - e.Success)
	}
	if timed {
		e.observeLatency(latency.Seconds(), c, now)
		if success {
			e.TTFB.observe(latency.Seconds())
		}
	}
	if success {
		e.LastSuccess = now
		e.ConsecFail = 0
		e.ConsecOK = satInc16(e.ConsecOK)
	} else {
		e.LastFailure = now
		e.ConsecOK = 0
		e.ConsecFail = satInc16(e.ConsecFail)
	}
	if e.Samples < ^uint32(0) {
		e.Samples++
	}
	e.window.add(success, now, bucketWidth(c))
}

// observeLatency feeds one sample (seconds) to the peak-EWMA, as Finagle's
// PeakEwma: a slower sample is taken at once, a faster one is mixed in with
// a weight that grows with the time since the last sample, so the estimate
// decays over LatencyDecay whatever the request rate.
func (e *Evidence) observeLatency(s float64, c *Config, now int64) {
	s = max(s, 1e-6) // a measured time of 0 is a clock too coarse, not an instant exit
	if e.LatencyAt == 0 || s >= e.Latency {
		e.Latency = s
	} else {
		w := math.Exp(-float64(max(now-e.LatencyAt, 0)) / float64(c.LatencyDecay))
		e.Latency = e.Latency*w + s*(1-w)
	}
	e.LatencyAt = max(e.LatencyAt, now)
}

// latencyEstimate is the latency estimate at now: Latency shrunk toward
// prior (seconds, the pool's typical latency) as it ages over
// LatencyForget, so that an exit that lost its traffic for being slow is
// tried again in time and can win it back. Without latency evidence it is
// prior.
func (e *Evidence) latencyEstimate(prior float64, c *Config, now int64) float64 {
	if e.LatencyAt == 0 {
		return prior
	}
	if prior <= 0 {
		return e.Latency
	}
	age := float64(max(now-e.LatencyAt, 0)) / float64(c.LatencyForget)
	return prior + (e.Latency-prior)*math.Exp(-age)
}

// Score is the probability that an attempt through this scope gives a
// valid answer: the success EWMA shrunk toward the prior until
// PriorSamples outcomes make the evidence count, so a route that succeeded
// once is not a veteran.
func (e *Evidence) Score(c *Config) float64 {
	return shrink(e.Success, float64(e.Samples), c.Prior, c.PriorSamples)
}

// selectionScore is Score with the pool's typical success (prior) in
// place of Config.Prior, for selection: a route with little evidence is
// priced as the pool's typical route until its own samples say otherwise,
// or one that joins a pool of veterans is never drawn to earn them
// (docs/design/005-cost.md). Without a typical value (prior 0) it is Score.
func (e *Evidence) selectionScore(c *Config, prior float64) float64 {
	if prior <= 0 {
		prior = c.Prior
	}
	return shrink(e.Success, float64(e.Samples), prior, c.PriorSamples)
}

// targetFactor is the route×target success term of the selection weight,
// shrunk toward 1 because a pair record exists only after negative
// evidence (or a session) and no record means no complaint.
func (e *Evidence) targetFactor(c *Config) float64 {
	return shrink(e.Success, float64(e.Samples), 1, c.PriorSamples)
}

// FailureRate returns the failure rate in the sliding window at now and the
// number of samples it is based on.
func (e *Evidence) FailureRate(c *Config, now int64) (rate float64, volume int) {
	ok, fail := e.window.counts(now, bucketWidth(c))
	volume = ok + fail
	if volume == 0 {
		return 0, 0
	}
	return float64(fail) / float64(volume), volume
}

func shrink(raw, n, prior, k float64) float64 {
	return (n*raw + k*prior) / (n + k)
}

func bucketWidth(c *Config) int64 {
	return int64(c.Window) / windowBuckets
}

func (w *failWindow) add(success bool, now, width int64) {
	b := now / width
	if b > w.head {
		n := min(b-w.head, windowBuckets)
		for i := int64(1); i <= n; i++ {
			idx := (w.head + i) % windowBuckets
			w.ok[idx], w.fail[idx] = 0, 0
		}
		w.head = b
	}
	// A late sample (b < head) lands in the newest bucket: close enough, and
	// it keeps the window monotonic.
	idx := w.head % windowBuckets
	if success {
		w.ok[idx] = satInc16(w.ok[idx])
	} else {
		w.fail[idx] = satInc16(w.fail[idx])
	}
}

// peak returns the highest rate, per second, of the ok side of one
// bucket still inside the window at now, the busiest sixth of it: each
// bucket's count over the part of it after since and before now, taken as
// at least a second.
func (w *failWindow) peak(now, width, since int64) float64 {
	b, most := now/width, 0.0
	for i := range int64(windowBuckets) {
		bucket := w.head - i
		if bucket <= b-windowBuckets || bucket < 0 {
			break
		}
		from, to := max(bucket*width, since), min((bucket+1)*width, now)
		span := max(float64(to-from), float64(time.Second)) / float64(time.Second)
		most = max(most, float64(w.ok[bucket%windowBuckets])/span)
	}
	return most
}

// counts sums the buckets still inside the window at now, without mutating.
func (w *failWindow) counts(now, width int64) (ok, fail int) {
	b := now / width
	for i := range int64(windowBuckets) {
		bucket := w.head - i
		if bucket <= b-windowBuckets || bucket < 0 {
			break
		}
		idx := bucket % windowBuckets
		ok += int(w.ok[idx])
		fail += int(w.fail[idx])
	}
	return ok, fail
}

func satInc16(v uint16) uint16 {
	if v == ^uint16(0) {
		return v
	}
	return v + 1
}

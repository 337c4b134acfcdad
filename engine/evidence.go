package engine

import "time"

// windowBuckets is the number of buckets in the sliding failure window: the
// window forgets a sixth of its span at a time (as grpc-go's outlier
// detection call counter forgets a whole interval at a time).
const windowBuckets = 6

// Evidence is what the engine has observed of one scope: a route globally, or
// a route against one target. Times are Unix nanoseconds, 0 meaning never.
type Evidence struct {
	Success     float64 // EWMA of success, in [0, 1]
	Latency     float64 // EWMA of success latency in seconds; failures never feed it
	Samples     uint32  // outcomes observed (saturating)
	ConsecFail  uint16  // failures since the last success (saturating)
	ConsecOK    uint16  // successes since the last failure (saturating)
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

// observe records one outcome at now. Only successes feed the latency EWMA:
// a 403 answered in 5ms must not make an exit look fast.
func (e *Evidence) observe(success bool, latency time.Duration, c *Config, now int64) {
	x := 0.0
	if success {
		x = 1
	}
	if e.Samples == 0 {
		e.Success = x
	} else {
		e.Success += c.Alpha * (x - e.Success)
	}
	if success {
		s := latency.Seconds()
		if e.LastSuccess == 0 {
			e.Latency = s
		} else {
			e.Latency += c.Alpha * (s - e.Latency)
		}
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

// Score is the route-global score in [0, 1]: success × latency term, shrunk
// toward the prior until PriorSamples outcomes make the evidence count.
func (e *Evidence) Score(c *Config) float64 {
	raw := e.Success
	if e.LastSuccess != 0 {
		ref := c.LatencyRef.Seconds()
		raw *= ref / (ref + e.Latency)
	}
	return shrink(raw, float64(e.Samples), c.Prior, c.PriorSamples)
}

// targetFactor is the route×target term of the selection weight: success
// only (latency is already in the global score), shrunk toward 1 because a
// pair record exists only after negative evidence and no record means no
// complaint.
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

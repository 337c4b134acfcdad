package livebench

import "time"

// bucket is a token bucket: rate tokens a second up to burst, time passed
// in. Sites use it to rate-limit an exit; the oracle keeps a mirror of each
// one, a token smaller, to know when an exit has room without ever
// tripping it. Not safe for concurrent use: its owner holds a lock.
type bucket struct {
	rate   float64 // tokens per second; immutable
	burst  float64 // capacity; immutable
	tokens float64 // at last; may go negative by reservations
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// refill brings tokens up to now.
func (b *bucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt.Seconds()*b.rate)
		b.last = now
	}
}

// take spends a token if one is there at now.
func (b *bucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// wait is how long from now until a token is there (0 if one is).
func (b *bucket) wait(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// reserve spends the token that wait promised, going into debt if it is
// not there yet: the caller sends at now+wait(now).
func (b *bucket) reserve(now time.Time) {
	b.refill(now)
	b.tokens--
}

// burstWindow remembers the last arrivals to tell when more than limit of
// them fall within one window: a site's "too many requests in a short time"
// ban. Not safe for concurrent use: its owner holds a lock.
type burstWindow struct {
	limit  int           // arrivals allowed within window; immutable
	window time.Duration // immutable
	ring   []time.Time   // the last limit arrivals, oldest at next once full
	next   int
}

func newBurstWindow(limit int, window time.Duration) *burstWindow {
	return &burstWindow{limit: limit, window: window, ring: make([]time.Time, 0, limit)}
}

// oldest is the earliest of the remembered arrivals, once limit are.
func (w *burstWindow) oldest() (time.Time, bool) {
	if len(w.ring) < w.limit {
		return time.Time{}, false
	}
	return w.ring[w.next], true
}

// arrive records an arrival at now and reports whether it makes more than
// limit within the window.
func (w *burstWindow) arrive(now time.Time) (tripped bool) {
	if o, full := w.oldest(); full && now.Sub(o) < w.window {
		tripped = true
	}
	if len(w.ring) < w.limit {
		w.ring = append(w.ring, now)
		return tripped
	}
	w.ring[w.next] = now
	w.next = (w.next + 1) % w.limit
	return tripped
}

// wait is how long from now until an arrival would not trip the window.
func (w *burstWindow) wait(now time.Time) time.Duration {
	o, full := w.oldest()
	if !full {
		return 0
	}
	return max(0, o.Add(w.window).Sub(now))
}

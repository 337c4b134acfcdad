package engine

import (
	"math"
	"time"
)

// ReadyIn estimates how long a request that Acquire refused at now with
// ErrNoRoute or ErrBusy should wait before it asks again: what a 503's
// Retry-After tells the client. The routes that refused it are at
// max_inflight, and free a slot when one of their requests ends, about the
// pool's typical latency from now; or draining or ejected by an operator,
// back only by an operator's hand or a reload; or, for a Strict request,
// cooling or ejected, back at the earliest deadline (cooling routes carry
// other requests as the least bad). ReadyIn is the sooner of that latency
// and that deadline: the earliest a route could be ready, never later. ok
// is false when the engine knows neither (no answer seen yet, nothing
// cooling). Two atomic loads: it may be asked on every refusal.
func (e *Engine) ReadyIn(now time.Time) (d time.Duration, ok bool) {
	d = time.Duration(math.MaxInt64)
	if typical := e.typical(); typical > 0 {
		d, ok = time.Duration(typical*float64(time.Second)), true
	}
	if next := e.wakeups.next.Load(); next != math.MaxInt64 {
		d, ok = min(d, max(0, time.Duration(next-now.UnixNano()))), true
	}
	if !ok {
		return 0, false
	}
	return d, true
}

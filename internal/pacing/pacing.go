// Package pacing holds the gateway to the limits an operator sets per
// target ([[targets]] rate, max_concurrent, pair_rate): token buckets and
// concurrency slots with a bounded wait. It is separate from the engine's
// learned pacing (engine/pace.go), which holds route×target pairs to the
// rates the sites' own 429s and bans taught.
package pacing

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits paces one target (docs/design/007-attempts.md). Zero fields mean
// "no limit" except where said. Being paced is not a failure: a refusal is
// never evidence against a route.
type Limits struct {
	Rate          float64       // requests per second let through to the target; 0 = unlimited
	Burst         int           // token bucket size; 0 = max(1, ceil(Rate))
	MaxConcurrent int           // requests in flight to the target at once; 0 = unlimited
	MaxWait       time.Duration // longest Admit may queue for a slot and a token together, and Pair for a token, before refusing; 0 = refuse at once
	MaxQueue      int           // requests allowed to wait at once per target; 0 = 100. Beyond it: refused at once
	PairRate      float64       // politeness: requests per second per route×target; 0 = unlimited
	PairBurst     int           // pair token bucket size; 0 = max(1, ceil(PairRate))
}

// defaultMaxQueue is MaxQueue when zero.
const defaultMaxQueue = 100

// Validate reports the first field that is negative, NaN or infinite, named
// as in the configuration, e.g. "rate: must be a finite number ≥ 0".
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"rate", l.Rate},
		{"burst", float64(l.Burst)},
		{"max_concurrent", float64(l.MaxConcurrent)},
		{"max_wait", float64(l.MaxWait)},
		{"max_queue", float64(l.MaxQueue)},
		{"pair_rate", l.PairRate},
		{"pair_burst", float64(l.PairBurst)},
	} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return &LimitsError{Field: f.name}
		}
	}
	return nil
}

// LimitsError names the Limits field that is out of range.
type LimitsError struct {
	Field string // as in the configuration, e.g. "max_wait"
}

func (e *LimitsError) Error() string { return e.Field + ": must be a finite number ≥ 0" }

// IsZero reports whether l paces nothing: no rate, no concurrency bound, no
// politeness rate. MaxWait and MaxQueue alone pace nothing.
func (l Limits) IsZero() bool { return l.Rate == 0 && l.MaxConcurrent == 0 && l.PairRate == 0 }

// withDefaults fills the fields whose zero means a default.
func (l Limits) withDefaults() Limits {
	if l.Burst == 0 {
		l.Burst = defaultBurst(l.Rate)
	}
	if l.PairBurst == 0 {
		l.PairBurst = defaultBurst(l.PairRate)
	}
	if l.MaxQueue == 0 {
		l.MaxQueue = defaultMaxQueue
	}
	return l
}

// defaultBurst is max(1, ceil(r)), capped where an int surely holds it.
func defaultBurst(r float64) int { return int(min(max(1, math.Ceil(r)), math.MaxInt32)) }

// Error is returned when a request is refused; the gateway answers 429
// with Retry-After and does not count it as evidence against any route.
type Error struct {
	Target string
	Route  string // set for "politeness" only
	// Reason is "rate", "concurrency", "queue_full" (Admit) or
	// "politeness" (Pair).
	Reason string
	// RetryAfter estimates when a retry is likely to be admitted: for
	// "rate" and "politeness" the time until the bucket would grant this
	// request a token; for "concurrency" and "queue_full", where how long
	// requests to the target take is unknown, max(MaxWait, 1s), MaxWait
	// being how long a waiter sees no slot free up before giving up. Not
	// rounded: the caller rounds up to whole seconds.
	RetryAfter time.Duration
}

// Error reads "paced: <reason> <target>, retry after <duration>".
func (e *Error) Error() string {
	s := "paced: " + e.Reason + " " + e.Target
	if e.Route != "" {
		s += " via " + e.Route
	}
	return s + ", retry after " + e.RetryAfter.String()
}

// Config configures a Pacer.
type Config struct {
	// Limits gives each target's limits, validated; nil paces nothing. It
	// is called, without the Pacer's lock, for targets without an entry
	// and for entries made before the last Update, so it must be safe for
	// concurrent use and should not allocate for unpaced targets (it runs
	// for them on every request).
	Limits func(target string) Limits
	// MaxTargets bounds the idle entries kept, separately for targets and
	// for route×target pairs; 0 = 10000. See lru for when it is exceeded.
	MaxTargets int
	// Now is the clock the pacing decisions read; nil = time.Now. Waits use
	// real timers and context deadlines, so it must run with them: tests of
	// the waiting paths use testing/synctest and leave it nil.
	Now func() time.Time
}

// Pacer paces requests per target (rate and concurrency, Admit) and per
// route×target (politeness, Pair). It holds state only for targets with
// limits, LRU-bounded. Safe for concurrent use; one mutex guards it all,
// held only for O(1) bookkeeping, never while waiting.
type Pacer struct {
	now func() time.Time // immutable

	mu      sync.Mutex
	limits  func(string) Limits       // guarded by mu
	gen     uint64                    // guarded by mu; bumped by Update
	targets lru[string, *targetState] // guarded by mu
	pairs   lru[pairKey, *pairState]  // guarded by mu
}

// New returns a Pacer with cfg's limits.
func New(cfg Config) *Pacer {
	n := cfg.MaxTargets
	if n <= 0 {
		n = 10000
	}
	p := &Pacer{now: cfg.Now, limits: cfg.Limits}
	if p.now == nil {
		p.now = time.Now
	}
	p.targets.init(n)
	p.pairs.init(n)
	return p
}

// Update swaps the limits function on a config reload. Entries pick up
// their new limits lazily on next use; nothing in flight or already waiting
// is disturbed (a raised concurrency bound admits waiters then).
func (p *Pacer) Update(limits func(target string) Limits) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limits = limits
	p.gen++
}

// targetState paces one target. All fields are guarded by Pacer.mu.
type targetState struct {
	name     string
	gen      uint64        // of the limits in lim
	lim      Limits        // defaults applied
	bucket   *rate.Limiter // nil when Rate is 0
	inFlight int           // admitted and not yet released
	waiting  int           // in Admit, queued for a slot or a token
	slotQ    list.List     // of *slotWaiter, first come first served
}

// slotWaiter is one Admit queued for a concurrency slot.
type slotWaiter struct {
	ready   chan struct{} // closed when granted
	granted bool          // guarded by Pacer.mu
	elem    *list.Element // in slotQ until granted or gone
}

func (t *targetState) key() string { return t.name }
func (t *targetState) idle() bool  { return t.inFlight == 0 && t.waiting == 0 }

// slotFree reports whether one more request may be in flight.
func (t *targetState) slotFree() bool {
	return t.lim.MaxConcurrent == 0 || t.inFlight < t.lim.MaxConcurrent
}

// grant hands free slots to queued waiters in arrival order. Caller must
// hold mu.
func (t *targetState) grant() {
	for t.slotQ.Len() > 0 && t.slotFree() {
		w := t.slotQ.Remove(t.slotQ.Front()).(*slotWaiter)
		w.granted = true
		t.inFlight++
		close(w.ready)
	}
}

// release ends one admitted request. Caller must hold mu.
func (t *targetState) release() {
	t.inFlight--
	t.grant()
}

// setLimits applies l (raw, as configured) at now: the bucket keeps its
// tokens, a raised concurrency bound admits waiters. Caller must hold mu.
func (t *targetState) setLimits(now time.Time, l Limits, gen uint64) {
	t.gen, t.lim = gen, l.withDefaults()
	t.bucket = setBucket(t.bucket, now, t.lim.Rate, t.lim.Burst)
	t.grant()
}

// setBucket returns b set to rate r and burst, made if nil; nil when r is 0.
func setBucket(b *rate.Limiter, now time.Time, r float64, burst int) *rate.Limiter {
	switch {
	case r == 0:
		return nil
	case b == nil:
		return rate.NewLimiter(rate.Limit(r), burst)
	}
	b.SetLimitAt(now, rate.Limit(r))
	b.SetBurstAt(now, burst)
	return b
}

// pairKey names one route×target.
type pairKey struct{ route, target string }

// pairState paces one route×target. All fields are guarded by Pacer.mu.
type pairState struct {
	k       pairKey
	gen     uint64 // of the target limits the bucket was set from
	bucket  *rate.Limiter
	waiting int // in Pair, waiting for a token
}

func (s *pairState) key() pairKey { return s.k }
func (s *pairState) idle() bool   { return s.waiting == 0 }

// noRelease is the release of an unpaced request: a package-level func so
// that handing it out does not allocate.
func noRelease() {}

// Admit waits, at most the target's MaxWait and never past ctx, for a
// concurrency slot and then a rate token. On success the caller must call
// release once the request to the target is over; calling it again does
// nothing. A refusal is a *Error; a cancelled ctx returns ctx.Err().
// A target without limits costs no entry and no allocation.
func (p *Pacer) Admit(ctx context.Context, target string) (release func(), err error) {
	t := p.lockTarget(target)
	if t == nil {
		return noRelease, nil
	}
	defer p.mu.Unlock()
	queued := false // counted in t.waiting; deferred after the Unlock so it runs first
	defer func() {
		if queued {
			t.waiting--
		}
	}()
	// Slot first, then token: a request queued for a slot would otherwise
	// burn a token it cannot use yet, lowering the real rate, while a slot
	// held waiting for a token costs at most MaxWait of one slot.
	now := p.now()
	deadline := now.Add(t.lim.MaxWait)
	if err := p.takeSlot(ctx, t, &queued); err != nil {
		return nil, err
	}
	if t.bucket != nil {
		if err := p.takeToken(ctx, t, t.bucket, deadline, &queued); err != nil {
			t.release()
			return nil, err
		}
	}
	released := false
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !released {
			released = true
			t.release()
		}
	}, nil
}

// takeSlot takes a concurrency slot for t, queueing for up to MaxWait.
// Caller must hold mu; it is released while waiting.
func (p *Pacer) takeSlot(ctx context.Context, t *targetState, queued *bool) error {
	if t.slotQ.Len() == 0 && t.slotFree() {
		t.inFlight++
		return nil
	}
	wait := t.lim.MaxWait
	if wait <= 0 {
		return t.refuse("concurrency")
	}
	if err := enqueue(t, queued); err != nil {
		return err
	}
	w := &slotWaiter{ready: make(chan struct{})}
	w.elem = t.slotQ.PushBack(w)
	p.mu.Unlock()
	timer := time.NewTimer(wait)
	select {
	case <-w.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	p.mu.Lock()
	switch {
	case ctx.Err() != nil:
		if w.granted {
			t.release()
		} else {
			t.slotQ.Remove(w.elem)
		}
		return ctx.Err()
	case !w.granted:
		t.slotQ.Remove(w.elem)
		return t.refuse("concurrency")
	}
	return nil
}

// takeToken reserves a token from b and waits for it, if it comes before
// both deadline and ctx's deadline; otherwise it cancels the reservation,
// so a refusal costs no token. Caller must hold mu, so that the reserve and
// cancel pair is exact; mu is released while waiting.
func (p *Pacer) takeToken(ctx context.Context, t *targetState, b *rate.Limiter, deadline time.Time, queued *bool) error {
	now := p.now()
	r := b.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if d == 0 {
		return nil
	}
	if d > budget(ctx, now, deadline) {
		r.CancelAt(now)
		return &Error{Target: t.name, Reason: "rate", RetryAfter: d}
	}
	if err := enqueue(t, queued); err != nil {
		r.CancelAt(now)
		return err
	}
	p.mu.Unlock()
	err := sleep(ctx, d)
	p.mu.Lock()
	if err != nil {
		r.CancelAt(p.now())
	}
	return err
}

// refuse is the "concurrency" or "queue_full" refusal. Caller must hold mu.
func (t *targetState) refuse(reason string) *Error {
	return &Error{Target: t.name, Reason: reason, RetryAfter: max(t.lim.MaxWait, time.Second)}
}

// enqueue counts the caller as waiting on t, once per Admit, or refuses it
// when MaxQueue are waiting already. Caller must hold mu.
func enqueue(t *targetState, queued *bool) error {
	if *queued {
		return nil
	}
	if t.waiting >= t.lim.MaxQueue {
		return t.refuse("queue_full")
	}
	t.waiting++
	*queued = true
	return nil
}

// budget is how long a request may still wait at now: until deadline, or
// ctx's deadline if sooner. A wait that cannot end in time is refused up
// front rather than holding a reservation it will cancel.
func budget(ctx context.Context, now, deadline time.Time) time.Duration {
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline.Sub(now)
}

// sleep waits d, or returns ctx.Err() if ctx ends first (or with it).
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// Pair is the politeness check for one attempt on route for target: it
// takes a token from the route×target bucket, waiting for it if it comes
// within the target's MaxWait (and ctx's deadline). Otherwise it returns a
// *Error "politeness" at once, without taking a token, so the gateway
// can give the route back without evidence and try another. A cancelled
// ctx returns ctx.Err(). A target without PairRate costs no allocation.
func (p *Pacer) Pair(ctx context.Context, route, target string) error {
	t := p.lockTarget(target)
	if t == nil {
		return nil
	}
	defer p.mu.Unlock()
	if t.lim.PairRate == 0 {
		return nil
	}
	now := p.now()
	k := pairKey{route, target}
	s, ok := p.pairs.get(k)
	if !ok {
		s = &pairState{k: k}
		p.pairs.add(s)
	}
	if !ok || s.gen != t.gen {
		s.gen = t.gen
		s.bucket = setBucket(s.bucket, now, t.lim.PairRate, t.lim.PairBurst)
	}
	r := s.bucket.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if d == 0 {
		return nil
	}
	if d > budget(ctx, now, now.Add(t.lim.MaxWait)) {
		r.CancelAt(now)
		return &Error{Target: target, Route: route, Reason: "politeness", RetryAfter: d}
	}
	s.waiting++
	p.mu.Unlock()
	err := sleep(ctx, d)
	p.mu.Lock()
	s.waiting--
	if err != nil {
		r.CancelAt(p.now())
	}
	return err
}

// lockTarget returns name's entry with mu held, made or brought up to the
// current limits as needed; or nil, with mu not held, when name is not
// paced. The limits function runs without mu.
func (p *Pacer) lockTarget(name string) *targetState {
	p.mu.Lock()
	for {
		t, ok := p.targets.get(name)
		if ok && t.gen == p.gen {
			return t
		}
		gen, limits := p.gen, p.limits
		p.mu.Unlock()
		var l Limits
		if limits != nil {
			l = limits(name)
		}
		if !ok && l.IsZero() {
			return nil
		}
		p.mu.Lock()
		if gen != p.gen {
			continue // reloaded meanwhile: ask the new limits
		}
		// The entry may have been made, refreshed or evicted meanwhile.
		t, ok = p.targets.get(name)
		switch {
		case ok && t.gen == gen:
		case ok && l.IsZero() && t.idle():
			p.targets.remove(name)
			p.mu.Unlock()
			return nil
		case ok:
			t.setLimits(p.now(), l, gen)
		case l.IsZero():
			p.mu.Unlock()
			return nil
		default:
			t = &targetState{name: name}
			t.setLimits(p.now(), l, gen)
			p.targets.add(t)
		}
		return t
	}
}

// lru is a map whose idle entries beyond max are dropped least recently
// used first. Busy entries (a request in flight or waiting) are never
// dropped, so the map exceeds max while more than max entries are busy,
// by at most the busy ones and the one just added. A dropped entry forgets
// its bucket: a target seen again starts with a full burst.
type lru[K comparable, V interface {
	key() K
	idle() bool
}] struct {
	max   int
	order list.List // of V; front is the most recently used
	index map[K]*list.Element
}

func (c *lru[K, V]) init(n int) {
	c.max = n
	c.index = make(map[K]*list.Element)
}

// get returns k's entry, marking it used.
func (c *lru[K, V]) get(k K) (v V, ok bool) {
	el, ok := c.index[k]
	if !ok {
		return v, false
	}
	c.order.MoveToFront(el)
	return el.Value.(V), true
}

// add inserts v, which must be new, then drops idle entries from the back
// while over max. A busy entry met on the way moves to the front (it is in
// use), so each older entry is looked at once and v not at all.
func (c *lru[K, V]) add(v V) {
	c.index[v.key()] = c.order.PushFront(v)
	for n := c.order.Len() - 1; n > 0 && c.order.Len() > c.max; n-- {
		el := c.order.Back()
		if old := el.Value.(V); old.idle() {
			c.order.Remove(el)
			delete(c.index, old.key())
		} else {
			c.order.MoveToFront(el)
		}
	}
}

func (c *lru[K, V]) remove(k K) {
	if el, ok := c.index[k]; ok {
		c.order.Remove(el)
		delete(c.index, k)
	}
}

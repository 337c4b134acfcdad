package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// wakeup is a record's deadline: at `at`, the record at key, if still at
// generation gen, moves from cooling or ejected to half-open.
type wakeup struct {
	at  int64
	key Key
	gen uint32
}

// wakeQueue orders deadlines so expired cooldowns are found without
// scanning the pool. next mirrors the earliest deadline so the hot path
// pays one atomic load when nothing is due.
type wakeQueue struct {
	mu   sync.Mutex
	h    wakeHeap     // guarded by mu
	next atomic.Int64 // earliest deadline, MaxInt64 when empty
}

// wakeHeap is a binary min-heap of deadlines. Its push and pop sift as
// container/heap's Push and Pop do, comparison for comparison, so that
// deadlines pop in the same order, ties included; written out, they do
// not box each wakeup into an interface, an allocation apiece, nor call
// Less and Swap through one.
type wakeHeap []wakeup

func (h *wakeHeap) push(w wakeup) {
	*h = append(*h, w)
	s := *h
	for j := len(s) - 1; ; {
		i := (j - 1) / 2 // parent
		if i == j || !(s[j].at < s[i].at) {
			break
		}
		s[i], s[j] = s[j], s[i]
		j = i
	}
}

func (h *wakeHeap) pop() wakeup {
	s := *h
	n := len(s) - 1
	s[0], s[n] = s[n], s[0]
	for i := 0; ; {
		j := 2*i + 1 // left child
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && s[j2].at < s[j].at {
			j = j2
		}
		if !(s[j].at < s[i].at) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
	*h = s[:n]
	return s[n]
}

func (q *wakeQueue) push(w wakeup) {
	q.mu.Lock()
	q.h.push(w)
	q.next.Store(q.h[0].at)
	q.mu.Unlock()
}

// due pops the deadlines reached at now into dst.
func (q *wakeQueue) due(now int64, dst []wakeup) []wakeup {
	if now < q.next.Load() {
		return dst
	}
	q.mu.Lock()
	for len(q.h) > 0 && q.h[0].at <= now {
		dst = append(dst, q.h.pop())
	}
	if len(q.h) > 0 {
		q.next.Store(q.h[0].at)
	} else {
		q.next.Store(math.MaxInt64)
	}
	q.mu.Unlock()
	return dst
}

// wakeDue moves every record whose deadline passed to half-open. Called on
// acquire and report (one atomic load when nothing is due) and by Sweep.
func (e *Engine) wakeDue(ns int64) {
	if ns < e.wakeups.next.Load() {
		return
	}
	var buf [16]wakeup
	for _, w := range e.wakeups.due(ns, buf[:0]) {
		r := e.routes.get(w.key.Route)
		var t *target
		if !w.key.Global() {
			t = e.targets.get(w.key.Target)
		}
		// A record that moved on since (new generation) ignores the wake.
		if ch, ok := e.store.Update(&e.cfg, w.key, Op{Kind: OpWake, Gen: w.gen, CheckGen: true}, ns); ok {
			e.handle(ns, r, t, ch, ch.Cause)
		}
	}
}

// ProbeJob asks the prober to test a half-open record once: the route
// alone (Target "", a neutral probe) or the route against Target. Each job
// is issued once per (route, target, generation, sequence); a successful
// probe that does not yet restore the record issues the next.
type ProbeJob struct {
	Route  string
	Target string
	Gen    uint32
	Seq    uint8 // successful probes before this one in its half-open period
	key    Key
}

// probeQueue holds probe jobs until the prober collects them.
type probeQueue struct {
	mu   sync.Mutex
	jobs []ProbeJob // guarded by mu
}

func (q *probeQueue) push(j ProbeJob) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
}

// ProbeJobs appends the pending probe jobs to dst and removes them from the
// queue. Each job must be answered with ReportProbe.
func (e *Engine) ProbeJobs(dst []ProbeJob) []ProbeJob {
	e.probes.mu.Lock()
	defer e.probes.mu.Unlock()
	dst = append(dst, e.probes.jobs...)
	clear(e.probes.jobs)
	e.probes.jobs = e.probes.jobs[:0]
	return dst
}

// ReportProbe records a probe's outcome. ProbeSuccesses successes restore
// the record; a failure cools it again for longer. A probe for a record that
// has moved to another generation is recorded as stale evidence.
func (e *Engine) ReportProbe(now time.Time, job ProbeJob, o Outcome) error {
	r := e.routes.get(job.key.Route)
	if r == nil || r.id != job.Route {
		return ErrUnknownRoute
	}
	ns := now.UnixNano()
	var t *target
	if !job.key.Global() {
		t = e.targets.get(job.key.Target)
	}
	obs := Observation{Class: o.Class, Latency: o.Latency, RetryAfter: o.RetryAfter, Probe: true, Jitter: e.jitter()}
	e.publishOutcome(ns, r, t, obs, nil)
	op := Op{Kind: OpObserve, Obs: obs, Gen: job.Gen, CheckGen: true, ProbeSeq: job.Seq}
	if ch, ok := e.store.Update(&e.cfg, job.key, op, ns); ok {
		e.handle(ns, r, t, ch, o.Class)
	}
	return nil
}

// slowStarts tracks routes ramping up after a recovery, whose weight Sweep
// must refresh even when they get no traffic.
type slowStarts struct {
	mu    sync.Mutex
	slots map[int32]struct{} // guarded by mu
}

func (s *slowStarts) add(slot int32) {
	s.mu.Lock()
	if s.slots == nil {
		s.slots = make(map[int32]struct{})
	}
	s.slots[slot] = struct{}{}
	s.mu.Unlock()
}

// Sweep does the engine's timed work; call it about once a second (the
// simulator calls it on its virtual clock). It wakes expired cooldowns,
// reaps expired leases as ambiguous timeouts, ramps slow-starting routes,
// refreshes a slice of the pool and measures its typical latency (pool.go),
// expires sessions and evicts idle route×target records.
func (e *Engine) Sweep(now time.Time) {
	ns := now.UnixNano()
	e.wakeDue(ns)
	for _, rec := range e.store.Expired(ns, nil) {
		r, t := e.routes.get(rec.Route), e.targets.get(rec.Target)
		// The holder vanished: the attempt may have hung at the target or
		// the worker died. Count it as a timeout at the target, the
		// ambiguous class that blames only this pair.
		e.observe(ns, r, t, Observation{Class: TargetTimeout}, &rec)
		e.refresh(r, ns)
	}
	e.slow.mu.Lock()
	for slot := range e.slow.slots {
		r := e.routes.get(slot)
		e.refresh(r, ns)
		if h, _ := e.store.Read(Key{Route: slot}); h.slowStart(&e.cfg, ns) >= 1 {
			delete(e.slow.slots, slot)
		}
	}
	e.slow.mu.Unlock()
	e.sweepPool(ns)
	e.sharePace(ns) // pace_share.go
	e.store.ExpireSessions(ns)
	if ns >= e.nextEvict.Load() {
		e.nextEvict.Store(ns + int64(e.cfg.PairTTL/4))
		before := ns - int64(e.cfg.PairTTL)
		for slot := range e.routes.len() {
			e.store.EvictPairs(slot, before, func(n int32, h *Health) {
				e.targets.get(n).excluded.Add(-excludes(h.State, h.Cause))
			})
		}
		for n := range e.targets.len() {
			if tp := e.targets.get(n).pace.Load(); tp != nil {
				tp.evict(&e.cfg, ns)
			}
		}
	}
}

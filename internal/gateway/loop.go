package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/route"
)

// The attempt loop (docs/design/005-cost.md): one loop for absolute-form
// requests and tunnels. It leases a route and starts an attempt through
// it; then, whichever comes first:
//
//   - a valid answer wins; an attempt still in flight beside it runs on to
//     its own answer or deadline, for the evidence, not for the client;
//   - a failure is retried on another route when retry allows it;
//   - the lease's deadline passes without an answer: the attempt is cut, a
//     timeout, and the request moves to another route, when retry allows
//     it; otherwise it runs on to Config.AttemptTimeout;
//   - the lease's hedge delay passes without an answer: a second attempt
//     starts on another route, when the request may be hedged and the
//     budget has room;
//   - the client gives up: every attempt is canceled, which is evidence
//     only for one already past its deadline (Lease.Canceled).
//
// Each attempt reports its own outcome to the engine, so that one the loop
// no longer waits for still does.

// job is one client request as the loop carries it.
type job struct {
	target string
	ctl    control
	// try runs one attempt through x and classifies it. ctx ends with
	// cause context.DeadlineExceeded when the attempt is cut or times out
	// and context.Canceled when the client gave up; try classifies by that
	// cause (route.Classify does).
	try func(ctx context.Context, l engine.Lease, x *route.Exit) *outcome
	// retryable says whether a failed attempt may be tried again on
	// another route as far as the request goes (session, body,
	// idempotency); Gateway.retry decides the rest.
	retryable func(o *outcome) bool
	// hedge says whether the request may be hedged.
	hedge bool
}

// outcome is how one attempt ended.
type outcome struct {
	lease      engine.Lease
	class      engine.Class
	latency    time.Duration
	retryAfter time.Duration
	reached    bool         // bytes of the request may have reached the target
	timeout    engine.Class // what silence reads as at the layer the attempt reached
	blocked    *guard.Error // admission refused the address dialled; class is then Canceled
	bodyErr    error        // the client's streamed body broke off (gone, too slow); class is then Canceled
	local      string       // the gateway ran out of this resource of its own (route.LocalReason); class is then Canceled
	resp       *http.Response
	conn       net.Conn
	// done ends the attempt's context once its answer is consumed or
	// dropped; set by the loop.
	done func()
}

// evidence is the outcome as the engine takes it.
func (o *outcome) evidence() engine.Outcome {
	return engine.Outcome{Class: o.class, Latency: o.latency, RetryAfter: o.retryAfter}
}

// discard drops the attempt's answer.
func (o *outcome) discard() {
	if o.resp != nil {
		o.resp.Body.Close()
	}
	if o.conn != nil {
		o.conn.Close()
	}
	o.done()
}

// flight is one attempt in progress.
type flight struct {
	start  time.Time
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	lease    engine.Lease // guarded by mu: its Deadline is set once a Provisional one is known
	awaited  bool         // guarded by mu: the loop waits for the outcome
	ended    bool         // guarded by mu: the outcome is in
	deadline *time.Timer  // guarded by mu: the lease's deadline, or the next look at a Provisional one; nil without
	limit    *time.Timer  // guarded by mu: Config.AttemptTimeout
}

// recheckFirst is how long an attempt on a Provisional lease waits before
// it first asks for its deadline again, doubling after each look that
// finds nothing known yet.
const recheckFirst = 250 * time.Millisecond

// landed is an attempt's outcome on its way to the loop.
type landed struct {
	o        *outcome
	reported bool // to the engine, by the attempt
}

// run carries j through the pool: at most MaxAttempts attempts, hedges
// included. It returns the winning outcome, or else the last failure (nil
// when no route could be leased at all: err then says why), and the
// attempts and hedges made. The caller answers the client from it and
// reports the winner, once what it carried shows how it went: a tunnel's
// first bytes, an answer's whole body.
func (g *Gateway) run(ctx context.Context, s *settings, j *job) (win, last *outcome, attempts, hedges int, err error) {
	g.budget.Request(g.cfg.Now())
	landings := make(chan landed, g.cfg.MaxAttempts)
	deadlines := make(chan *flight, g.cfg.MaxAttempts)
	var flights []*flight
	var tried []string
	defer func() { g.abandon(flights, landings, win) }()

	launch := func() error {
		// Only the first attempt waits for a paced target: a retry or a
		// hedge has other attempts to watch meanwhile.
		wait := time.Duration(0)
		if attempts == 0 {
			wait = g.cfg.LearnedMaxWait
		}
		l, x, err := g.lease(ctx, s, j.ctl, j.target, tried, wait)
		if err != nil {
			return err
		}
		tried = append(tried, l.Route)
		attempts++
		flights = append(flights, g.fly(ctx, j, l, x, landings, deadlines))
		return nil
	}
	// another says whether a route is left to try, before any budget is
	// spent on it.
	another := func() bool { return len(tried) < len(s.exits) }
	awaited := func() (n int) {
		for _, f := range flights {
			if f.isAwaited() {
				n++
			}
		}
		return n
	}
	if err := launch(); err != nil {
		return nil, nil, 0, 0, err
	}
	var hedge <-chan time.Time
	if l := flights[0].leased(); j.hedge && g.cfg.MaxAttempts > 1 && l.HedgeAfter > 0 && (l.Deadline == 0 || l.HedgeAfter < l.Deadline) {
		t := time.NewTimer(l.HedgeAfter)
		defer t.Stop()
		hedge = t.C
	}
	for {
		select {
		case <-ctx.Done():
			for _, f := range flights {
				f.drop(context.Canceled)
			}
			if last == nil {
				last = &outcome{lease: flights[len(flights)-1].leased(), class: engine.Canceled, done: func() {}}
			}
			return nil, last, attempts, hedges, nil
		case <-hedge:
			hedge = nil
			if len(flights) == 1 && awaited() == 1 && another() && g.budget.Hedge(g.cfg.Now()) && launch() == nil {
				hedges++
			}
		case f := <-deadlines:
			// Silence past the deadline: the attempt is cut when another
			// attempt is in flight or may take its place; otherwise it
			// runs on to the attempt timeout.
			silent := &outcome{lease: f.leased(), class: engine.ProxyTimeout, reached: true}
			if f.isAwaited() && (awaited() > 1 || another() && g.retry(j, silent, attempts) && launch() == nil) {
				f.drop(context.DeadlineExceeded)
			}
		case got := <-landings:
			o := got.o
			if last != nil {
				last.discard()
				last = nil
			}
			if o.class == engine.OK {
				return o, nil, attempts, hedges, nil
			}
			last = o
			if awaited() > 0 {
				continue // another attempt may still answer
			}
			// Neither admission's refusal nor the gateway's own want of
			// resources would go better on another route.
			if o.blocked != nil || o.local != "" || !another() || !g.retry(j, o, attempts) || launch() != nil {
				return nil, last, attempts, hedges, nil
			}
		}
	}
}

// retry decides whether a failed attempt is tried again on another route
// (SPEC §2.4), in this order: attempts are left; the request allows it
// (no session: a session's exit never changes silently; the body can be
// sent again; the method is idempotent, RFC 9110 §9.2.2, or nothing of it
// can have reached the target); the engine deems another route worth it
// (the rule table, no incident of that class at the target); and the
// pool-wide budget has room, which it then spends.
func (g *Gateway) retry(j *job, o *outcome, attempts int) bool {
	return attempts < g.cfg.MaxAttempts &&
		j.retryable(o) &&
		g.engine.Retryable(j.target, o.class) &&
		g.budget.Retry(g.cfg.Now())
}

// fly starts an attempt through the leased route. Its context outlives the
// client's request, so that an attempt the loop no longer waits for comes
// to its own end and reports it.
func (g *Gateway) fly(ctx context.Context, j *job, l engine.Lease, x *route.Exit, landings chan<- landed, deadlines chan<- *flight) *flight {
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &flight{lease: l, start: g.cfg.Now(), cancel: cancel, awaited: true}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = time.AfterFunc(g.cfg.AttemptTimeout, func() { f.expire() })
	switch {
	case l.Provisional:
		g.recheck(f, recheckFirst, deadlines)
	case l.Deadline > 0 && l.Deadline < g.cfg.AttemptTimeout:
		f.armDeadline(l.Deadline, deadlines)
	}
	go func() {
		o := g.attempt(actx, j, l, x)
		o.done = func() { cancel(nil) }
		f.mu.Lock()
		f.ended = true
		f.limit.Stop()
		if f.deadline != nil {
			f.deadline.Stop()
		}
		o.lease = f.lease
		f.mu.Unlock()
		if o.class == engine.Canceled && o.blocked == nil && o.bodyErr == nil && o.local == "" {
			o.class = o.lease.Canceled(g.cfg.Now().Sub(f.start), o.timeout)
		}
		// A winner the caller reports itself goes unreported here, unless
		// the loop no longer wants it.
		reported := o.class != engine.OK
		if reported {
			g.report(o.lease, o.evidence())
		}
		f.mu.Lock()
		awaited := f.awaited
		if awaited {
			landings <- landed{o: o, reported: reported} // buffered: one landing per attempt
		}
		f.mu.Unlock()
		if !awaited {
			if !reported {
				g.report(o.lease, o.evidence())
			}
			o.discard()
		}
	}()
	return f
}

// armDeadline starts f's deadline, due in d. The caller holds f.mu.
func (f *flight) armDeadline(d time.Duration, deadlines chan<- *flight) {
	f.deadline = time.AfterFunc(d, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.ended:
		case !f.awaited:
			f.cancel(context.DeadlineExceeded) // an orphan's silence is evidence too
		default:
			deadlines <- f // buffered: one deadline per attempt
		}
	})
}

// recheck looks again, in after, for the deadline of f's Provisional
// lease: once the pool has answered, the attempt gets the deadline it
// would have had, counted from its start, and is cut at once if that has
// passed. The caller holds f.mu.
func (g *Gateway) recheck(f *flight, after time.Duration, deadlines chan<- *flight) {
	f.deadline = time.AfterFunc(after, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.ended {
			return
		}
		d, _ := g.engine.Timing(f.lease, g.cfg.AttemptTimeout)
		if d <= 0 || d >= g.cfg.AttemptTimeout {
			g.recheck(f, 2*after, deadlines)
			return
		}
		f.lease.Deadline, f.lease.Provisional = d, false
		f.armDeadline(max(d-g.cfg.Now().Sub(f.start), 0), deadlines)
	})
}

// leased is f's lease as it stands.
func (f *flight) leased() engine.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease
}

// attempt runs j.try, turning a panic inside it into a Canceled outcome,
// logged: the attempt runs off the handler's goroutine, where net/http's
// own recovery does not reach, and a failure inside must not end the
// process.
func (g *Gateway) attempt(ctx context.Context, j *job, l engine.Lease, x *route.Exit) (o *outcome) {
	defer func() {
		if p := recover(); p != nil {
			log := g.cfg.Log
			if log == nil {
				log = slog.Default()
			}
			log.Error("attempt panicked", "route", l.Route, "panic", p, "stack", string(debug.Stack()))
			o = &outcome{lease: l, class: engine.Canceled}
		}
	}()
	return j.try(ctx, l, x)
}

// isAwaited reports whether the loop waits for f's outcome.
func (f *flight) isAwaited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.awaited && !f.ended
}

// drop stops waiting for f and ends it with cause, unless its outcome is
// already in.
func (f *flight) drop(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaited = false
	if !f.ended {
		f.cancel(cause)
	}
}

// expire ends f at the attempt timeout, a timeout whoever waits for it.
func (f *flight) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.cancel(context.DeadlineExceeded)
	}
}

// abandon hands the attempts still in flight over to their own ends once
// the loop returns: each runs on to its answer, its deadline or the
// attempt timeout, and reports it. Outcomes that landed unread are
// dropped, reported first if their attempt left that to the caller.
func (g *Gateway) abandon(flights []*flight, landings <-chan landed, win *outcome) {
	for _, f := range flights {
		f.mu.Lock()
		f.awaited = false
		f.mu.Unlock()
	}
	// No attempt lands from here on: what landed is all in the channel.
	for {
		select {
		case got := <-landings:
			if got.o == win {
				continue
			}
			if !got.reported {
				g.report(got.o.lease, got.o.evidence())
			}
			got.o.discard()
		default:
			return
		}
	}
}

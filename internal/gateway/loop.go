package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/lookalike"
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
//   - the client gives up, or the request's own deadline
//     (Config.RequestTimeout) passes: every attempt is canceled, which is
//     evidence only for one already past its deadline (Lease.Canceled);
//     at the request's deadline the client is answered 504
//     request_timeout.
//
// Each attempt reports its own outcome to the engine, so that one the loop
// no longer waits for still does. Each attempt has one timer for all the
// marks it waits for (flight.tick).

// job is one client request as the loop carries it: an absolute-form
// request (req set) or a CONNECT to addr. Attempts only read it.
type job struct {
	target string
	ctl    control
	// another says whether a failed attempt may be tried again on another
	// route as far as the request goes: for a forwarded request, a body
	// that can be sent again; the lease says whether a session forbids it
	// (bound), and Gateway.retry decides the rest.
	another bool
	// hedge says whether the request may be hedged: never one with a
	// session, whose first answer binds it.
	hedge bool

	// An absolute-form request (forward.go).
	req        *http.Request // the client's
	body       *reqBody
	signatures []string    // the target's block signatures
	builtin    bool        // the built-in signatures apply (target.MatchBuiltin)
	url        url.URL     // req.URL addressed as admission read it
	header     http.Header // req.Header as it leaves (outbound): shared by every attempt, never written
	upgrade    bool        // a WebSocket handshake (upgrade.go)
	// lookalike judges the ok answers no signature marked (lookalike.go);
	// nil when the target turned it off.
	lookalike *lookalike.Detector
	// probe: the answer is a probe's, which the detector rechecks and
	// does not learn from (Gateway.JudgeProbe).
	probe bool

	// A CONNECT (tunnel.go).
	addr string // the authority as admission read it

	// A fetch of the fetch API (fetch.go); zero fields for the forward
	// proxy's requests, which take Config's.
	limit   int           // attempts at most; 0: Config.MaxAttempts
	timeout time.Duration // all attempts together; 0: Config.RequestTimeout
	fetch   *fetchJob     // reads and validates each answer, and keeps the trace; nil otherwise

	// waited is set by run: how long the first attempt waited for the
	// paced route's next token its lease reserved (engine.Lease.Delay).
	waited time.Duration
}

// maxAttempts is j's cap on attempts, hedges included.
func (g *Gateway) maxAttempts(j *job) int {
	if j.limit > 0 {
		return j.limit
	}
	return g.cfg.MaxAttempts
}

// try runs one attempt of j through x and classifies it. ctx ends with
// cause context.DeadlineExceeded when the attempt is cut or times out and
// context.Canceled when the client gave up; try classifies by that cause
// (route.Classify does).
func (g *Gateway) try(ctx context.Context, j *job, l engine.Lease, x *route.Exit) *outcome {
	if j.req != nil {
		return g.forward(ctx, j, l, x)
	}
	return g.dialTunnel(ctx, l, x, j.addr)
}

// retryable says whether a failed attempt of j may be tried again on
// another route as far as the request goes: never on a session's bound
// route; a forwarded request that may have reached the target only when
// idempotent; a CONNECT whenever another is allowed, since every failure
// there comes before any byte of the client's went out.
func (j *job) retryable(o *outcome) bool {
	return !bound(o.lease) && j.resendable(o)
}

// resendable says whether j may be sent again after its attempt o, on
// whichever exit: another is allowed, and a forwarded request that may
// have reached the target is idempotent.
func (j *job) resendable(o *outcome) bool {
	return j.another && (j.req == nil || !o.reached || route.Idempotent(j.req.Method))
}

// bound reports whether l is the route a sticky session is bound to: its
// exit never changes silently, so no other route is tried in its place.
// A session's first request (l.Unbound) is tried on other routes like any
// request, and binds to the route whose attempt won (Gateway.bind).
func bound(l engine.Lease) bool { return l.Session != "" && !l.Unbound }

// bind binds the session of a winning attempt's lease taken before the
// session was bound, to its route; see bound.
func (g *Gateway) bind(l engine.Lease) {
	if !l.Unbound {
		return
	}
	// An error means the route left the pool meanwhile: the session stays
	// unbound, and its next request binds it elsewhere.
	_ = g.engine.Bind(g.cfg.Now(), l)
}

// outcome is how one attempt ended.
type outcome struct {
	lease      engine.Lease
	class      engine.Class
	latency    time.Duration
	retryAfter time.Duration
	reached    bool         // bytes of the request may have reached the target
	timeout    engine.Class // what silence reads as at the layer the attempt reached
	blocked    *admit.Error // admission refused the address dialled; class is then Canceled
	timedOut   bool         // the request's deadline passed: the client is answered 504, whatever came back
	bodyErr    error        // the client's streamed body broke off (gone, too slow); class is then Canceled
	local      string       // the gateway ran out of this resource of its own (route.LocalReason); class is then Canceled
	exit       *route.Exit  // the exit the attempt went out through: a gateway route's sub-exit, for reportAttempt; nil for an outcome of no attempt
	retired    bool         // the attempt's failure retired its sub-exit (provider.go)
	resp       *http.Response
	conn       net.Conn
	progress   route.Progress // how far the attempt got, recorded by the Exit
	fetched    *fetched       // the answer as a fetch read it (fetch.go); nil otherwise
	reported   atomic.Bool    // a winner's outcome went to the engine (deliver)
	// cancel ends the attempt's context; set by the loop, nil for an
	// outcome of no attempt.
	cancel context.CancelCauseFunc
}

// evidence is the outcome as the engine takes it.
func (o *outcome) evidence() engine.Outcome {
	return engine.Outcome{Class: o.class, Latency: o.latency, RetryAfter: o.retryAfter}
}

// done ends the attempt's context once its answer is consumed or dropped.
func (o *outcome) done() {
	if o.cancel != nil {
		o.cancel(nil)
	}
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

// flight is one attempt in progress. Its one timer marks, counted from the
// attempt's start, the request's hedge delay (first attempt only), the
// lease's deadline (or the next look at a Provisional one) and the attempt
// timeout: one timer however many of them the attempt waits for.
type flight struct {
	// Immutable after fly.
	g      *Gateway
	route  string // the route leased
	start  time.Time
	cancel context.CancelCauseFunc
	events chan<- event // the loop's

	mu      sync.Mutex
	lease   engine.Lease  // guarded by mu: its Deadline is set once a Provisional one is known
	awaited bool          // guarded by mu: the loop waits for the outcome
	ended   bool          // guarded by mu: the outcome is in
	timer   *time.Timer   // guarded by mu: goes off at due
	due     time.Duration // guarded by mu: the mark timer is set for
	hedgeAt time.Duration // guarded by mu: the hedge delay, still to come; 0: none
	next    time.Duration // guarded by mu: the deadline, or the next look at a Provisional one, still to come; 0: none
	look    time.Duration // guarded by mu: a Provisional lease's wait from one look to the next; 0 once it has a deadline
}

// event is what reaches the loop: an attempt's outcome (o), an awaited
// attempt silent past its deadline (silent), or the hedge delay passed.
type event struct {
	o        *outcome
	reported bool // o went to the engine, by the attempt
	silent   *flight
	hedge    bool
}

// run carries j through the pool: at most MaxAttempts attempts, hedges
// included. It returns the winning outcome, or else the last failure (nil
// when no route could be leased at all: err then says why; with a last
// failure, err is why no further route was leased, if that ended it), and
// the attempts and hedges made. The caller answers the client from it and
// reports the winner, once what it carried shows how it went: a tunnel's
// first bytes, an answer's whole body.
func (g *Gateway) run(ctx context.Context, s *settings, j *job) (win, last *outcome, attempts, hedges int, err error) {
	g.budget.Request(g.cfg.Now())
	// The request's deadline bounds all its attempts together. Theirs
	// outlive it (fly): when it passes they are ended as a client's
	// cancel ends them.
	timeout, limit := g.cfg.RequestTimeout, g.maxAttempts(j)
	if j.timeout > 0 {
		timeout = j.timeout
	}
	ctx, stop := context.WithTimeoutCause(ctx, timeout, errRequestTimeout)
	defer stop()
	// Room for all that can come: per attempt an outcome and a deadline,
	// and one hedge.
	events := make(chan event, 2*limit+1)
	var flights []*flight // one per attempt, each on a route of its own
	defer func() { g.abandon(flights, events, win) }()

	// another says whether a route is left to try, before any budget is
	// spent on it.
	another := func() bool { return len(flights) < s.routes.Listed() }
	repinned := false // a retired sub-exit's request went on through the new one
	launch := func(hedge bool) error {
		// Only the first attempt waits for a paced target: a retry or a
		// hedge has other attempts to watch meanwhile.
		wait := time.Duration(0)
		var tried []string // made for a retry or a hedge only
		if attempts == 0 {
			wait = g.cfg.LearnedMaxWait
		} else {
			tried = make([]string, len(flights))
			for i, f := range flights {
				tried[i] = f.route
			}
		}
		l, x, err := g.lease(ctx, s, j.ctl, j.target, tried, wait)
		if err != nil {
			return err
		}
		// A first attempt's lease that reserved a paced route's next
		// token is sent when the token comes (engine.Lease.Delay).
		if l.Delay > 0 {
			if g.cfg.Observer != nil {
				g.cfg.Observer.ObserveReservedWait(l.Delay)
			}
			if !sleep(ctx, l.Delay) {
				g.giveBack(l)
				return context.Cause(ctx)
			}
			j.waited = l.Delay
		}
		// The first attempt's timer marks the hedge delay, when a hedge
		// could follow: a hedge goes beside the first attempt alone, on
		// another route.
		hedgeAt := time.Duration(0)
		if attempts == 0 && j.hedge && limit > 1 && s.routes.Listed() > 1 && l.HedgeAfter > 0 && (l.Deadline == 0 || l.HedgeAfter < l.Deadline) {
			hedgeAt = l.HedgeAfter
		}
		attempts++
		if j.fetch != nil {
			j.fetch.begin(l, g.subExitOf(l, x), g.cfg.Now(), hedge)
		}
		flights = append(flights, g.fly(ctx, j, l, x, hedgeAt, events))
		return nil
	}
	awaited := func() (n int) {
		for _, f := range flights {
			if f.isAwaited() {
				n++
			}
		}
		return n
	}
	if err := launch(false); err != nil {
		return nil, nil, 0, 0, err
	}
	for {
		var ev event
		select {
		case <-ctx.Done():
			for _, f := range flights {
				f.drop(context.Canceled)
			}
			if last == nil {
				last = &outcome{lease: flights[len(flights)-1].leased(), class: engine.Canceled}
			}
			if errors.Is(context.Cause(ctx), errRequestTimeout) {
				// The client is told the request ran out of time, not
				// what a failure before answered.
				if last.resp != nil {
					last.resp.Body.Close()
					last.resp = nil
				}
				last.timedOut = true
			}
			return nil, last, attempts, hedges, nil
		case ev = <-events:
		}
		switch {
		case ev.hedge:
			if len(flights) == 1 && awaited() == 1 && another() && g.budget.Hedge(g.cfg.Now()) && launch(true) == nil {
				hedges++
			}
		case ev.silent != nil:
			// Silence past the deadline: the attempt is cut when another
			// attempt is in flight or may take its place; otherwise it
			// runs on to the attempt timeout.
			f := ev.silent
			silent := &outcome{lease: f.leased(), class: engine.ProxyTimeout, reached: true}
			if f.isAwaited() && (awaited() > 1 || another() && g.retry(j, silent, attempts) && launch(false) == nil) {
				f.drop(context.DeadlineExceeded)
			}
		default:
			o := ev.o
			if last != nil {
				last.discard()
				last = nil
			}
			if o.class == engine.OK {
				g.bind(o.lease)
				return o, nil, attempts, hedges, nil
			}
			last = o
			if awaited() > 0 {
				continue // another attempt may still answer
			}
			if !repinned && g.repin(j, o, attempts) {
				// The session's provider session is gone: once, the
				// request goes on through its new one (provider.go).
				repinned = true
				if err := launch(false); err != nil {
					return nil, last, attempts, hedges, err
				}
				continue
			}
			// Neither admission's refusal nor the gateway's own want of
			// resources would go better on another route.
			if o.blocked != nil || o.local != "" || !another() || !g.retry(j, o, attempts) {
				return nil, last, attempts, hedges, nil
			}
			if err := launch(false); err != nil {
				return nil, last, attempts, hedges, err
			}
		}
	}
}

// errRequestTimeout is the cause of a request's end at its deadline,
// Config.RequestTimeout.
var errRequestTimeout = errors.New("switchyard: request_timeout")

// retry decides whether a failed attempt is tried again on another route
// (docs/design/007-attempts.md), in this order: attempts are left; the
// request allows it (not a session's bound route: a session's exit never
// changes silently; the body can be sent again; the method is idempotent, RFC 9110 §9.2.2, or
// nothing of it can have reached the target); the engine deems another
// route worth it (the rule table, no incident of that class at the target);
// and the pool-wide budget has room, which it then spends.
func (g *Gateway) retry(j *job, o *outcome, attempts int) bool {
	return attempts < g.maxAttempts(j) &&
		j.retryable(o) &&
		g.engine.Retryable(j.target, o.class) &&
		g.budget.Retry(g.cfg.Now())
}

// fly starts an attempt through the leased route, its timer set for the
// hedge delay hedgeAt (0: none), the lease's deadline and the attempt
// timeout. Its context outlives the client's request, so that an attempt
// the loop no longer waits for comes to its own end and reports it.
func (g *Gateway) fly(ctx context.Context, j *job, l engine.Lease, x *route.Exit, hedgeAt time.Duration, events chan<- event) *flight {
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &flight{g: g, route: l.Route, start: g.cfg.Now(), cancel: cancel, events: events, lease: l, awaited: true, hedgeAt: hedgeAt}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case l.Provisional:
		f.look, f.next = engine.ProvisionalRecheck, engine.ProvisionalRecheck
	case l.Deadline > 0 && l.Deadline < g.cfg.AttemptTimeout:
		f.next = l.Deadline
	}
	f.due = f.nextMark()
	f.timer = time.AfterFunc(f.due, f.tick)
	go func() {
		o := g.attempt(actx, j, l, x)
		o.cancel, o.exit = cancel, x
		f.mu.Lock()
		f.ended = true
		f.timer.Stop()
		o.lease = f.lease
		f.mu.Unlock()
		if o.class == engine.Canceled && o.blocked == nil && o.bodyErr == nil && o.local == "" {
			o.class = o.lease.Canceled(g.cfg.Now().Sub(f.start), o.timeout)
		}
		if j.fetch != nil {
			j.fetch.end(o)
		}
		// A winner the caller reports itself goes unreported here, unless
		// the loop no longer wants it.
		reported := o.class != engine.OK
		if reported {
			g.reportAttempt(o, o.evidence())
		}
		f.mu.Lock()
		awaited := f.awaited
		if awaited {
			events <- event{o: o, reported: reported} // buffered: one outcome per attempt
		}
		f.mu.Unlock()
		if !awaited {
			if !reported {
				g.reportAttempt(o, o.evidence())
			}
			o.discard()
		}
	}()
	return f
}

// nextMark is the first of f's marks still to come: the hedge delay, the
// deadline or a look at a Provisional one, and the attempt timeout, which
// always is. The caller holds f.mu.
func (f *flight) nextMark() time.Duration {
	due := f.g.cfg.AttemptTimeout
	if f.hedgeAt > 0 && f.hedgeAt < due {
		due = f.hedgeAt
	}
	if f.next > 0 && f.next < due {
		due = f.next
	}
	return due
}

// tick is f's timer going off at the mark f.due: whatever falls there is
// done, then the timer is set for the next mark.
//
//   - The hedge delay: the loop is told, if it still waits for f.
//   - A look at a Provisional lease: once the pool has answered, the
//     attempt gets the deadline it would have had, counted from its
//     start, due at once if that has passed; else it looks again later.
//   - The deadline: the loop is told, if it waits for f; an orphan is cut
//     (its silence is evidence too).
//   - The attempt timeout: f is cut, a timeout whoever waits for it.
func (f *flight) tick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	now, limit := f.due, f.g.cfg.AttemptTimeout
	if now >= limit {
		f.cancel(context.DeadlineExceeded)
		return
	}
	if f.hedgeAt > 0 && f.hedgeAt <= now {
		f.hedgeAt = 0
		if f.awaited {
			f.events <- event{hedge: true} // buffered: one hedge per request
		}
	}
	if f.next > 0 && f.next <= now {
		f.next = 0
		switch {
		case f.look > 0:
			if d, _ := f.g.engine.Timing(f.g.cfg.Now(), f.lease, limit); d <= 0 || d >= limit {
				f.look *= 2
				f.next = now + f.look
			} else {
				f.lease.Deadline, f.lease.Provisional = d, false
				f.look, f.next = 0, max(d, now)
			}
		case !f.awaited:
			f.cancel(context.DeadlineExceeded) // an orphan's silence is evidence too
		default:
			f.events <- event{silent: f} // buffered: one deadline per attempt
		}
	}
	f.due = f.nextMark()
	f.timer.Reset(f.due - now)
}

// leased is f's lease as it stands.
func (f *flight) leased() engine.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease
}

// attempt runs g.try, turning a panic inside it into a Canceled outcome,
// logged: the attempt runs off the handler's goroutine, where the server's
// own recovery does not reach, and a failure inside must not end the
// process.
func (g *Gateway) attempt(ctx context.Context, j *job, l engine.Lease, x *route.Exit) (o *outcome) {
	defer func() {
		if p := recover(); p != nil {
			g.logger().Error("attempt panicked", "route", l.Route, "panic", p, "stack", string(debug.Stack()))
			o = &outcome{lease: l, class: engine.Canceled}
		}
	}()
	return g.try(ctx, j, l, x)
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

// abandon hands the attempts still in flight over to their own ends once
// the loop returns: each runs on to its answer, its deadline or the
// attempt timeout, and reports it. Outcomes that landed unread are
// dropped, reported first if their attempt left that to the caller.
func (g *Gateway) abandon(flights []*flight, events <-chan event, win *outcome) {
	for _, f := range flights {
		f.mu.Lock()
		f.awaited = false
		f.mu.Unlock()
	}
	// No outcome lands from here on: what landed is all in the channel.
	for {
		select {
		case ev := <-events:
			if ev.o == nil || ev.o == win {
				continue
			}
			if !ev.reported {
				g.reportAttempt(ev.o, ev.o.evidence())
			}
			ev.o.discard()
		default:
			return
		}
	}
}

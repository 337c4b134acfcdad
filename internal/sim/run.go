package sim

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/lookalike"
)

// Load is the client model of a run and the gateway's attempt settings.
// The run models a crawler with a fixed number of workers behind a
// gateway (the policy): a task is up to ClientAttempts requests, each
// given up after ClientTimeout; the gateway makes up to MaxAttempts
// attempts per request on different routes, each cut at its deadline when
// another can follow, else at AttemptTimeout.
type Load struct {
	Seed     uint64
	Duration time.Duration // simulated time the run lasts; 0: until Tasks have ended
	Tasks    int           // tasks to run; 0: as many as Duration allows
	Workers  int

	AttemptTimeout time.Duration
	MaxAttempts    int

	ClientTimeout  time.Duration
	ClientAttempts int
	TaskDeadline   time.Duration
	Think          time.Duration // pause between a worker's tasks
	// SessionTasks, when positive, groups each worker's tasks in sticky
	// sessions of that many tasks. The gateway never retries a session's
	// request on another route; a client whose session request failed
	// starts a new session for its retry.
	SessionTasks int
	// RetryRefusals: a refused request is a failed one, and the client
	// sends its next a round trip later (Scenario.RetryRefusals).
	RetryRefusals bool
	// TargetWeights is each target's share of tasks; nil means even.
	TargetWeights []float64
}

// ProgressSteps is how many steps Run reports to its progress callback.
func (l Load) ProgressSteps() int {
	if l.Duration > 0 {
		return int(l.Duration / time.Second)
	}
	return l.Tasks
}

// Epoch is the virtual clock's start, the same for every run.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seriesBucket is the width of a plot point, and faultBucket of the
// buckets that time detection and recovery.
const (
	seriesBucket = 5 * time.Second
	faultBucket  = time.Second
)

// probeTimeout bounds one probe, as the prober's default does
// (internal/probe); a probe of a silent exit fails then.
const probeTimeout = 10 * time.Second

// noRouteWait is how long a client told that no route can carry its
// request now waits before asking again, unless the policy says when one
// will be ready (retryHinter).
const noRouteWait = time.Second

// refusalRoundTrip is how long a refusal takes to reach the client: a
// round trip to a gateway on its network. The worker's next request, the
// same page again (Load.RetryRefusals) or another while the refused one
// is set aside, goes once it is in. Free, a refusal let a worker set aside
// thousands of pages at one instant whenever a site's exits were all
// between two turns, few of them to be done before their deadline
// (limits-saturated: 73% of its tasks completed; docs/simulator-results.md,
// *A refusal takes a round trip*).
const refusalRoundTrip = time.Millisecond

// maxParkedPerWorker bounds the tasks set aside (parked) per worker. A
// worker whose request is refused at once takes another task only while
// fewer than this many per worker are set aside; beyond it the worker
// waits for the first to come due: a crawler's frontier is finite.
const maxParkedPerWorker = 256

// retimer is a Policy that gives a Provisional attempt its deadline once
// something is known (engine.Engine.Timing): its deadline for the attempt
// ticket names now, or 0 (or timeout and above) when still unknown.
type retimer interface {
	Retime(now time.Time, ticket uint64, timeout time.Duration) time.Duration
}

// retryHinter is a Policy that, after offering no route, can say when it
// will have one.
type retryHinter interface {
	RetryIn() time.Duration
}

// pacedHolder is a Policy that, as the gateway with
// pacing.learned_max_wait, holds a request's first attempt for a route
// when every one was at the rate its target taught: after a Pick that
// offered nothing, wait is how long until the first is ready (0: the
// refusal was for another reason) and hold how long a request may be held
// in all.
type pacedHolder interface {
	PacedHold() (wait, hold time.Duration)
}

// Run simulates load against w through p and measures it. The task stream
// (targets, randomness of the world) depends only on load.Seed, so every
// policy faces the same tasks. progress, when not nil, is told of each
// simulated second when the load has a Duration, else of each finished
// task (Load.ProgressSteps).
func Run(w World, p Policy, load Load, progress func(int)) Summary {
	r := runner{
		w: w, p: p, load: load,
		tasks:  rand.New(rand.NewPCG(load.Seed, 1)),
		world:  rand.New(rand.NewPCG(load.Seed, 2)),
		probed: rand.New(rand.NewPCG(load.Seed, 3)),
	}
	r.retrier, _ = p.(retrier)
	r.hedger, _ = p.(hedger)
	r.retimer, _ = p.(retimer)
	r.costs, _ = w.(costs)
	r.lookalike = lookalike.New(lookalike.Config{Now: func() time.Time { return Epoch.Add(r.now) }})
	r.init()
	wall := time.Now()
	r.loop(progress)
	s := r.summary()
	if elapsed := time.Since(wall).Seconds(); elapsed > 0 {
		s.AttemptsPerSecond = float64(s.Attempts) / elapsed
	}
	return s
}

// runner is one simulation run. It is used by one goroutine.
type runner struct {
	w       World
	p       Policy
	retrier retrier // nil: the rule table's retries, no budget
	hedger  hedger  // nil: no hedges
	retimer retimer // nil: a Provisional attempt keeps its deadline
	costs   costs   // nil: no prices
	load    Load
	tasks   *rand.Rand // draws task targets
	world   *rand.Rand // draws the world's randomness for users' attempts
	// probed draws it for probes, so that how a policy probes leaves the
	// world's answers to users' attempts alone: two policies, or two
	// builds, are compared on the same draws.
	probed *rand.Rand
	// lookalike is the gateway's detector, judging the pages the world
	// answers as the gateway judges them (judge).
	lookalike *lookalike.Detector

	now      time.Duration
	queue    eventQueue
	workers  []worker
	attempts []attempt // in flight, by slot
	free     []int32   // attempt slots not in use
	started  int       // tasks handed out
	cum      []float64

	unlisted []int // routes yet to join the list, by join time (lister)
	pickAway []int // scratch: a pick's avoided routes, the unlisted ones included

	probes   []pendingProbe // by slot: probes whose result is on its way
	freeProb []int32        // probe slots not in use
	parked   parkedTasks    // tasks set aside until their due time

	completed, failed    int
	sent, hedges, wasted int
	incident             int
	spend                float64 // the attempts' prices (costs)
	falseInvalid         int     // pages asked for that the detector judged content_invalid
	decoysPassed         int     // soft-ban pages it judged valid
	latencies            []time.Duration
	series               []bucket
	faults               []faultTrack
}

// pendingProbe is a probe result on its way to the policy.
type pendingProbe struct {
	result Result
	done   func(now time.Time, r Result)
}

// task is one page a client wants.
type task struct {
	id      uint64 // names its URL for the lookalike detector
	target  int
	started time.Duration // when it was first tried
	tries   int           // client requests made for it so far
	session string        // its sticky session, if any
	due     time.Duration // when parked: when it may be tried again
}

// worker is one client. Its task and request change as it goes; events
// name the request they belong to (req), so a late one is dropped.
type worker struct {
	task
	sessions int // sessions started
	left     int // tasks left in the session

	// the client request in progress
	req      uint32
	live     bool          // a request is in progress
	sticky   bool          // it carries the session: no retries, no hedges
	giveUp   time.Duration // when the client gives up on it
	attempts int           // gateway attempts made for it, hedges included
	avoid    []int         // routes tried for it
	inflight []int32       // attempt slots in flight for it
	last     Result        // its last failed attempt's result
	held     time.Duration // how long the gateway held it for a paced route (pacedHolder)
	// reserved is an attempt waiting for its Delay, of request
	// reservedReq, while reserving: sent then if its request is still in
	// progress, else canceled.
	reserved    Attempt
	reservedReq uint32
	reserving   bool
}

// attempt is one upstream attempt in flight.
type attempt struct {
	worker int
	req    uint32
	gen    uint32 // bumped when the slot is reused
	route  int
	target int
	url    uint64 // the task's id
	ticket uint64
	start  time.Duration
	result Result        // what the world will answer, and when
	cut    time.Duration // the deadline after which silence is cut and retried
	// A Provisional attempt's next look at its deadline, from its start,
	// and the wait from that one to the one after; 0 once it has one.
	next, step time.Duration
	// orphan marks a hedge race's loser: its request has its answer, and
	// the attempt runs on to its own answer or deadline only to be judged.
	orphan bool
}

type bucket struct{ finished, completed, attempts, bad int }

func (r *runner) init() {
	weights := r.load.TargetWeights
	r.cum = make([]float64, r.w.Targets())
	sum := 0.0
	for i := range r.cum {
		wt := 1.0
		if weights != nil {
			wt = weights[i]
		}
		sum += wt
		r.cum[i] = sum
	}
	r.workers = make([]worker, r.load.Workers)
	for i := range r.workers {
		r.queue.push(event{at: 0, worker: i, kind: evStart})
	}
	// The policy's timed work starts at once: new routes are checked
	// before the first request, as a starting gateway's prober does.
	r.queue.push(event{at: 0, kind: evTick})
	for _, f := range r.w.Faults() {
		r.faults = append(r.faults, newFaultTrack(f, r.w.Routes()))
	}
	r.unlisted = joining(r.w)
}

// list drops from the unlisted routes those that have joined by now.
func (r *runner) list() {
	for len(r.unlisted) > 0 && joinsAt(r.w, r.unlisted[0]) <= r.now {
		r.unlisted = r.unlisted[1:]
	}
}

// listed is the number of routes in the list now.
func (r *runner) listed() int { return r.w.Routes() - len(r.unlisted) }

// probe is a Prober: a probe at now as the gateway's prober makes it
// (internal/probe). A neutral probe asks the exit for a tunnel (to a site
// users' traffic reached, or to a name reserved never to resolve before
// any did) or fetches the probe URL's page through it: the exit's own
// behaviour alone decides either, as it decides its answer for the
// neutral target (a blackholed proxy never answers, one that refuses the
// credentials says 407). A route×target probe fetches the site's page.
// A probe without an answer fails at the prober's timeout, as
// proxy_timeout.
func (r *runner) probe(route, target int, done func(time.Time, Result)) {
	if slices.Contains(r.unlisted, route) {
		return // no gateway knows of it yet
	}
	var res Result
	switch {
	case target == tcpCheck:
		res = r.w.Check(route, r.now)
	case target == checkPage, target == NeutralTarget:
		res = r.w.Attempt(route, NeutralTarget, r.now, r.probed)
	default:
		res = r.page(r.w.Attempt(route, target, r.now, r.probed), route, target, probePage, r.lookalike.Recheck)
	}
	if res.Latency > probeTimeout {
		res = Result{Class: engine.ProxyTimeout, Latency: probeTimeout}
	}
	var slot int32
	if n := len(r.freeProb); n > 0 {
		slot, r.freeProb = r.freeProb[n-1], r.freeProb[:n-1]
	} else {
		r.probes = append(r.probes, pendingProbe{})
		slot = int32(len(r.probes) - 1)
	}
	r.probes[slot] = pendingProbe{result: res, done: done}
	r.queue.push(event{at: r.now + res.Latency, slot: slot, kind: evProbe})
}

func (r *runner) loop(progress func(int)) {
	busy := len(r.workers)
	for len(r.queue.items) > 0 && busy > 0 {
		ev := r.queue.pop()
		if r.load.Duration > 0 && ev.at > r.load.Duration {
			break // work in progress at the end is neither completed nor failed
		}
		r.now = ev.at
		ended := false
		switch ev.kind {
		case evTick:
			r.list()
			r.p.Tick(Epoch.Add(r.now), r.probe)
			r.queue.push(event{at: r.now + time.Second, kind: evTick})
			if r.load.Duration > 0 && r.now > 0 && progress != nil {
				progress(1) // a simulated second
			}
		case evProbe:
			pr := r.probes[ev.slot]
			r.probes[ev.slot] = pendingProbe{}
			r.freeProb = append(r.freeProb, ev.slot)
			pr.done(Epoch.Add(r.now), pr.result)
		case evStart:
			if !r.startTask(ev.worker) {
				busy--
			}
		case evAnswer:
			a := r.live(ev)
			if a == nil {
				break
			}
			res := r.judge(a)
			if a.orphan {
				r.end(ev.slot, res)
			} else {
				ended = r.answer(ev.slot, res)
			}
		case evDeadline:
			if a := r.live(ev); a != nil && a.orphan {
				r.end(ev.slot, Result{Class: engine.ProxyTimeout, Latency: r.now - a.start})
			} else if a != nil {
				ended = r.deadline(ev.slot)
			}
		case evCap:
			timeout := Result{Class: engine.ProxyTimeout, Latency: r.load.AttemptTimeout}
			if a := r.live(ev); a != nil && a.orphan {
				r.end(ev.slot, timeout)
			} else if a != nil {
				ended = r.answer(ev.slot, timeout)
			}
		case evLook:
			if r.live(ev) != nil {
				r.look(ev.slot)
			}
		case evHedge:
			if wk := &r.workers[ev.worker]; wk.live && wk.req == ev.req {
				r.hedge(ev.worker)
			}
		case evGiveUp:
			if wk := &r.workers[ev.worker]; wk.live && wk.req == ev.req {
				ended = r.giveUp(ev.worker)
			}
		case evRefused:
			if wk := &r.workers[ev.worker]; wk.live && wk.req == ev.req {
				ended = r.fail(ev.worker)
			}
		case evHeld:
			if wk := &r.workers[ev.worker]; wk.live && wk.req == ev.req {
				ended = r.send(ev.worker)
			}
		case evReserved:
			if wk := &r.workers[ev.worker]; wk.reserving && wk.reservedReq == ev.req {
				if wk.live && wk.req == ev.req {
					wk.reserving = false
					r.launch(ev.worker, wk.reserved)
				} else {
					r.dropReserved(wk)
				}
			}
		}
		if ended && r.load.Duration == 0 && progress != nil {
			progress(1)
		}
	}
}

// live returns the attempt an event names, nil if it has ended since.
func (r *runner) live(ev event) *attempt {
	a := &r.attempts[ev.slot]
	if a.gen != ev.gen || a.worker < 0 {
		return nil
	}
	return a
}

// startTask hands the worker its next task: a parked one that is due,
// else a new one; false when none are left.
func (r *runner) startTask(i int) bool {
	wk := &r.workers[i]
	if t, ok := r.parked.due(r.now); ok {
		wk.task = t
		if r.now >= t.started+r.load.TaskDeadline {
			// Its time ran out while every worker was busy: the crawler
			// drops it, sending nothing.
			r.endTask(i, false)
			return true
		}
		r.request(i)
		return true
	}
	if r.load.Tasks > 0 && r.started >= r.load.Tasks {
		if next, ok := r.parked.next(); ok {
			r.queue.push(event{at: next, worker: i, kind: evStart}) // only parked tasks are left
			return true
		}
		return false
	}
	r.started++
	x := r.tasks.Float64() * r.cum[len(r.cum)-1]
	target, _ := slices.BinarySearch(r.cum, x)
	wk.task = task{id: uint64(r.started), target: min(target, len(r.cum)-1), started: r.now}
	if r.load.SessionTasks > 0 {
		if wk.left == 0 {
			r.newSession(i)
		}
		wk.left--
		wk.task.session = wk.sessionID(i)
	}
	r.request(i)
	return true
}

// newSession starts the worker's next sticky session.
func (r *runner) newSession(i int) {
	wk := &r.workers[i]
	wk.sessions++
	wk.left = r.load.SessionTasks
}

// sessionID names the worker's current session.
func (wk *worker) sessionID(i int) string {
	return "w" + strconv.Itoa(i) + "-" + strconv.Itoa(wk.sessions)
}

// request starts the worker's next client request for its task.
func (r *runner) request(i int) bool {
	wk := &r.workers[i]
	wk.tries++
	wk.req++
	wk.live, wk.sticky = true, wk.session != ""
	wk.attempts, wk.avoid, wk.inflight, wk.held = 0, wk.avoid[:0], wk.inflight[:0], 0
	wk.giveUp = min(r.now+r.load.ClientTimeout, wk.started+r.load.TaskDeadline)
	if r.retrier != nil {
		r.retrier.Request(Epoch.Add(r.now))
	}
	r.queue.push(event{at: wk.giveUp, worker: i, req: wk.req, kind: evGiveUp})
	return r.send(i)
}

// pick asks the policy for a route for the worker's request, other than
// those it has tried.
func (r *runner) pick(i int) (Attempt, bool) {
	wk := &r.workers[i]
	session := ""
	if wk.sticky {
		session = wk.session
	}
	avoid := wk.avoid
	if len(r.unlisted) > 0 {
		r.pickAway = append(append(r.pickAway[:0], wk.avoid...), r.unlisted...)
		avoid = r.pickAway
	}
	return r.p.Pick(Epoch.Add(r.now), wk.target, session, avoid)
}

// send starts the first attempt of the worker's request, or a retry after
// a failure. When the policy offers no route for the first, the client is
// told at once and asks again after the wait it was given, or 1 s (with
// Load.RetryRefusals, it counts a failed request and sends the next); with
// none for a retry, the request ends with its last failure, as the
// gateway answers it (internal/gateway/loop.go). It reports whether the
// task ended.
func (r *runner) send(i int) bool {
	if a, ok := r.pick(i); ok {
		if a.Delay > 0 {
			// Sent when its reserved token comes, as the gateway does.
			wk := &r.workers[i]
			r.dropReserved(wk)
			wk.reserved, wk.reservedReq, wk.reserving = a, wk.req, true
			r.queue.push(event{at: r.now + a.Delay, worker: i, req: wk.req, kind: evReserved})
			return false
		}
		r.launch(i, a)
		return false
	}
	wk := &r.workers[i]
	if wk.attempts > 0 {
		return r.fail(i)
	}
	if h, ok := r.p.(pacedHolder); ok {
		// The gateway's lease loop (internal/gateway/pace.go): it sleeps
		// until the first route is ready while that fits what is left of
		// the hold, and asks again.
		if wait, hold := h.PacedHold(); wait > 0 && wk.held+wait <= hold {
			wait = max(wait, time.Millisecond)
			wk.held += wait
			r.queue.push(event{at: r.now + wait, worker: i, req: wk.req, kind: evHeld})
			return false
		}
	}
	if r.load.RetryRefusals {
		// The refusal (503, or 429 paced) is the request's answer: a
		// failed try, the next sent as it arrives.
		r.queue.push(event{at: r.now + refusalRoundTrip, worker: i, req: wk.req, kind: evRefused})
		return false
	}
	// No route can take it now (a gateway's 503, or 429 with the
	// Retry-After the policy knows): a crawler sets the page aside for
	// that long and has the worker fetch another meanwhile, rather than
	// hold a worker idle.
	wait := noRouteWait
	if h, ok := r.p.(retryHinter); ok && h.RetryIn() > 0 {
		// As the gateway says it: a Retry-After in whole seconds.
		wait = time.Duration(engine.RetryAfterSeconds(h.RetryIn())) * time.Second
	}
	if r.now+wait >= wk.started+r.load.TaskDeadline {
		return r.fail(i)
	}
	wk.live = false
	t := wk.task
	t.tries-- // a request the gateway refused at once is not a try
	t.due = r.now + wait
	r.parked.push(t)
	next := r.now + refusalRoundTrip
	if len(r.parked.items) > maxParkedPerWorker*len(r.workers) {
		// The first may have come due while every worker was busy: then
		// it is taken now, not when it came due (the clock never goes
		// back).
		due, _ := r.parked.next()
		next = max(next, due)
	}
	r.queue.push(event{at: next, worker: i, kind: evStart})
	return false
}

// dropReserved cancels the worker's reserved attempt, if any: its request
// ended before the attempt was sent.
func (r *runner) dropReserved(wk *worker) {
	if wk.reserving {
		wk.reserving = false
		r.p.Report(Epoch.Add(r.now), wk.reserved.Ticket, Result{Class: engine.Canceled})
	}
}

// launch sends attempt a for the worker's request.
func (r *runner) launch(i int, a Attempt) {
	wk := &r.workers[i]
	wk.attempts++
	wk.avoid = append(wk.avoid, a.Route)
	r.sent++
	if r.costs != nil {
		r.spend += r.costs.Price(a.Route)
	}
	bad := r.w.Bad(a.Route, wk.target, r.now)
	b := r.bucketAt(r.now)
	b.attempts++
	if bad {
		r.wasted++
		b.bad++
	}
	for k := range r.faults {
		f := &r.faults[k]
		f.count(r.now, a.Route, wk.target)
		if f.SiteDown && f.active(r.now) && f.covers(a.Route, wk.target) {
			r.incident++
		}
	}
	slot := r.slot()
	at := &r.attempts[slot]
	*at = attempt{worker: i, req: wk.req, gen: at.gen + 1, route: a.Route, target: wk.target, url: wk.id, ticket: a.Ticket, start: r.now,
		result: r.w.Attempt(a.Route, wk.target, r.now, r.world)}
	at.cut = r.load.AttemptTimeout
	if a.Deadline > 0 {
		at.cut = min(a.Deadline, r.load.AttemptTimeout)
	}
	if a.Provisional && r.retimer != nil {
		at.next, at.step = engine.ProvisionalRecheck, engine.ProvisionalRecheck
	}
	wk.inflight = append(wk.inflight, slot)
	r.await(slot)
	if r.hedger != nil && wk.attempts == 1 && !wk.sticky && r.load.MaxAttempts > 1 && a.HedgeAfter > 0 && a.HedgeAfter < at.cut {
		r.queue.push(event{at: r.now + a.HedgeAfter, worker: i, req: wk.req, kind: evHedge})
	}
}

// await schedules attempt slot's next event: a look at its provisional
// deadline, its answer, its deadline (at once if that has passed) or the
// attempt timeout, whichever comes first.
func (r *runner) await(slot int32) {
	a := &r.attempts[slot]
	ev := event{slot: slot, gen: a.gen}
	lat, limit := a.result.Latency, r.load.AttemptTimeout
	switch {
	case a.next > 0 && a.next < min(lat, limit):
		ev.at, ev.kind = a.start+a.next, evLook
	case lat <= a.cut:
		ev.at, ev.kind = a.start+lat, evAnswer
	case a.cut < limit:
		ev.at, ev.kind = max(a.start+a.cut, r.now), evDeadline
	default:
		ev.at, ev.kind = a.start+limit, evCap
	}
	r.queue.push(ev)
}

// look is a look at attempt slot's provisional deadline, as the gateway
// takes one (internal/gateway/loop.go): once something is known, the
// attempt gets the deadline it would have had, counted from its start;
// else it looks again, twice as late.
func (r *runner) look(slot int32) {
	a := &r.attempts[slot]
	limit := r.load.AttemptTimeout
	if d := r.retimer.Retime(Epoch.Add(r.now), a.ticket, limit); d > 0 && d < limit {
		a.cut, a.next = d, 0
	} else {
		a.step *= 2
		a.next += a.step
	}
	r.await(slot)
}

func (r *runner) slot() int32 {
	if n := len(r.free); n > 0 {
		s := r.free[n-1]
		r.free = r.free[:n-1]
		return s
	}
	r.attempts = append(r.attempts, attempt{worker: -1})
	return int32(len(r.attempts) - 1)
}

// end reports attempt slot's result to the policy and retires it.
func (r *runner) end(slot int32, res Result) {
	a := &r.attempts[slot]
	r.p.Report(Epoch.Add(r.now), a.ticket, res)
	if !a.orphan {
		r.detach(slot)
	}
	a.worker, a.orphan = -1, false
	r.free = append(r.free, slot)
}

// detach takes attempt slot off its worker's request.
func (r *runner) detach(slot int32) {
	wk := &r.workers[r.attempts[slot].worker]
	wk.inflight = slices.DeleteFunc(wk.inflight, func(s int32) bool { return s == slot })
}

// answer ends attempt slot with res; it reports whether the task ended.
func (r *runner) answer(slot int32, res Result) bool {
	i := r.attempts[slot].worker
	r.end(slot, res)
	wk := &r.workers[i]
	if res.Class == engine.OK {
		// The hedge race's loser runs on to its answer or its deadline
		// for the evidence, no longer for the client.
		for len(wk.inflight) > 0 {
			r.attempts[wk.inflight[0]].orphan = true
			r.detach(wk.inflight[0])
		}
		if res.Page == DecoyPage {
			// Relayed as a page, read as a captcha: the client asks again.
			return r.fail(i)
		}
		r.endTask(i, true)
		return true
	}
	wk.last = res
	if len(wk.inflight) > 0 {
		return false // a hedge is still out: its answer decides
	}
	if r.retries(i, res.Class) {
		return r.send(i)
	}
	return r.fail(i)
}

// pageSizes are the bytes the gateway digests of each page: a page is
// longer than the 16 KiB it reads (signatureWindow, internal/gateway), a
// captcha page a few KiB, an API's fixed JSON a few hundred bytes.
var pageSizes = [...]int{OwnPage: 16 << 10, SitePage: 512, DecoyPage: 5 << 10}

// judge is attempt a's answer as the gateway classifies it: an ok answer
// with a page goes through the lookalike detector, with no signature
// configured (internal/gateway/forward.go, judge), and one it finds out is
// content_invalid.
func (r *runner) judge(a *attempt) Result {
	res := r.page(a.result, a.route, a.target, a.url, r.lookalike.Judge)
	switch {
	case res.Class == engine.ContentInvalid && a.result.Class == engine.OK && res.Page != DecoyPage:
		r.falseInvalid++
	case res.Class == engine.OK && res.Page == DecoyPage:
		r.decoysPassed++
	}
	return res
}

// probePage is the URL (task ids start at 1) of the page a route×target
// probe fetches: one page of the target's, again and again.
const probePage = 0

// page is res, route's answer for url at target, as judged by the
// lookalike detector's judge (Judge for users' answers, Recheck for a
// probe's, which the gateway judges without learning from it:
// Gateway.JudgeProbe). A page's body is its URL's own for OwnPage, one for
// all of the target's URLs otherwise.
func (r *runner) page(res Result, route, target int, url uint64, judge func(target, route string, a lookalike.Answer) lookalike.Verdict) Result {
	if res.Class != engine.OK || res.Page == NoPage {
		return res
	}
	body := uint64(res.Page)
	if res.Page == OwnPage {
		body |= url << 2 // the Page values fit in two bits
	}
	if judge(r.w.TargetName(target), r.w.RouteID(route), lookalike.Answer{URL: url, Body: body, Size: pageSizes[res.Page]}) != lookalike.Valid {
		res.Class = engine.ContentInvalid
	}
	return res
}

// deadline is attempt slot reaching its deadline without an answer. As
// the gateway does (internal/gateway/loop.go), it is cut, a timeout, when
// another attempt of the request is in flight (a hedge) or may take its
// place on another route; otherwise it runs on to its answer or the
// attempt timeout.
func (r *runner) deadline(slot int32) bool {
	a := &r.attempts[slot]
	i := a.worker
	cut := Result{Class: engine.ProxyTimeout, Latency: r.now - a.start} // past a.cut when a look found it passed
	if len(r.workers[i].inflight) > 1 {
		r.end(slot, cut)
		return false
	}
	if r.retries(i, engine.ProxyTimeout) {
		// The next route is leased before this attempt is let go.
		if next, ok := r.pick(i); ok {
			r.end(slot, cut)
			r.launch(i, next)
			return false
		}
	}
	ev := event{slot: slot, gen: a.gen, at: a.start + r.load.AttemptTimeout, kind: evCap}
	if a.result.Latency <= r.load.AttemptTimeout {
		ev.at, ev.kind = a.start+a.result.Latency, evAnswer
	}
	r.queue.push(ev)
	return false
}

// retries reports whether the gateway retries the worker's request after
// a failure of class c: the request is not a session's, attempts and
// untried routes are left, and the policy's rules (or the rule table)
// allow it.
func (r *runner) retries(i int, c engine.Class) bool {
	wk := &r.workers[i]
	if wk.sticky || wk.attempts >= r.load.MaxAttempts || len(wk.avoid) >= r.listed() || r.now >= wk.giveUp {
		return false
	}
	if r.retrier != nil {
		return r.retrier.Retry(Epoch.Add(r.now), wk.target, c)
	}
	rules := engine.DefaultRules()
	return rules.Rule(c).Retry
}

// hedge starts a second attempt for the worker's request on another
// route, as the gateway does: only while its first attempt, still without
// an answer, is the only one it has made (a retry is not hedged on the
// first attempt's delay), a route is left to try and the policy's budget
// allows. A hedge that finds no route is not counted.
func (r *runner) hedge(i int) {
	wk := &r.workers[i]
	if wk.attempts != 1 || len(wk.inflight) != 1 || len(wk.avoid) >= r.listed() || !r.hedger.Hedge(Epoch.Add(r.now)) {
		return
	}
	if a, ok := r.pick(i); ok {
		r.hedges++
		r.launch(i, a)
	}
}

// giveUp is the client's timeout: every attempt in flight is canceled (the
// policy decides what a cancel says of its route) and the request fails.
func (r *runner) giveUp(i int) bool {
	wk := &r.workers[i]
	for len(wk.inflight) > 0 {
		slot := wk.inflight[0]
		r.end(slot, Result{Class: engine.Canceled, Latency: r.now - r.attempts[slot].start})
	}
	return r.fail(i)
}

// fail ends the worker's request without an answer: the client tries
// again while it has tries and time left, else the task fails.
func (r *runner) fail(i int) bool {
	wk := &r.workers[i]
	wk.live = false
	if wk.tries < r.load.ClientAttempts && r.now < wk.started+r.load.TaskDeadline {
		if wk.session != "" {
			r.newSession(i) // a crawler whose session failed rotates it
			wk.left--
			wk.session = wk.sessionID(i)
		}
		return r.request(i)
	}
	r.endTask(i, false)
	return true
}

func (r *runner) endTask(i int, ok bool) {
	wk := &r.workers[i]
	wk.live = false
	b := r.bucketAt(r.now)
	b.finished++
	if ok {
		r.completed++
		b.completed++
		r.latencies = append(r.latencies, r.now-wk.started)
	} else {
		r.failed++
	}
	r.queue.push(event{at: r.now + r.load.Think, worker: i, kind: evStart})
}

func (r *runner) bucketAt(t time.Duration) *bucket {
	n := int(t / seriesBucket)
	for len(r.series) <= n {
		r.series = append(r.series, bucket{})
	}
	return &r.series[n]
}

func (r *runner) summary() Summary {
	end := r.now
	if r.load.Duration > 0 {
		end = r.load.Duration
	}
	s := Summary{
		Tasks: r.completed + r.failed, Completed: r.completed, Attempts: r.sent, Hedges: r.hedges,
		WastedAttempts: r.wasted, IncidentAttempts: r.incident, SimulatedSeconds: end.Seconds(), DetectMs: -1, RecoverMs: -1,
		FalseContentInvalid: r.falseInvalid, DecoysPassed: r.decoysPassed,
	}
	if s.Tasks > 0 {
		s.CompletionRate = float64(r.completed) / float64(s.Tasks)
	}
	if r.completed > 0 {
		s.AttemptsPerCompleted = float64(r.sent) / float64(r.completed)
		s.CostPerCompleted = r.spend / float64(r.completed)
	}
	s.Spend = r.spend
	if end > 0 {
		s.Throughput = float64(r.completed) / end.Seconds()
	}
	slices.Sort(r.latencies)
	s.P50ms, s.P95ms, s.P99ms = percentileMs(r.latencies, 0.50), percentileMs(r.latencies, 0.95), percentileMs(r.latencies, 0.99)
	s.DetectMs, s.RecoverMs = faultTimes(r.faults, r.w.Routes())
	if ec, ok := r.p.(ejectionCounter); ok {
		s.FalseEjections = ec.FalseEjections()
	}
	if sc, ok := r.p.(sessionCounter); ok {
		s.SessionRestarts = sc.SessionRestarts()
	}
	// The events at the very end fall in a bucket of their own, of no
	// width: they belong to the last.
	series := r.series
	if n := len(series); n > 1 && time.Duration(n-1)*seriesBucket >= end {
		last, prev := series[n-1], &series[n-2]
		prev.finished += last.finished
		prev.completed += last.completed
		prev.attempts += last.attempts
		prev.bad += last.bad
		series = series[:n-1]
	}
	for i, b := range series {
		// The last bucket ends with the run, maybe before its full width.
		from := time.Duration(i) * seriesBucket
		pt := Point{At: min(from+seriesBucket, max(end, from))}
		if width := pt.At - from; width > 0 {
			pt.Throughput = float64(b.completed) / width.Seconds()
		}
		if b.finished > 0 {
			pt.Completion = float64(b.completed) / float64(b.finished)
		}
		if b.attempts > 0 {
			pt.BadShare = float64(b.bad) / float64(b.attempts)
		}
		s.Series = append(s.Series, pt)
	}
	return s
}

func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// parkedTasks is a min-heap of tasks by due time.
type parkedTasks struct{ minHeap[task, *task] }

func (t *task) before(u *task) bool { return t.due < u.due }

// next returns the earliest due time.
func (q *parkedTasks) next() (time.Duration, bool) {
	if len(q.items) == 0 {
		return 0, false
	}
	return q.items[0].due, true
}

// due pops the earliest task if it is due at now.
func (q *parkedTasks) due(now time.Duration) (task, bool) {
	if len(q.items) == 0 || q.items[0].due > now {
		return task{}, false
	}
	return q.pop(), true
}

type eventKind uint8

const (
	evStart    eventKind = iota // a worker takes its next task
	evAnswer                    // an attempt's answer arrives
	evDeadline                  // an attempt reaches its deadline without an answer
	evCap                       // an attempt reaches the attempt timeout without an answer
	evLook                      // a provisional attempt looks at its deadline again
	evHedge                     // a request's hedge delay has passed
	evGiveUp                    // the client gives up on its request
	evTick                      // the policy's timed work
	evProbe                     // a probe's result arrives
	evRefused                   // a refusal reaches a client that retries at once
	evHeld                      // a request held for a paced route asks again
	evReserved                  // a request's reserved token comes: it is sent
)

type event struct {
	at     time.Duration
	seq    uint64 // ties break in push order, for determinism
	worker int
	req    uint32 // the worker's request, for request events
	slot   int32  // the attempt, for attempt events; the probe, for evProbe
	gen    uint32 // the attempt slot's generation
	kind   eventKind
}

// eventQueue is a min-heap of events by time, then push order.
type eventQueue struct {
	minHeap[event, *event]
	seq uint64
}

func (a *event) before(b *event) bool { return a.at < b.at || (a.at == b.at && a.seq < b.seq) }

func (q *eventQueue) push(ev event) {
	ev.seq = q.seq
	q.seq++
	q.minHeap.push(ev)
}

// minHeap is a binary min-heap by *T's before. It is typed (not
// container/heap) so that a push does not allocate.
type minHeap[T any, P interface {
	*T
	before(*T) bool
}] struct{ items []T }

func (h *minHeap[T, P]) push(x T) {
	h.items = append(h.items, x)
	for i := len(h.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !P(&h.items[i]).before(&h.items[parent]) {
			break
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

// pop removes and returns the least item; the heap must not be empty.
func (h *minHeap[T, P]) pop() T {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < last && P(&h.items[l]).before(&h.items[small]) {
			small = l
		}
		if r < last && P(&h.items[r]).before(&h.items[small]) {
			small = r
		}
		if small == i {
			break
		}
		h.items[i], h.items[small] = h.items[small], h.items[i]
		i = small
	}
	return top
}

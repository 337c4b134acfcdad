package sim

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// EngineSettings are what an engine policy runs with: the engine's config,
// the gateway's budget of retries and hedges, and its attempt timeout.
type EngineSettings struct {
	Engine engine.Config
	Budget engine.BudgetConfig
	// AttemptTimeout caps each attempt, as the gateway's
	// retry.attempt_timeout: the engine's deadlines stay under it.
	AttemptTimeout time.Duration
	// Blind marks a picker that ignores health (round-robin, random): the
	// policy then gets none of the engine's deadlines, hedges or budget,
	// as the products it stands for, and its engine's ejections are not
	// counted against it.
	Blind bool
	// Only, when not AllTiers, gives the engine one cost tier of the
	// world's routes: the cheapest or the costliest, as a user who buys
	// only that tier.
	Only TierChoice
	// LearnedMaxWait is the gateway's pacing.learned_max_wait: how long a
	// request's first attempt waits for a route when every one is at the
	// rate its target taught (engine.PacedError) before the client is
	// refused (pacedHolder).
	LearnedMaxWait time.Duration
	// Learned, when not nil, is what an earlier run's engine learned of
	// the sites' limits, for this one to start from, as a gateway
	// restarted on pacing.learned_file does (engine.RestorePace).
	Learned *engine.SavedPace
}

// TierChoice says which of a world's cost tiers an engine policy uses.
type TierChoice int

// The tier choices.
const (
	AllTiers TierChoice = iota
	CheapestTier
	CostliestTier
)

// enginePolicy runs the real engine as the gateway does: Pick is Acquire
// with the attempt timeout, Report is Report (a client's cancel judged by
// Lease.Canceled), Tick is Sweep plus the probe jobs it issues, and retries
// and hedges are the gateway's rule table and engine.Budget.
type enginePolicy struct {
	e       *engine.Engine
	budget  *engine.Budget
	w       World
	start   time.Time
	timeout time.Duration
	hold    time.Duration // LearnedMaxWait
	blind   bool
	only    int // the one tier of routes the engine gets; -1: every tier
	routes  map[string]int
	targets map[string]int
	names   []string // target names by number
	limits  []int    // max_inflight by route
	joining []int    // routes yet to join, by join time

	leases []engine.Lease // tickets index this
	free   []uint64
	avoid  []string
	jobs   []engine.ProbeJob
	events *engine.Subscription
	buf    []engine.Event

	ticked          time.Time     // the last Tick's time: where the run is
	retryIn         time.Duration // after a Pick that offered nothing: when a route will be ready, if the engine knows
	falseEjections  int
	restarts        map[string]int // client session → restarts so far
	sessionRestarts int
}

var (
	_ Policy      = (*enginePolicy)(nil)
	_ retrier     = (*enginePolicy)(nil)
	_ hedger      = (*enginePolicy)(nil)
	_ retimer     = (*enginePolicy)(nil)
	_ pacedHolder = (*enginePolicy)(nil)
)

// NewEnginePolicy returns a policy driving an engine with s over w's
// routes, each with its max_inflight when w knows it.
func NewEnginePolicy(w World, s EngineSettings, start time.Time) (Policy, error) {
	e, err := engine.New(s.Engine, nil)
	if err != nil {
		return nil, err
	}
	p := &enginePolicy{
		e: e, budget: engine.NewBudget(s.Budget), w: w, start: start, timeout: s.AttemptTimeout, hold: s.LearnedMaxWait, blind: s.Blind,
		routes:   make(map[string]int, w.Routes()),
		targets:  make(map[string]int, w.Targets()),
		restarts: make(map[string]int),
	}
	p.only = onlyTier(w, s.Only)
	p.limits = make([]int, w.Routes())
	if gt, ok := w.(groundTruth); ok {
		for g := range gt.Groups() {
			first, count, limit := gt.Group(g)
			for r := first; r < first+count; r++ {
				p.limits[r] = limit
			}
		}
	}
	for i := range w.Routes() {
		p.routes[w.RouteID(i)] = i
		if joinsAt(w, i) > 0 || !p.uses(i) {
			continue
		}
		if err := p.add(start, i); err != nil {
			return nil, err
		}
	}
	if s.Learned != nil {
		e.RestorePace(start, *s.Learned)
	}
	p.joining = slices.DeleteFunc(joining(w), func(r int) bool { return !p.uses(r) })
	for j := range w.Targets() {
		p.names = append(p.names, w.TargetName(j))
		p.targets[w.TargetName(j)] = j
	}
	if !s.Blind {
		p.events = e.Subscribe(1<<14, engine.EventState)
	}
	return p, nil
}

// add adds route to the engine at now, as a reload adds a new line.
func (p *enginePolicy) add(now time.Time, route int) error {
	return p.e.AddRoute(now, engine.RouteSpec{ID: p.w.RouteID(route), MaxInflight: p.limits[route], Tier: tierOf(p.w, route)})
}

// uses reports whether the policy gives route to its engine.
func (p *enginePolicy) uses(route int) bool { return p.only < 0 || tierOf(p.w, route) == p.only }

// onlyTier is the tier c means in w, -1 for all of them.
func onlyTier(w World, c TierChoice) int {
	if c == AllTiers {
		return -1
	}
	lo, hi := engine.MaxTier, 0
	for r := range w.Routes() {
		lo, hi = min(lo, tierOf(w, r)), max(hi, tierOf(w, r))
	}
	if c == CheapestTier {
		return lo
	}
	return hi
}

// Pick implements Policy. A session whose route the engine no longer
// offers (ErrSessionRestartRequired) is restarted as the client would: a
// new engine session id for the same client session, counted.
func (p *enginePolicy) Pick(now time.Time, target int, session string, avoid []int) (Attempt, bool) {
	p.avoid = p.avoid[:0]
	for _, r := range avoid {
		p.avoid = append(p.avoid, p.w.RouteID(r))
	}
	// A request's first attempt may wait for a reserved token, as the
	// gateway's does (it has no other attempt to watch meanwhile).
	req := engine.Request{Target: p.names[target], Avoid: p.avoid, Timeout: p.timeout, MayWait: len(avoid) == 0}
	// A blind picker gets no sessions: the engine would restart them by
	// health, which would make the baseline see.
	if session != "" && !p.blind {
		req.Session = p.sessionID(session)
	}
	l, err := p.e.Acquire(now, req)
	if errors.Is(err, engine.ErrSessionRestartRequired) {
		p.restarts[session]++
		p.sessionRestarts++
		req.Session = p.sessionID(session)
		l, err = p.e.Acquire(now, req)
	}
	p.retryIn = 0
	if err != nil {
		if pe, ok := errors.AsType[*engine.PacedError](err); ok {
			p.retryIn = pe.RetryAfter
		}
		return Attempt{}, false
	}
	if p.blind {
		l.Deadline, l.HedgeAfter, l.Provisional = 0, 0, false // as products without deadlines or hedges
	}
	var ticket uint64
	if n := len(p.free); n > 0 {
		ticket = p.free[n-1]
		p.free = p.free[:n-1]
		p.leases[ticket] = l
	} else {
		ticket = uint64(len(p.leases))
		p.leases = append(p.leases, l)
	}
	return Attempt{Route: p.routes[l.Route], Ticket: ticket, Deadline: l.Deadline, HedgeAfter: l.HedgeAfter, Provisional: l.Provisional, Delay: l.Delay}, true
}

// Retime implements retimer: the engine's deadline for the attempt now.
func (p *enginePolicy) Retime(now time.Time, ticket uint64, timeout time.Duration) time.Duration {
	d, _ := p.e.Timing(now, p.leases[ticket], timeout)
	return d
}

// sessionID is the engine's id for a client session after its restarts.
func (p *enginePolicy) sessionID(session string) string {
	if n := p.restarts[session]; n > 0 {
		return session + "#" + strconv.Itoa(n)
	}
	return session
}

// RetryIn implements retryHinter.
func (p *enginePolicy) RetryIn() time.Duration { return p.retryIn }

// PacedHold implements pacedHolder: the engine knows when a route will be
// ready only when every one was paced.
func (p *enginePolicy) PacedHold() (wait, hold time.Duration) { return p.retryIn, p.hold }

// SessionRestarts implements sessionCounter.
func (p *enginePolicy) SessionRestarts() int { return p.sessionRestarts }

// Report implements Policy. A client's cancel is evidence when it came
// after the lease's deadline, as the gateway reports it.
func (p *enginePolicy) Report(now time.Time, ticket uint64, r Result) {
	l := p.leases[ticket]
	if r.Class == engine.Canceled {
		r.Class = l.Canceled(r.Latency, engine.ProxyTimeout)
	}
	p.e.Report(now, l, engine.Outcome{Class: r.Class, Latency: r.Latency, RetryAfter: r.RetryAfter})
	p.free = append(p.free, ticket)
}

// Request implements retrier.
func (p *enginePolicy) Request(now time.Time) { p.budget.Request(now) }

// Retry implements retrier: the engine's Retryable, then the pool-wide
// budget (blind baselines retry whatever the rule table allows, without a
// budget).
func (p *enginePolicy) Retry(now time.Time, target int, c engine.Class) bool {
	if p.blind {
		return p.e.Config().Rules.Rule(c).Retry
	}
	return p.e.Retryable(p.names[target], c) && p.budget.Retry(now)
}

// Hedge implements hedger.
func (p *enginePolicy) Hedge(now time.Time) bool { return p.budget.Hedge(now) }

// Tick implements Policy: the engine's Sweep, and its probe jobs answered
// by the world when their results arrive.
func (p *enginePolicy) Tick(now time.Time, probe Prober) {
	p.ticked = now
	for len(p.joining) > 0 && !now.Before(p.start.Add(joinsAt(p.w, p.joining[0]))) {
		if err := p.add(now, p.joining[0]); err != nil {
			panic(err) // the ids are unique and the engine open: a bug
		}
		p.joining = p.joining[1:]
	}
	p.e.Sweep(now)
	p.jobs = p.e.ProbeJobs(p.jobs[:0])
	for _, job := range p.jobs {
		// A blind baseline's check of an exit is a plain rotator's, a TCP
		// connect, not the gateway's tunnel: it keeps out the exits that
		// refuse connections, not the silent or 407 ones.
		target := NeutralTarget
		switch {
		case job.Target != "":
			target = p.targets[job.Target]
		case p.blind:
			target = tcpCheck
		}
		probe(p.routes[job.Route], target, func(at time.Time, r Result) {
			p.e.ReportProbe(at, job, engine.Outcome{Class: r.Class, Latency: r.Latency, RetryAfter: r.RetryAfter})
		})
	}
	p.countEjections()
}

// learned is what the engine learned of the sites' limits by the last
// Tick, as a gateway saves it to pacing.learned_file.
func (p *enginePolicy) learned() engine.SavedPace { return p.e.SavePace(p.ticked) }

// countEjections counts routes ejected while they were good on every
// target: the detector's false positives.
func (p *enginePolicy) countEjections() {
	if p.events == nil {
		return
	}
	p.buf = p.events.Poll(p.buf[:0])
	for _, ev := range p.buf {
		if ev.Target != "" || ev.To != engine.Ejected {
			continue
		}
		route, at := p.routes[ev.Route], ev.Time.Sub(p.start)
		good := !p.w.Bad(route, NeutralTarget, at)
		for t := 0; good && t < p.w.Targets(); t++ {
			good = !p.w.Bad(route, t, at)
		}
		if good {
			p.falseEjections++
		}
	}
}

// FalseEjections implements ejectionCounter.
func (p *enginePolicy) FalseEjections() int {
	p.countEjections()
	return p.falseEjections
}

// ejectionCounter is implemented by policies that eject routes.
type ejectionCounter interface{ FalseEjections() int }

// sessionCounter is implemented by policies with sticky sessions.
type sessionCounter interface{ SessionRestarts() int }

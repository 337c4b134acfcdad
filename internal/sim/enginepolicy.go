package sim

import (
	"errors"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// enginePolicy runs the real engine: Pick is Acquire, Report is Report, and
// Tick is Sweep plus the probe jobs it issues, answered by the world.
type enginePolicy struct {
	e       *engine.Engine
	w       World
	start   time.Time
	blind   bool // the picker ignores health: ejections do not count against it
	routes  map[string]int
	targets map[string]int
	names   []string // target names by number

	leases []engine.Lease // tickets index this
	free   []uint64
	avoid  []string
	jobs   []engine.ProbeJob
	events *engine.Subscription
	buf    []engine.Event

	retryIn         time.Duration // after a Pick that offered nothing: when a route will be ready, if the engine knows
	falseEjections  int
	restarts        map[string]int // client session → restarts so far
	sessionRestarts int
}

var _ Policy = (*enginePolicy)(nil)

// NewEnginePolicy returns a policy driving an engine with cfg over w's
// routes. blind marks a picker that ignores health (round-robin, random), so
// its engine's ejections are not counted as the policy's.
func NewEnginePolicy(w World, cfg engine.Config, start time.Time, blind bool) (Policy, error) {
	e, err := engine.New(cfg, nil)
	if err != nil {
		return nil, err
	}
	p := &enginePolicy{
		e: e, w: w, start: start, blind: blind,
		routes:   make(map[string]int, w.Routes()),
		targets:  make(map[string]int, w.Targets()),
		restarts: make(map[string]int),
	}
	for i := range w.Routes() {
		id := w.RouteID(i)
		if err := e.AddRoute(start, engine.RouteSpec{ID: id}); err != nil {
			return nil, err
		}
		p.routes[id] = i
	}
	for j := range w.Targets() {
		p.names = append(p.names, w.TargetName(j))
		p.targets[w.TargetName(j)] = j
	}
	if !blind {
		p.events = e.Subscribe(1<<14, engine.EventState)
	}
	return p, nil
}

// Pick implements Policy. A session whose route the engine no longer
// offers (ErrSessionRestartRequired) is restarted as the client would: a
// new engine session id for the same client session, counted.
func (p *enginePolicy) Pick(now time.Time, target int, session string, avoid []int) (int, uint64, bool) {
	p.avoid = p.avoid[:0]
	for _, r := range avoid {
		p.avoid = append(p.avoid, p.w.RouteID(r))
	}
	req := engine.Request{Target: p.names[target], Avoid: p.avoid}
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
		return 0, 0, false
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
	return p.routes[l.Route], ticket, true
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

// SessionRestarts implements sessionCounter.
func (p *enginePolicy) SessionRestarts() int { return p.sessionRestarts }

// Report implements Policy.
func (p *enginePolicy) Report(now time.Time, ticket uint64, r Result) {
	p.e.Report(now, p.leases[ticket], engine.Outcome{Class: r.Class, Latency: r.Latency, RetryAfter: r.RetryAfter})
	p.free = append(p.free, ticket)
}

// Tick implements Policy.
func (p *enginePolicy) Tick(now time.Time, probe func(route, target int) Result) {
	p.e.Sweep(now)
	p.jobs = p.e.ProbeJobs(p.jobs[:0])
	for _, job := range p.jobs {
		target := NeutralTarget
		if job.Target != "" {
			target = p.targets[job.Target]
		}
		r := probe(p.routes[job.Route], target)
		p.e.ReportProbe(now, job, engine.Outcome{Class: r.Class, Latency: r.Latency, RetryAfter: r.RetryAfter})
	}
	p.countEjections()
}

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

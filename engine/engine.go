package engine

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by Acquire and Report.
var (
	// ErrNoRoute: no route can carry the request: all are draining, ejected
	// by an operator or at max_inflight, or, in strict mode, none is
	// eligible.
	ErrNoRoute = errors.New("engine: no usable route")
	// ErrNoMatch: no route has the labels the request requires.
	ErrNoMatch = errors.New("engine: no route matches the required labels")
	// ErrPaced: the routes left for the target are at the rates they
	// learned from its 429s; ask again in a moment.
	ErrPaced = errors.New("engine: the target's routes are at the rates its 429s allow")
	// ErrBusy: every candidate is at its max_inflight.
	ErrBusy = errors.New("engine: all matching routes are at max_inflight")
	// ErrSessionRestartRequired: the session's route can no longer serve
	// this target; the caller must start a new session rather than have its
	// exit changed silently.
	ErrSessionRestartRequired = errors.New("engine: session_restart_required")
	// ErrUnknownLease: the lease was already reported or has expired.
	ErrUnknownLease = errors.New("engine: unknown or expired lease")
	// ErrUnknownRoute: no route has that id.
	ErrUnknownRoute = errors.New("engine: unknown route")
)

// maxDraws bounds rejection sampling per pick; with the panic threshold at
// its default, at least half the weight is acceptable, so 16 draws all fail
// with probability under 2^-16 before the fallback takes over.
const maxDraws = 16

// Engine picks routes for requests and learns from their outcomes. All
// methods are safe for concurrent use; none blocks on I/O. Time is always
// passed in.
type Engine struct {
	// immutable after New
	cfg   Config
	store Store
	rng   randSource

	routes table[route]
	byID   nameMap[int32] // route id → slot
	pool   *weightIndex

	labelMu sync.Mutex // serializes label index creation
	// labels is copy-on-write: readers never lock. An index stays when its
	// last route leaves it (UpdateRoute): it then has no members, which
	// candidates reads as no match, and a route may join it again later.
	labels atomic.Pointer[map[Label]*weightIndex]

	byName  nameMap[*target] // interned targets
	targets table[target]    // by number; 0 stands for global records

	removed atomic.Int32 // routes whose global record is cooling, half-open or ejected

	wakeups   wakeQueue
	probes    probeQueue
	events    eventBus
	slow      slowStarts
	nextEvict atomic.Int64 // Unix ns of the next idle-pair eviction pass

	// The pool's typical latency (float64 seconds, 0 until the first
	// sample), success probability (float64, 0 until the first veteran)
	// and time to an answer: what a route without evidence of its own is
	// assumed to take and give. Sweep keeps them (pool.go).
	typicalLatency atomic.Uint64
	typicalSuccess atomic.Uint64
	typicalTTFB    atomicLogNormal
	sweep          poolSweep

	share paceShare // learned pacing shared with other processes (pace_share.go)

	tierMu     sync.Mutex                // serializes countTier
	tierRoutes [MaxTier + 1]atomic.Int32 // routes per cost tier
	tiers      atomic.Int32              // highest tier with a route, plus one; 0 while the routes share one tier
}

type route struct {
	// immutable once published
	id   string
	slot int32

	// config is atomic, copy-on-write: selection loads it once per use
	// without a lock, and UpdateRoute replaces it whole, under wmu, so a
	// reader never sees labels of one version with the limit of another.
	config atomic.Pointer[routeConfig]

	// wmu serializes refreshes of this route's weights and the swaps of its
	// config, so a refresh never writes a weight into an index the route
	// has just left, nor one computed from the previous config.
	wmu sync.Mutex

	// added is the config AddRoute published, immutable. It lives in the
	// route itself so that, until an UpdateRoute, loading the config touches
	// the route's own cache lines rather than another heap object: with
	// 100k routes that miss is measurable on every Acquire and Report.
	added routeConfig
}

// routeConfig is what the operator configured for a route. Immutable once
// published: UpdateRoute builds a new one. Fields read on every pick come
// first.
type routeConfig struct {
	labels  Labels         // owned by the engine: the caller's slice is copied
	indexes []*weightIndex // the label indexes the route belongs to, one per distinct label
	limit   int32          // max_inflight as the LeaseStore takes it; 0 = unlimited
	tier    int8           // cost tier (tier.go); beside limit, in its word
	static  float64        // Weight / (1 + Cost), Weight 0 counting as 1

	// as given, so RouteSpec returns exactly what the caller configured
	maxInflight  int
	weight, cost float64
}

type target struct {
	// immutable once published
	name string
	n    int32

	excluded atomic.Int32 // pairs of this target excluded by evidence (excludes)
	// guard is allocated on the target's first incident-class failure: a
	// crawler touches millions of sites and most never fail.
	guard atomic.Pointer[incidentGuard]
	// pace is allocated on the target's first 429 (pace.go).
	pace atomic.Pointer[targetPace]
	// ttfb is the target's time to an answer across routes: for the
	// deadlines of routes without evidence of their own there, and its
	// hedge delay.
	ttfb atomicLogNormal
	// leases counts the target's leases until it gets pacing state
	// (pace.go's watchAfter).
	leases atomic.Int32
	// tier is allocated on the target's first pick in a pool of several
	// cost tiers (tier.go).
	tier atomic.Pointer[targetTier]
}

// RouteSpec describes a route to the engine.
type RouteSpec struct {
	ID          string  // stable identifier (no secrets: it appears in events)
	Labels      Labels  // for hard constraints
	MaxInflight int     // concurrent leases allowed; 0 = unlimited
	Weight      float64 // static weight multiplier; 0 = 1
	Cost        float64 // relative cost ≥ 0; weight is divided by 1 + Cost
	// Tier is the route's cost tier, 0 (the cheapest, the default) to
	// MaxTier: a target is served from the cheapest tier that works there
	// (tier.go).
	Tier int
}

// Request is what Acquire needs to pick a route.
type Request struct {
	Target  string   // the target key (e.g. registrable domain)
	Session string   // sticky session id; "" for none
	Labels  Labels   // hard constraints
	Avoid   []string // route ids not to use (tried already)
	// Strict refuses the least-bad fallback: when nothing is eligible,
	// Acquire fails with ErrNoRoute instead.
	Strict bool
	// Timeout is the longest the caller lets one attempt run; it caps the
	// lease's Deadline. 0: no deadline is computed.
	Timeout time.Duration
	// BindLater leaves a Session that is not bound yet unbound: the route
	// is picked as for a request without one (Avoid included) and the lease
	// says Unbound, and the caller binds the session with Bind once an
	// attempt through it succeeded. A session's first request may then try
	// other routes, as any request does, when its first exit fails, rather
	// than be bound to that exit for good. A bound session is served by its
	// route whatever BindLater says.
	BindLater bool
	// MayWait says the caller waits out a Lease.Delay before it sends
	// the attempt, having no other attempt to watch meanwhile: only then
	// may the lease reserve a paced route's next token (worthWaiting).
	MayWait bool
}

// Lease is a route granted to one attempt. Report it exactly once.
type Lease struct {
	ID       uint64
	Route    string
	Target   string
	Session  string
	Expires  time.Time
	Fallback bool // nothing was eligible: this is the least-bad route
	Panic    bool // too few routes were eligible: exclusions were lifted
	Incident bool // the target has an open incident
	// Deadline is how long this attempt may wait for an answer before the
	// silence is evidence (docs/design/005-cost.md): DeadlineFactor × the
	// route's 99th percentile time to an answer for this target, clamped
	// to [DeadlineFloor, Request.Timeout]; Request.Timeout when nothing is
	// known yet (Provisional), 0 when the request gave none.
	Deadline time.Duration
	// HedgeAfter is when an idempotent request still waiting on this
	// attempt is worth a second one on another route: the later of the
	// target's 95th percentile time to an answer across routes and this
	// route's own 99th there, so a hedge goes out for an attempt late by
	// what is known of both, not for every answer in the site's usual
	// tail. 0 while nothing is known of the target, or without a Timeout.
	HedgeAfter time.Duration
	// Provisional says nothing was known of answer times when the lease
	// was taken: a caller still waiting once the pool has answered asks
	// Timing again (after ProvisionalRecheck, then twice as long each time
	// nothing is known yet), so that the first wave of a cold start does
	// not wait the whole timeout on a silent exit.
	Provisional bool
	// Delay is how long the caller waits before it sends the attempt: the
	// lease reserved the next token of a route held to the rate its
	// target's 429s taught, which answers sooner after the wait than the
	// routes ready now would (worthWaiting). 0 for most leases.
	Delay time.Duration
	// Unbound says the lease's Session is not bound to a route yet
	// (Request.BindLater): Bind binds it, once the attempt succeeded.
	Unbound bool
	// Gens are the generations of the route's records when the lease was
	// taken, for a verdict on its attempt after its report (FeedbackAt).
	Gens Generations
}

// ProvisionalRecheck is how long an attempt on a Provisional lease waits
// before it first asks Timing again; each look that finds nothing known
// yet doubles the wait to the next.
const ProvisionalRecheck = 250 * time.Millisecond

// Generations are those of a route's global record and of its pair with
// a target, as a lease saw them (docs/design/001-generations.md).
type Generations struct {
	Route, Pair uint32
}

// Canceled is the class to report for this attempt when its caller gave
// up after elapsed: Canceled, no evidence, before the lease's deadline;
// after it, timeout, the class the caller would have reported had it cut
// the attempt at the deadline (proxy_timeout when nothing came back): a
// client whose own timeout is shorter than the gateway's must not hide a
// silent exit.
func (l Lease) Canceled(elapsed time.Duration, timeout Class) Class {
	if l.Deadline > 0 && elapsed >= l.Deadline {
		return timeout
	}
	return Canceled
}

// Outcome is the result of one attempt.
type Outcome struct {
	Class      Class
	Latency    time.Duration
	RetryAfter time.Duration
}

// New returns an engine with the given configuration, keeping its shared
// state in store (nil: a new MemoryStore). It fails only on an invalid
// Config.
func New(cfg Config, store Store) (*Engine, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if store == nil {
		store = NewMemoryStore()
	}
	e := &Engine{cfg: cfg, store: store, pool: newWeightIndex()}
	e.rng = newRandSource(cfg.Seed)
	empty := map[Label]*weightIndex{}
	e.labels.Store(&empty)
	e.nextEvict.Store(math.MinInt64)
	e.wakeups.next.Store(math.MaxInt64)
	if n, ok := store.(Notifier); ok {
		n.Listen(e.remoteChange)
	}
	e.initPaceShare(store)
	return e, nil
}

// Config returns the configuration in force, defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// AddRoute adds a route as a candidate. Route ids are unique.
func (e *Engine) AddRoute(now time.Time, spec RouteSpec) error {
	if err := checkSpec(spec); err != nil {
		return err
	}
	if _, dup := e.byID.load(spec.ID); dup {
		return errors.New("engine: duplicate route id " + spec.ID)
	}
	cfg := e.routeConfig(spec)
	slot := e.routes.add(func(slot int32, r *route) {
		r.id = spec.ID
		r.slot = slot
		r.added = cfg
		r.config.Store(&r.added)
	})
	r := e.routes.get(slot)
	e.countTier(-1, spec.Tier)
	e.store.AddRoute(slot, spec.ID)
	e.byID.loadOrStore(spec.ID, func() int32 { return slot })
	e.refresh(r, now.UnixNano())
	if h, _ := e.store.Read(Key{Route: slot}); h.State == Candidate && !e.cfg.UncheckedCandidates {
		// Checked before users' traffic: a neutral probe first.
		e.probes.push(ProbeJob{Route: r.id, Gen: h.Gen, Seq: h.ProbeOK, key: Key{Route: slot}})
	}
	return nil
}

// UpdateRoute changes the labels, max_inflight, weight, cost and tier of route
// spec.ID, keeping its health records, pairs, leases, sessions and state:
// a config reload must not forget what the engine learnt about an exit
// whose id did not change. The route leaves the label indexes of labels it
// lost and joins those of new ones; once UpdateRoute returns, no request
// constrained by a lost label gets it. Leases already granted run on even
// when the new max_inflight is below them; new ones wait until the route
// is under it. It fails with ErrUnknownRoute if there is no such route, and
// validates spec as AddRoute does.
func (e *Engine) UpdateRoute(now time.Time, spec RouteSpec) error {
	if err := checkSpec(spec); err != nil {
		return err
	}
	r := e.route(spec.ID)
	if r == nil {
		return ErrUnknownRoute
	}
	next := e.routeConfig(spec)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	old := r.config.Load()
	r.config.Store(&next)
	e.countTier(int(old.tier), spec.Tier)
	// The labels are swapped first, so a draw from an index being left
	// already fails its label check; then the route leaves the indexes for
	// good (weight 0, no longer a member, so a label nobody carries any more
	// means ErrNoMatch), and the refresh sets its weights everywhere it now
	// belongs.
	for _, x := range old.indexes {
		if !slices.Contains(next.indexes, x) {
			x.remove(r.slot)
		}
	}
	e.refreshLocked(r, now.UnixNano())
	return nil
}

// RouteSpec returns the spec route id was added or last updated with, so a
// config reload can tell whether it changed.
func (e *Engine) RouteSpec(id string) (RouteSpec, bool) {
	r := e.route(id)
	if r == nil {
		return RouteSpec{}, false
	}
	rc := r.config.Load()
	return RouteSpec{
		ID: r.id, Labels: slices.Clone(rc.labels),
		MaxInflight: rc.maxInflight, Weight: rc.weight, Cost: rc.cost, Tier: int(rc.tier),
	}, true
}

func checkSpec(spec RouteSpec) error {
	if spec.ID == "" {
		return errors.New("engine: route id is empty")
	}
	if spec.MaxInflight < 0 || spec.Weight < 0 || spec.Cost < 0 ||
		math.IsNaN(spec.Weight) || math.IsInf(spec.Weight, 0) || math.IsNaN(spec.Cost) || math.IsInf(spec.Cost, 0) {
		return errors.New("engine: route " + spec.ID + ": max_inflight, weight and cost must be finite and not negative")
	}
	if spec.Tier < 0 || spec.Tier > MaxTier {
		return errors.New("engine: route " + spec.ID + ": tier must be in [0, " + strconv.Itoa(MaxTier) + "]")
	}
	if _, ok := spec.Labels.Get(TierKey); ok {
		return errors.New("engine: route " + spec.ID + ": no label may be named " + TierKey + ": a route's cost tier is its Tier")
	}
	return nil
}

// routeConfig builds the config for a valid spec, creating the label
// indexes it needs.
func (e *Engine) routeConfig(spec RouteSpec) routeConfig {
	// The engine keeps its own copy: readers hold the labels without a lock,
	// so the caller must not be able to change them under them.
	labels := slices.Clone(spec.Labels)
	w := spec.Weight
	if w == 0 {
		w = 1
	}
	indexes := make([]*weightIndex, 0, len(labels)+min(spec.Tier, 1))
	for _, l := range labels {
		if x := e.labelIndex(l, true); !slices.Contains(indexes, x) {
			indexes = append(indexes, x)
		}
	}
	if spec.Tier > 0 {
		indexes = append(indexes, e.tierIndex(spec.Tier, true))
	}
	return routeConfig{
		labels:      labels,
		indexes:     indexes,
		limit:       int32(min(spec.MaxInflight, math.MaxInt32)),
		static:      w / (1 + spec.Cost),
		tier:        int8(spec.Tier),
		maxInflight: spec.MaxInflight,
		weight:      spec.Weight,
		cost:        spec.Cost,
	}
}

// labelIndex returns the index of routes labelled l, creating it if asked.
func (e *Engine) labelIndex(l Label, create bool) *weightIndex {
	if x := (*e.labels.Load())[l]; x != nil || !create {
		return x
	}
	e.labelMu.Lock()
	defer e.labelMu.Unlock()
	old := *e.labels.Load()
	if x := old[l]; x != nil {
		return x
	}
	next := make(map[Label]*weightIndex, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	x := newWeightIndex()
	next[l] = x
	e.labels.Store(&next)
	return x
}

// target interns a target name. Number 0 is reserved for global records.
func (e *Engine) target(name string) *target {
	t, _ := e.byName.loadOrStore(name, func() *target {
		if e.targets.len() == 0 {
			e.targets.add(func(int32, *target) {}) // number 0: global
		}
		n := e.targets.add(func(n int32, t *target) {
			t.name = name
			t.n = n
		})
		e.store.AddTarget(n, name)
		return e.targets.get(n)
	})
	return t
}

// Acquire picks a route for req and leases it. See the package
// documentation for the selection steps.
func (e *Engine) Acquire(now time.Time, req Request) (Lease, error) {
	ns := now.UnixNano()
	e.wakeDue(ns)
	t := e.target(req.Target)
	floor, err := req.Labels.MinTier()
	if err != nil {
		return Lease{}, err
	}
	if req.Session != "" {
		if slot, ok := e.store.Session(req.Session, ns); ok {
			return e.acquireSession(ns, t, slot, &req, floor)
		}
	}
	if floor > 0 && !e.hasTierFrom(floor) {
		return Lease{}, ErrNoMatch
	}
	level := e.tierLevel(t, ns)
	for range 3 { // a route can fill up between the pick and the lease
		var c Candidates
		var slot int32
		var ok bool
		if slot, ok, err = e.draw(&c, ns, t, &req, level, floor); err != nil {
			return Lease{}, err
		}
		delay := time.Duration(0)
		if ok && c.Paced && req.MayWait && e.worthWaiting(t, c.PacedSlot, c.PacedWait, slot, ns) {
			slot, delay = c.PacedSlot, c.PacedWait
		}
		if !ok {
			// Routes that are fine but at the rates their target allows are
			// worth a short wait; the least-bad fallback would send the
			// request to the exits that had no rate to keep because they
			// were excluded.
			if c.Paced {
				return Lease{}, &PacedError{RetryAfter: c.PacedWait}
			}
			if req.Strict {
				return Lease{}, ErrNoRoute
			}
			c.fallback()
			if slot, ok = c.best(); !ok {
				if c.Paced {
					return Lease{}, &PacedError{RetryAfter: c.PacedWait}
				}
				return Lease{}, ErrNoRoute
			}
		}
		r := e.routes.get(slot)
		l, leased := e.lease(ns, r, t, &req, c.Fallback)
		if leased {
			if level >= 0 {
				t.tier.Load().serving.Store(int32(r.config.Load().tier))
			}
			l.Panic, l.Delay = c.Panic, delay
			switch {
			case req.Session == "":
			case req.BindLater:
				l.Unbound = true
			default:
				e.bind(req.Session, slot, t, ns)
			}
			return l, nil
		}
		err = ErrBusy
	}
	return Lease{}, err
}

// draw prepares c for req and picks from it. In a pool of several cost
// tiers (level ≥ 0) it draws from the lowest tier in use for t first and
// climbs while a tier has nothing to give; then, as in a pool of one tier,
// from every route, with panic and the least-bad fallback left to the
// caller. A tier's pacing carries into the last draw's Paced, so a request
// every tier paces is told to wait. No draw takes a route under floor, the
// tier the request asks for.
func (e *Engine) draw(c *Candidates, ns int64, t *target, req *Request, level, floor int) (int32, bool, error) {
	var paced bool
	var wait time.Duration
	for tier := max(level, floor); level >= 0 && tier < int(e.tiers.Load()); tier++ {
		if e.tierRoutes[tier].Load() == 0 {
			continue
		}
		switch err := e.candidates(c, ns, t, req, tier, floor); err {
		case nil:
		case errTierExhausted, ErrNoRoute:
			continue
		default:
			return 0, false, err
		}
		if slot, ok := e.pick(c); ok {
			return slot, true, nil
		}
		if c.Paced && (!paced || c.PacedWait < wait) {
			paced, wait = true, c.PacedWait
		}
	}
	if err := e.candidates(c, ns, t, req, -1, floor); err != nil {
		return 0, false, err
	}
	slot, ok := e.pick(c)
	if paced && (!c.Paced || wait < c.PacedWait) {
		c.Paced, c.PacedWait = true, wait
	}
	return slot, ok, nil
}

// pick calls the configured Picker. The built-in pickers are called by
// their concrete types so the Candidates stay on the stack; a custom Picker
// is an interface call, which costs one allocation per pick.
func (e *Engine) pick(c *Candidates) (int32, bool) {
	switch p := e.cfg.Picker.(type) {
	case WeightedRandom:
		return p.Pick(c)
	case PowerOfTwo:
		return p.Pick(c)
	case *RoundRobin:
		return p.Pick(c)
	case Random:
		return p.Pick(c)
	}
	escaped := *c // only this copy escapes through the interface
	return e.cfg.Picker.Pick(&escaped)
}

func (e *Engine) acquireSession(ns int64, t *target, slot int32, req *Request, floor int) (Lease, error) {
	r := e.routes.get(slot)
	if r == nil {
		return Lease{}, ErrSessionRestartRequired
	}
	if rc := r.config.Load(); !rc.labels.Matches(req.Labels) || int(rc.tier) < floor || !e.usable(r, t) {
		return Lease{}, ErrSessionRestartRequired
	}
	if wait := e.paceWait(t, slot, ns); wait > 0 {
		return Lease{}, &PacedError{RetryAfter: wait} // the exit is fine, only not yet ready again
	}
	l, ok := e.lease(ns, r, t, req, false)
	if !ok {
		return Lease{}, ErrBusy
	}
	e.store.Bind(req.Session, slot, ns+int64(e.cfg.SessionTTL))
	return l, nil
}

// Bind binds the session of l, a lease taken with Request.BindLater whose
// attempt succeeded, to l's route. A session bound meanwhile (another of
// its first requests succeeded first, or l is not Unbound) keeps the route
// it has: a session's exit never changes silently. It fails with
// ErrUnknownRoute when l's route is no longer in the pool.
func (e *Engine) Bind(now time.Time, l Lease) error {
	if l.Session == "" || !l.Unbound {
		return nil
	}
	slot, ok := e.byID.load(l.Route)
	if !ok {
		return ErrUnknownRoute
	}
	ns := now.UnixNano()
	if _, bound := e.store.Session(l.Session, ns); bound {
		return nil
	}
	e.bind(l.Session, slot, e.target(l.Target), ns)
	return nil
}

// bind binds session to the route in slot, and creates the route's pair
// record for t, so that the session's route is judged there from its first
// request on.
func (e *Engine) bind(session string, slot int32, t *target, ns int64) {
	e.store.Bind(session, slot, ns+int64(e.cfg.SessionTTL))
	e.store.Update(&e.cfg, Key{Route: slot, Target: t.n}, Op{Kind: OpTouch, Create: true}, ns)
}

// usable reports whether r may carry traffic to t by its health alone.
func (e *Engine) usable(r *route, t *target) bool {
	h, _ := e.store.Read(Key{Route: r.slot})
	if !h.State.Usable() {
		return false
	}
	p, ok := e.store.Read(Key{Route: r.slot, Target: t.n})
	return !ok || p.State.Usable()
}

func (e *Engine) lease(ns int64, r *route, t *target, req *Request, fallback bool) (Lease, bool) {
	rec, ok := e.store.Lease(LeaseRecord{Route: r.slot, Target: t.n, Taken: ns, Expires: ns + int64(e.cfg.LeaseTTL)}, r.config.Load().limit)
	if !ok {
		return Lease{}, false
	}
	e.refresh(r, ns)
	if t.pace.Load() == nil && t.leases.Add(1) >= watchAfter {
		e.watch(t)
	}
	e.takePace(t, r.slot, ns)
	_, incident := e.store.Incident(t.n)
	l := Lease{
		ID: rec.ID, Route: r.id, Target: t.name, Session: req.Session,
		Expires: time.Unix(0, rec.Expires), Fallback: fallback, Incident: incident,
		Gens: Generations{Route: rec.RouteGen, Pair: rec.PairGen},
	}
	l.Deadline, l.HedgeAfter, l.Provisional = e.timing(r, t, req.Timeout, ns)
	return l, true
}

// Timing returns l's deadline and hedge delay (see Lease) from what is
// known at now, for a Provisional lease; a lease of a route or target the
// engine no longer knows keeps its own.
func (e *Engine) Timing(now time.Time, l Lease, timeout time.Duration) (deadline, hedgeAfter time.Duration) {
	slot, ok := e.byID.load(l.Route)
	t, known := e.byName.load(l.Target)
	if !ok || !known {
		return l.Deadline, l.HedgeAfter
	}
	deadline, hedgeAfter, _ = e.timing(e.routes.get(slot), t, timeout, now.UnixNano())
	return deadline, hedgeAfter
}

// timing is an attempt's deadline through r to t and its hedge delay (see
// Lease). The route's time to an answer at t is its pair's when the pair
// has one; else, when the route has answered elsewhere, the slower of its
// own and the target's across routes; else what a typical route takes,
// or the target's median if that is slower. Not the target's tail: that
// mixes the slow exits' answers in, and a silent exit given their time
// outlasts the clients' patience, so its silence is never evidence.
//
// The hedge delay is the target's 95th percentile across routes, or the
// route's own time if that is later and its record took a latency sample
// within LatencyDecay at ns: a route known now to be slower than the site
// is hedged at its own tail, not on every request it is picked for (the
// faster ones full, say). A route not sampled for that long was picked on
// an estimate aged toward the pool's (Evidence.latencyEstimate), to see
// whether it got faster; if it did not, the hedge gives its request to
// another route at the site's pace rather than at the route's old one.
func (e *Engine) timing(r *route, t *target, timeout time.Duration, ns int64) (deadline, hedge time.Duration, provisional bool) {
	if timeout <= 0 {
		return 0, 0, false
	}
	site := t.ttfb.load()
	var own time.Duration
	// sampled is when own last took a sample; the pool's typical time,
	// which times a route without evidence of its own, is current.
	sampled := ns
	if p, ok := e.store.Read(Key{Route: r.slot, Target: t.n}); ok && p.TTFB.Known() {
		own, sampled = p.TTFB.Quantile(zP99), p.LatencyAt
	} else if g, _ := e.store.Read(Key{Route: r.slot}); g.TTFB.Known() {
		own, sampled = max(g.TTFB.Quantile(zP99), site.Quantile(zP99)), g.LatencyAt
	} else {
		own = max(e.typicalTTFB.load().Quantile(zP99), site.Quantile(0))
	}
	if own == 0 {
		return timeout, 0, true
	}
	deadline = min(max(time.Duration(e.cfg.DeadlineFactor*float64(own)), e.cfg.DeadlineFloor), timeout)
	if site.Known() {
		hedge = site.Quantile(zP95)
		if ns-sampled <= int64(e.cfg.LatencyDecay) {
			hedge = max(hedge, own)
		}
	}
	return deadline, hedge, false
}

// Retryable reports whether an attempt at target that failed with c is
// worth another route: the rule table says so, and the target has no open
// incident of that class — the site is failing everyone alike, and another
// exit would only fail the same way.
func (e *Engine) Retryable(target string, c Class) bool {
	if !e.cfg.Rules.Rule(c).Retry {
		return false
	}
	if t, ok := e.byName.load(target); ok {
		if open, ok := e.store.Incident(t.n); ok && open == c {
			return false
		}
	}
	return true
}

// Report records the outcome of a leased attempt and frees its slot.
func (e *Engine) Report(now time.Time, l Lease, o Outcome) error {
	rec, ok := e.store.Release(l.ID)
	if !ok {
		return ErrUnknownLease
	}
	ns := now.UnixNano()
	e.wakeDue(ns)
	r, t := e.routes.get(rec.Route), e.targets.get(rec.Target)
	e.observe(ns, r, t, Observation{Class: o.Class, Latency: o.Latency, RetryAfter: o.RetryAfter}, &rec)
	e.refresh(r, ns)
	return nil
}

// Feedback records a late verdict on an attempt already reported, such as
// a page that parsed as garbage (content_invalid). It is evidence without
// a lease, so it is never discarded as stale.
func (e *Engine) Feedback(now time.Time, routeID, targetName string, o Outcome) error {
	r := e.route(routeID)
	if r == nil {
		return ErrUnknownRoute
	}
	ns := now.UnixNano()
	e.observe(ns, r, e.target(targetName), Observation{Class: o.Class, Latency: o.Latency, RetryAfter: o.RetryAfter}, nil)
	e.refresh(r, ns)
	return nil
}

// FeedbackAt is Feedback on an attempt of a lease already reported, whose
// generations were gens (Lease.Gens): as for a late Report, a record that
// has moved on since takes the verdict as evidence but moves no state
// (docs/design/001-generations.md), so that a verdict on a page fetched
// before a cooldown does not push it out again.
func (e *Engine) FeedbackAt(now time.Time, routeID, targetName string, gens Generations, o Outcome) error {
	r := e.route(routeID)
	if r == nil {
		return ErrUnknownRoute
	}
	ns := now.UnixNano()
	t := e.target(targetName)
	rec := LeaseRecord{Route: r.slot, Target: t.n, RouteGen: gens.Route, PairGen: gens.Pair, Taken: ns}
	e.observe(ns, r, t, Observation{Class: o.Class, Latency: o.Latency, RetryAfter: o.RetryAfter}, &rec)
	e.refresh(r, ns)
	return nil
}

func (e *Engine) route(id string) *route {
	slot, ok := e.byID.load(id)
	if !ok {
		return nil
	}
	return e.routes.get(slot)
}

// observe applies one users'-traffic outcome. rec, when not nil, is the
// lease it came from: its generations decide staleness.
func (e *Engine) observe(ns int64, r *route, t *target, o Observation, rec *LeaseRecord) {
	if o.Class == ProxyTimeout && rec != nil {
		// Silence through an exit that answered other requests since this
		// one left is not the exit's: it is alive, the target is not
		// answering through it.
		if g, _ := e.store.Read(Key{Route: r.slot}); g.LastSuccess > rec.Taken {
			o.Class = TargetTimeout
		}
	}
	rule := e.cfg.Rules.Rule(o.Class)
	e.publishOutcome(ns, r, t, o, rec)
	taken := ns // when the attempt left, for pacing: now for one without a lease
	if rec != nil {
		taken = rec.Taken
	}
	if tt := t.tier.Load(); tt != nil {
		e.observeTier(ns, t, tt, int(r.config.Load().tier), o.Class, rule)
	}
	switch o.Class {
	case RateLimited:
		e.learnRate(t, r.slot, ns, taken, o.RetryAfter)
	case Blocked, ContentInvalid:
		e.learnTolerance(t, r.slot, ns, taken)
	case OK:
		e.served(t, r.slot, ns)
		if rec != nil {
			t.ttfb.observe(o.Latency.Seconds())
		}
		// Loaded first: a compare-and-swap takes the cache line for
		// writing even when it fails, and every refresh reads the line.
		if o.Latency > 0 && e.typicalLatency.Load() == 0 && e.typicalLatency.CompareAndSwap(0, math.Float64bits(o.Latency.Seconds())) {
			// The first latency the pool has seen: the routes without
			// evidence were weighed as if they took the unit and must be
			// weighed again at the typical, once in the engine's life.
			for slot := range e.routes.len() {
				e.refresh(e.routes.get(slot), ns)
			}
		}
	}
	if o.Class == Canceled {
		if rec != nil && o.Latency > 0 {
			e.boundLatency(ns, r, t, o)
		}
		return
	}
	frozen := e.guardObserve(ns, r, t, o.Class, rule)
	global := Op{Kind: OpObserve, Obs: o}
	pair := global
	if rec != nil {
		global.Gen, global.CheckGen = rec.RouteGen, true
		pair.Gen, pair.CheckGen = rec.PairGen, true
	}
	if (o.Class == OK || rule.Scope&ScopeRoute != 0) && !frozen {
		if o.Class != OK {
			global.Obs.Capped = e.capped()
		}
		global.Obs.Jitter = e.jitter()
		ch, _ := e.store.Update(&e.cfg, Key{Route: r.slot}, global, ns)
		e.handle(ns, r, nil, ch, o.Class)
	}
	if rule.Scope&ScopeTarget != 0 && !frozen {
		pair.Create = o.Class != OK // pairs are born of negative evidence
		pair.Obs.Jitter = e.jitter()
		if ch, ok := e.store.Update(&e.cfg, Key{Route: r.slot, Target: t.n}, pair, ns); ok {
			e.handle(ns, r, t, ch, o.Class)
		}
	}
}

// boundLatency records a canceled attempt's elapsed time as a lower bound
// on its route's latency, and its pair's when there is one. Health.observe
// only ever raises an estimate with it; most cancels are shorter than the
// estimate and write nothing.
func (e *Engine) boundLatency(ns int64, r *route, t *target, o Observation) {
	for _, k := range []Key{{Route: r.slot}, {Route: r.slot, Target: t.n}} {
		if h, ok := e.store.Read(k); ok && o.Latency.Seconds() > h.Latency {
			if ch, ok := e.store.Update(&e.cfg, k, Op{Kind: OpObserve, Obs: o}, ns); ok {
				if k.Global() {
					e.handle(ns, r, nil, ch, o.Class)
				} else {
					e.handle(ns, r, t, ch, o.Class)
				}
			}
		}
	}
}

// capped reports whether one more removal would exceed MaxRemovedShare.
// One route may always be removed, as Envoy ejects one host whatever its
// max_ejection_percent: in a pool of three, one dead exit must go.
func (e *Engine) capped() bool {
	if e.cfg.MaxRemovedShare < 0 {
		return false
	}
	return float64(e.removed.Load()+1) > max(1, e.cfg.MaxRemovedShare*float64(e.routes.len()))
}

func (e *Engine) jitter() float64 { return unitFloat(e.rng.Uint64()) }

// handle reacts to a change this process made to r's global record (t ==
// nil) or to its pair with t: it follows the change as it would another
// process's, then takes the decisions that fall to the process that made it
// (the probe job, the cross-target check), so each is taken once however
// many processes share the store.
func (e *Engine) handle(ns int64, r *route, t *target, ch Change, cause Class) {
	e.follow(ns, r, t, ch, cause)
	if ch.Probe {
		e.probes.push(ProbeJob{Route: r.id, Target: targetName(t), Gen: ch.Gen, Seq: ch.ProbeSeq, key: recordKey(r, t)})
	}
	if t != nil && ch.From == HalfOpen && ch.To == Cooling {
		e.checkCrossTarget(ns, r, cause)
	}
}

// follow brings this process's view in step with a change to a record,
// whichever process made it: events, pool and target counters, slow start,
// weights, the wake-up queue and the incident guard's coolings.
func (e *Engine) follow(ns int64, r *route, t *target, ch Change, cause Class) {
	if math.Abs(ch.NewScore-ch.OldScore) >= e.cfg.ScoreEventStep {
		e.publishScore(ns, r, t, ch, cause)
	}
	if !ch.Changed() {
		return
	}
	e.publishState(ns, r, t, ch, cause)
	if t != nil {
		t.excluded.Add(excludes(ch.To, ch.Cause) - excludes(ch.From, ch.OldCause))
		if tt := t.tier.Load(); tt != nil && ch.From == HalfOpen && ch.To.Usable() {
			e.tierRecovered(ns, r, t, tt)
		}
	} else {
		if removed(ch.From) != removed(ch.To) {
			if removed(ch.To) {
				e.removed.Add(1)
			} else {
				e.removed.Add(-1)
			}
		}
		if ch.SlowStart {
			e.slow.add(r.slot)
		}
		e.refresh(r, ns)
	}
	if ch.Until != 0 && ch.Until != math.MaxInt64 {
		e.wakeups.push(wakeup{at: ch.Until, key: recordKey(r, t), gen: ch.Gen})
	}
	if t != nil && ch.To == Cooling && e.cfg.Rules.Rule(ch.Cause).Incident {
		if g := t.guard.Load(); g != nil {
			g.noteCooling(r.slot, ch.Cause, ns)
		}
	}
}

// recordKey is the key of r's global record (t == nil) or of its pair with t.
func recordKey(r *route, t *target) Key {
	if t == nil {
		return Key{Route: r.slot}
	}
	return Key{Route: r.slot, Target: t.n}
}

func removed(s State) bool { return s == Cooling || s == HalfOpen || s == Ejected }

// excludes is 1 when a pair in state s for cause c counts against its
// target's share of usable routes (the target panic threshold), 0 if not.
// Panic is there to doubt the gateway's own verdicts (a timeout read as
// the exit's, a page the detector took for a captcha), not the site's: a
// pair waiting out a 429's Retry-After is the site's pacing, and one
// cooling for the site's refusal (blocked: a 403 or 451) is the site's
// word on the exit. A site that rate-limits every exit, or refuses most of
// them, must not put its target in panic and send its traffic back to the
// exits it refused (the simulator's most-banned, 80% of the exits refused
// at one site: 0.982 → 0.999 of the oracle's throughput, 828 → 55 wasted
// attempts); one that refuses every exit is down, an incident.
func excludes(s State, c Class) int32 {
	if s.Usable() || s == Cooling && (c == RateLimited || c == Blocked) {
		return 0
	}
	return 1
}

func targetName(t *target) string {
	if t == nil {
		return ""
	}
	return t.name
}

// checkCrossTarget ejects r when its pairs failed recovery on EjectTargets
// distinct targets and the route itself shows failure (a route-scope
// failure since its last success, or a failed neutral probe): the exit, not
// the sites, is the problem. Removal is scoped first (docs/design/006-model.md):
// an exit that several sites ban but that works keeps serving the rest, its
// pairs cooled. Runs only when a pair probe fails, so scanning r's pairs is
// off the hot path.
func (e *Engine) checkCrossTarget(ns int64, r *route, cause Class) {
	if g, _ := e.store.Read(Key{Route: r.slot}); g.ConsecFail == 0 && g.FailedRecoveries == 0 {
		return
	}
	failing := 0
	e.store.Pairs(r.slot, func(_ int32, h Health) {
		if h.FailedRecoveries > 0 && !h.State.Usable() {
			failing++
		}
	})
	if failing < e.cfg.EjectTargets {
		return
	}
	ch, _ := e.store.Update(&e.cfg, Key{Route: r.slot}, Op{Kind: OpEvidenceEject}, ns)
	e.handle(ns, r, nil, ch, cause)
}

// refresh recomputes r's selection weights from its global record and
// in-flight count.
func (e *Engine) refresh(r *route, ns int64) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	e.refreshLocked(r, ns)
}

// refreshLocked is refresh; the caller must hold r.wmu. The config is read
// under wmu so the weights go to the indexes the route belongs to now.
//
// A route's weight is its speed, cost^-Sharpness, times its static weight
// and slow-start ramp (docs/design/005-cost.md).
func (e *Engine) refreshLocked(r *route, ns int64) {
	rc := r.config.Load()
	h, _ := e.store.Read(Key{Route: r.slot})
	inflight := e.store.Inflight(r.slot)
	full := rc.limit > 0 && inflight >= rc.limit
	cost := e.cost(&h, inflight, ns)
	base := rc.static * h.slowStart(&e.cfg, ns) * pow(cost, -e.cfg.Sharpness)
	w, all := base, max(base, minWeight)
	// Half-open routes are the probe queue's, ejected ones proven dead:
	// panic and fallback spread load over the others (index.go, withheld).
	held := h.State == HalfOpen || h.State == Ejected && h.Until != math.MaxInt64
	switch {
	case full || h.State == Draining || (h.State == Ejected && h.Until == math.MaxInt64), held:
		w, all = 0, 0
	case !h.State.Usable(), h.State == Candidate && !e.cfg.UncheckedCandidates:
		w = 0
	case h.State == Suspect:
		w *= e.cfg.SuspectWeight
	}
	var marks [numMarks]bool
	marks[pending], marks[withheld] = h.State == Candidate && !e.cfg.UncheckedCandidates, held
	e.pool.update(r.slot, w, all, marks)
	for _, x := range rc.indexes {
		x.update(r.slot, w, all, marks)
	}
}

// minWeight keeps every route that may carry traffic in a panic or fallback
// drawable, however bad its score.
const minWeight = 1e-9

package engine

import (
	"errors"
	"math"
	"slices"
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
	static  float64        // Weight / (1 + Cost), Weight 0 counting as 1

	// as given, so RouteSpec returns exactly what the caller configured
	maxInflight  int
	weight, cost float64
}

type target struct {
	// immutable once published
	name string
	n    int32

	excluded atomic.Int32 // pairs of this target cooling or half-open
	// guard is allocated on the target's first incident-class failure: a
	// crawler touches millions of sites and most never fail.
	guard atomic.Pointer[incidentGuard]
	// pace is allocated on the target's first 429 (pace.go).
	pace atomic.Pointer[targetPace]
}

// RouteSpec describes a route to the engine.
type RouteSpec struct {
	ID          string  // stable identifier (no secrets: it appears in events)
	Labels      Labels  // for hard constraints
	MaxInflight int     // concurrent leases allowed; 0 = unlimited
	Weight      float64 // static weight multiplier; 0 = 1
	Cost        float64 // relative cost ≥ 0; weight is divided by 1 + Cost
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
	e.store.AddRoute(slot, spec.ID)
	e.byID.loadOrStore(spec.ID, func() int32 { return slot })
	e.refresh(r, now.UnixNano())
	return nil
}

// UpdateRoute changes the labels, max_inflight, weight and cost of route
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
		MaxInflight: rc.maxInflight, Weight: rc.weight, Cost: rc.cost,
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
	indexes := make([]*weightIndex, 0, len(labels))
	for _, l := range labels {
		if x := e.labelIndex(l, true); !slices.Contains(indexes, x) {
			indexes = append(indexes, x)
		}
	}
	return routeConfig{
		labels:      labels,
		indexes:     indexes,
		limit:       int32(min(spec.MaxInflight, math.MaxInt32)),
		static:      w / (1 + spec.Cost),
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
	if req.Session != "" {
		if slot, ok := e.store.Session(req.Session, ns); ok {
			return e.acquireSession(ns, t, slot, &req)
		}
	}
	var err error
	for range 3 { // a route can fill up between the pick and the lease
		var c Candidates
		if err = e.candidates(&c, ns, t, &req); err != nil {
			return Lease{}, err
		}
		slot, ok := e.pick(&c)
		if !ok {
			if req.Strict {
				if c.Paced {
					return Lease{}, &PacedError{RetryAfter: c.PacedWait}
				}
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
		l, leased := e.lease(ns, e.routes.get(slot), t, &req, c.Fallback)
		if leased {
			l.Panic = c.Panic
			if req.Session != "" {
				e.store.Bind(req.Session, slot, ns+int64(e.cfg.SessionTTL))
				e.store.Update(&e.cfg, Key{Route: slot, Target: t.n}, Op{Kind: OpTouch, Create: true}, ns)
			}
			return l, nil
		}
		err = ErrBusy
	}
	return Lease{}, err
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

func (e *Engine) acquireSession(ns int64, t *target, slot int32, req *Request) (Lease, error) {
	r := e.routes.get(slot)
	if r == nil || !r.config.Load().labels.Matches(req.Labels) || !e.usable(r, t) {
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
	e.takePace(t, r.slot, ns)
	_, incident := e.store.Incident(t.n)
	return Lease{
		ID: rec.ID, Route: r.id, Target: t.name, Session: req.Session,
		Expires: time.Unix(0, rec.Expires), Fallback: fallback, Incident: incident,
	}, true
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
	rule := e.cfg.Rules.Rule(o.Class)
	e.publishOutcome(ns, r, t, o, rec)
	if o.Class == RateLimited {
		e.learnPace(t, r.slot, ns)
	}
	frozen := e.guardObserve(ns, r, t, o.Class, rule)
	global := Op{Kind: OpObserve, Obs: o}
	pair := global
	if rec != nil {
		global.Gen, global.CheckGen = rec.RouteGen, true
		pair.Gen, pair.CheckGen = rec.PairGen, true
	}
	if o.Class == OK || rule.Scope&ScopeRoute != 0 {
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

// capped reports whether one more removal would exceed MaxRemovedShare.
func (e *Engine) capped() bool {
	if e.cfg.MaxRemovedShare < 0 {
		return false
	}
	return float64(e.removed.Load()+1) > e.cfg.MaxRemovedShare*float64(e.routes.len())
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
		if ch.From.Usable() != ch.To.Usable() {
			if ch.To.Usable() {
				t.excluded.Add(-1)
			} else {
				t.excluded.Add(1)
			}
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

func targetName(t *target) string {
	if t == nil {
		return ""
	}
	return t.name
}

// checkCrossTarget ejects r when its pairs failed recovery on EjectTargets
// distinct targets: the exit, not one site, is the problem. Runs only when a
// pair probe fails, so scanning r's pairs is off the hot path.
func (e *Engine) checkCrossTarget(ns int64, r *route, cause Class) {
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
func (e *Engine) refreshLocked(r *route, ns int64) {
	rc := r.config.Load()
	h, _ := e.store.Read(Key{Route: r.slot})
	inflight := e.store.Inflight(r.slot)
	full := rc.limit > 0 && inflight >= rc.limit
	base := math.Pow(h.Score(&e.cfg), e.cfg.Gamma) * rc.static * h.slowStart(&e.cfg, ns) / float64(1+inflight)
	w, all := base, max(base, minWeight)
	switch {
	case full || h.State == Draining || (h.State == Ejected && h.Until == math.MaxInt64):
		w, all = 0, 0
	case !h.State.Usable():
		w = 0
	case h.State == Suspect:
		w *= e.cfg.SuspectWeight
	}
	e.pool.set(r.slot, w, all)
	for _, x := range rc.indexes {
		x.set(r.slot, w, all)
	}
}

// minWeight keeps every route that may carry traffic in a panic or fallback
// drawable, however bad its score.
const minWeight = 1e-9

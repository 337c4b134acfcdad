package engine

// The state store port (design note 002). The engine keeps its selection
// index, probe queue and event stream locally; everything that several
// gateway processes must agree on — health records, leases, sessions and
// incident flags — goes through these interfaces. Each call is atomic on its
// own; a shared implementation (Redis) applies the same pure transition,
// Health.Apply, inside its own atomic step, so both stores follow one rule
// book.

// Key names a health record: a route's global record (Target == 0) or a
// route×target pair. Route is the route's slot, Target the target's number;
// both are numbered by the engine and announced with AddRoute/AddTarget so a
// shared store can key by the stable names instead.
type Key struct {
	Route  int32
	Target int32
}

// Global reports whether k names a route's global record.
func (k Key) Global() bool { return k.Target == 0 }

// OpKind is the transition an Op asks for.
type OpKind uint8

// The transitions a store applies.
const (
	OpObserve       OpKind = iota + 1 // record an outcome (Op.Obs)
	OpWake                            // expired cooldown or ejection → half-open (Gen checked)
	OpDrain                           // operator: no new work
	OpEject                           // operator: out until restored
	OpRestore                         // operator: back to healthy (slow start)
	OpEvidenceEject                   // failed recoveries across targets eject the route
	OpLift                            // an incident of class Obs.Class opened: undo the cooling it caused
	OpTouch                           // nothing but creating the record (with Create): a session's pair
)

// Op is one atomic transition of a health record.
type Op struct {
	Kind OpKind
	Obs  Observation // OpObserve
	// Gen is the generation the caller saw (a lease's or a probe job's);
	// with CheckGen set, if the record has moved on since, the observation
	// is applied as Stale.
	Gen      uint32
	CheckGen bool
	// ProbeSeq, for a probe's outcome with CheckGen, is the probe's place
	// in its half-open period: a second report of the same probe job is
	// stale, so each job counts once.
	ProbeSeq uint8
	// Create makes a missing pair record (negative evidence, sessions).
	// Without it an op on a missing pair does nothing.
	Create bool
}

// HealthStore keeps health records.
type HealthStore interface {
	// AddRoute makes room for route slot's records.
	AddRoute(slot int32, id string)
	// AddTarget announces target number n.
	AddTarget(n int32, name string)
	// Update applies op to the record at k atomically. ok is false when k is
	// a missing pair and op.Create is not set.
	Update(c *Config, k Key, op Op, now int64) (ch Change, ok bool)
	// Read returns a copy of the record at k.
	Read(k Key) (Health, bool)
	// EvictPairs removes route's pair records untouched since before, calling
	// fn with each removed record.
	EvictPairs(route int32, before int64, fn func(target int32, h *Health))
	// Pairs calls fn with a copy of each of route's pair records.
	Pairs(route int32, fn func(target int32, h Health))
}

// LeaseRecord is what a store keeps of a lease.
type LeaseRecord struct {
	ID       uint64
	Route    int32
	Target   int32
	RouteGen uint32 // generation of the route's record when leased
	PairGen  uint32 // generation of the pair record (0 if none)
	Taken    int64  // Unix ns, the caller's clock: a shared store reaps other holders' leases that expired before it
	Expires  int64  // Unix ns
}

// LeaseStore counts in-flight work per route and remembers leases until
// they are released or expire.
type LeaseStore interface {
	// Lease records rec if its route has fewer than maxInflight leases
	// (maxInflight <= 0: unlimited). It fills in the id and the current
	// generations of the route's record and of its pair with rec.Target, so
	// the lease and its generations are taken in one atomic step.
	Lease(rec LeaseRecord, maxInflight int32) (LeaseRecord, bool)
	// Release forgets lease id; ok is false if it was released or reaped.
	Release(id uint64) (LeaseRecord, bool)
	// Inflight returns route's live leases.
	Inflight(route int32) int32
	// Expired removes the leases expired at now and appends them to dst.
	Expired(now int64, dst []LeaseRecord) []LeaseRecord
}

// SessionStore binds session ids to routes.
type SessionStore interface {
	// Session returns the route bound to id, if the binding is live at now:
	// SessionConflict when the store found it bound to two routes (by
	// processes cut off from each other), which the engine answers with
	// ErrSessionRestartRequired rather than pick one of them silently.
	Session(id string, now int64) (route int32, ok bool)
	// Bind binds id to route until the given time (Unix ns).
	Bind(id string, route int32, until int64)
	// ExpireSessions drops bindings expired at now.
	ExpireSessions(now int64)
}

// SessionConflict is the route SessionStore.Session gives a session bound
// to two routes: no route's slot.
const SessionConflict int32 = -1

// IncidentStore holds the open incident flag per target.
type IncidentStore interface {
	// Incident returns the class of target's open incident.
	Incident(target int32) (Class, bool)
	// SetIncident opens (open) or closes target's incident for class c and
	// reports whether this call changed the flag, so exactly one caller
	// announces each transition.
	SetIncident(target int32, c Class, open bool) bool
}

// Store is the engine's whole shared state.
//
// Which calls may block: a shared store (engine/redisstore) serves Read,
// Pairs, EvictPairs, Inflight, Expired, Incident, AddRoute and AddTarget
// from its local view, never waiting on I/O; Update, Lease, Release,
// SetIncident, Bind, ExpireSessions and a Session not in its view make a
// round trip to the shared state, bounded by its timeout (then served
// locally while it is out of reach). A lock that every request's outcome
// takes must not be held across the second kind: the incident guard
// decides under its own and sets the flag after letting it go
// (docs/design/002-store-port.md).
type Store interface {
	HealthStore
	LeaseStore
	SessionStore
	IncidentStore
}

// Notifier is implemented by a Store shared with other processes, so that
// the engine's weights, pool counters and wake-ups follow the records other
// processes change, as they follow the Changes its own Updates return. New
// calls Listen once, before any other method; a store serves one engine.
//
// The store calls fn with every change another process made to a record
// whose route and target (for a pair) this process announced, keyed by
// this process's numbers. old is the record as this process's view held it
// before, now the record after; old is the zero Health, known false, when
// the view held none (a pair first heard of, or a record already shared
// when this process announced its route or target). The store promises:
//   - Read already returns now, or a newer record, when fn is called.
//   - Every step of a record in this process's view reaches the engine
//     exactly once: as the Change an Update of this process returned, or as
//     one call of fn. A store whose compare-and-set finds that another
//     process wrote first reports the record it found through fn before
//     that Update returns (its Change starts from that record, so the
//     engine must have followed it); a notification no newer than the view
//     is dropped. The engine counts removed routes and excluded pairs from
//     these steps: one lost or repeated would leave a counter wrong for
//     good.
//   - A record that leaves the view other than through EvictPairs (it
//     expired in the shared store) is reported with now the zero Health,
//     which is how the engine reads a missing record.
//   - Calls for one key come one at a time, in the order of the changes;
//     calls for different keys may overlap.
//   - fn reads the store (Read, Inflight) but never calls Update, and
//     returns without waiting on I/O; the store must not hold, while calling
//     it, a lock those reads take. It may run inside Update and AddTarget,
//     which the engine never calls holding a lock fn takes.
type Notifier interface {
	Listen(fn func(k Key, old Health, known bool, now Health))
}

// PaceSharer is implemented by a Store shared with other processes, so
// that the pacing each learns from the sites holds for all of them (a site
// sees an exit's total, not each gateway's part of it): limits learned
// from 429s and bans, what each pair sent, and how many processes share
// the work (pace_share.go, docs/design/005-cost.md). New detects it; Sweep
// calls SharePace once a pass.
//
// out is what this process learned and sent since the last call; in is
// what the store heard from the others since then. The store promises:
//   - SharePace returns at once, never waiting on I/O: out is sent, and in
//     was received, by the store's own loop, so in may be one exchange
//     old.
//   - Limits (in.Pairs, in.Targets) are merged by Supersedes wherever they
//     meet, so every process ends with the same winner; a limit may come
//     back more than once, or lose to one the engine holds, which the
//     engine drops by the same rule.
//   - in.Others counts only the other processes' sends, per pair, bucket
//     and epoch, complete for each target in in.Shares; in.Shares counts
//     this process and the others alive that sent to the target within
//     the window.
//   - When it cannot reach the others, in.Alone is set: the engine paces
//     on its own counts with the whole of every limit, until counts and
//     shares come again.
type PaceSharer interface {
	SharePace(out PaceNews) (in PaceNews)
}

// Apply runs op on h: the one transition function every store uses.
func (h *Health) Apply(c *Config, k Key, op Op, now int64) Change {
	scope := ScopeTarget
	if k.Global() {
		scope = ScopeRoute
	}
	switch op.Kind {
	case OpObserve:
		o := op.Obs
		if op.CheckGen && (op.Gen != h.Gen || (o.Probe && op.ProbeSeq != h.ProbeOK)) {
			o.Stale = true
		}
		return h.observe(o, scope, c, now)
	case OpWake:
		if op.CheckGen && op.Gen != h.Gen {
			return h.end(h.begin(c, scope), c, scope)
		}
		return h.wake(c, scope, now)
	case OpDrain:
		return h.apply(actDrain, op.Obs.Class, c, scope, now)
	case OpEject:
		return h.apply(actEject, op.Obs.Class, c, scope, now)
	case OpRestore:
		return h.apply(actRestore, op.Obs.Class, c, scope, now)
	case OpLift:
		return h.apply(actLift, op.Obs.Class, c, scope, now)
	case OpEvidenceEject:
		return h.apply(actEvidenceEject, op.Obs.Class, c, scope, now)
	case OpTouch:
	}
	return h.end(h.begin(c, scope), c, scope)
}

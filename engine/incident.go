package engine

import "sync"

// incidentGuard watches one target for failures that are the site's, not
// the exits': many distinct routes failing it with the same class at once.
// Two half-window buckets make the window slide (as grpc-go's outlier
// detection call counter). It counts distinct routes, not attempts: a
// picker that concentrates load on a few routes banned by the site must not
// make their bans look like the site failing everyone. A target gets a
// guard on its first failure and loses it after a window without one, so
// guards exist only for the targets failing now.
type incidentGuard struct {
	// born is when the guard was created: it did not see the successes
	// before, so it judges only after half a window of evidence.
	born    int64
	mu      sync.Mutex
	bucket  int64          // guarded by mu: number of the current half-window
	buckets [2]guardBucket // guarded by mu
	cooled  []coolingAt    // guarded by mu: ring of recent pair coolings by incident classes
	next    int            // guarded by mu: next slot in cooled once it is full
}

// guardRoutes caps the distinct routes a bucket remembers: enough to tell
// "5 of 8 routes fail" from "18 of 60", in fixed memory. It also caps the
// coolings an incident can lift: those that happened before enough routes
// had failed to call it an incident.
const guardRoutes = 64

type coolingAt struct {
	slot  int32
	class Class
	at    int64
}

// guardBucket remembers the latest outcome of up to guardRoutes distinct
// routes in one half-window, in a small open-addressing table, with running
// counts so that recording an outcome costs O(1).
type guardBucket struct {
	slots  [2 * guardRoutes]int32 // route slot + 1; 0 marks an empty cell
	latest [2 * guardRoutes]Class
	n      int               // routes remembered
	ok     int               // of which the latest outcome is OK
	fails  [numClasses]int32 // of which the latest failed with each class
}

// find returns the cell of slot, or the empty cell where it would go.
func (b *guardBucket) find(slot int32) (int, bool) {
	const mask = 2*guardRoutes - 1
	i := int(uint32(slot)*0x9e3779b1>>25) & mask
	for b.slots[i] != 0 {
		if b.slots[i] == slot+1 {
			return i, true
		}
		i = (i + 1) & mask
	}
	return i, false
}

// record sets slot's latest outcome to c, if the route is remembered or
// there is room for it.
func (b *guardBucket) record(slot int32, c Class) {
	i, found := b.find(slot)
	switch {
	case found:
		b.count(b.latest[i], -1)
	case b.n < guardRoutes:
		b.slots[i] = slot + 1
		b.n++
	default:
		return
	}
	b.latest[i] = c
	b.count(c, 1)
}

func (b *guardBucket) count(c Class, d int) {
	if c == OK {
		b.ok += d
	} else {
		b.fails[c] += int32(d)
	}
}

// noteCooling remembers that route slot's pair cooled because of class c.
func (g *incidentGuard) noteCooling(slot int32, c Class, ns int64) {
	g.mu.Lock()
	k := coolingAt{slot: slot, class: c, at: ns}
	if len(g.cooled) < guardRoutes {
		g.cooled = append(g.cooled, k)
	} else {
		g.cooled[g.next] = k
		g.next = (g.next + 1) % guardRoutes
	}
	g.mu.Unlock()
}

func (g *incidentGuard) rotate(ns, width int64) {
	n := ns / width
	if n <= g.bucket {
		return
	}
	for b := g.bucket + 1; b <= n && b <= g.bucket+2; b++ {
		g.buckets[b&1] = guardBucket{}
	}
	g.bucket = n
}

// quiet reports whether neither half-window saw a failure.
func (g *incidentGuard) quiet() bool {
	for i := range g.buckets {
		if g.buckets[i].n != g.buckets[i].ok {
			return false
		}
	}
	return true
}

// opens reports whether f failing and s succeeding distinct routes open
// an incident. A guard younger than half a window has not seen the
// successes before its first failure, which a share of what it did see
// would leave out, so it opens then only on a site failing everyone:
// through every route of the pool, or through each of the first
// guardRoutes routes it counted, none of them served (a full bucket
// counts no more routes). A site down for everyone is called within seconds
// of busy traffic instead of after half a minute of retries and coolings;
// one that bans most exits, which some still pass, is not (read as an
// incident, the bans would stop counting, and traffic would stop going to
// the exits it serves). With cost tiers it waits: a site refusing the
// cheap tier fails every route the target draws from, and only the
// costlier tier's answers tell the site from the tier.
func (g *incidentGuard) opens(ns int64, f, s, pool int, cfg *Config, tiered bool) bool {
	if ns-g.born < int64(cfg.IncidentWindow)/2 {
		return !tiered && f >= max(cfg.IncidentRoutes, min(pool, guardRoutes))
	}
	return f >= cfg.IncidentRoutes && float64(f) >= cfg.IncidentShare*float64(f+s)
}

// routes counts the distinct routes whose latest outcome across cur and
// prev (cur wins) is a failure with c, and those whose latest is a success.
func routes(c Class, cur, prev *guardBucket) (failed, succeeded int) {
	failed, succeeded = int(cur.fails[c]), cur.ok
	for i, s := range prev.slots {
		if s == 0 {
			continue
		}
		if _, inCur := cur.find(s - 1); inCur {
			continue
		}
		switch prev.latest[i] {
		case c:
			failed++
		case OK:
			succeeded++
		}
	}
	return failed, succeeded
}

// guardObserve counts an outcome against target t and opens or closes its
// incident. It reports whether the outcome is frozen: a failure of the open
// incident's class, which must not count against the route.
func (e *Engine) guardObserve(ns int64, r *route, t *target, c Class, rule Rule) (frozen bool) {
	if c != OK && !rule.Incident {
		return false
	}
	g := t.guard.Load()
	if g == nil {
		if c == OK {
			return false // no failure lately: nothing to weigh successes against
		}
		g = &incidentGuard{born: ns}
		if !t.guard.CompareAndSwap(nil, g) {
			g = t.guard.Load()
		}
	}
	g.mu.Lock()
	g.rotate(ns, max(int64(e.cfg.IncidentWindow)/2, 1))
	cur, prev := &g.buckets[g.bucket&1], &g.buckets[(g.bucket+1)&1]
	// A route counts by its latest outcome: one that failed and then
	// succeeded is a success.
	cur.record(r.slot, c)
	open, ok := e.store.Incident(t.n)
	if !ok && c == OK && g.quiet() {
		t.guard.CompareAndSwap(g, nil) // a window without failure
		g.mu.Unlock()
		return false
	}
	// What the counts decide is settled under the guard's lock; the flag
	// itself is the store's, which may be a Redis round trip away, so it
	// is set after the lock is let go (SetIncident reports whether this
	// call flipped it: of two callers deciding alike, one announces).
	var toOpen, toClose bool
	var lift [guardRoutes]int32
	lifts := lift[:0]
	switch {
	case ok && c == open:
		frozen = true
	case ok && c == OK:
		// Successes are back when, in the current half-window, enough
		// routes succeed and few fail.
		f, s := int(cur.fails[open]), cur.ok
		toClose = s >= e.cfg.IncidentRoutes && float64(f) < e.cfg.IncidentShare/2*float64(f+s)
	case !ok && c != OK && int(cur.fails[c]+prev.fails[c]) >= e.cfg.IncidentRoutes:
		f, s := routes(c, cur, prev)
		if !g.opens(ns, f, s, int(e.routes.len()), &e.cfg, e.tiers.Load() > 0) {
			break
		}
		toOpen, frozen = true, true
		for _, k := range g.cooled {
			if k.class == c && k.at >= ns-int64(e.cfg.IncidentWindow) {
				lifts = append(lifts, k.slot)
			}
		}
	}
	g.mu.Unlock()
	opened := toOpen && e.store.SetIncident(t.n, c, true)
	closed := toClose && e.store.SetIncident(t.n, open, false)
	if !opened {
		lifts = lifts[:0]
	}
	// Routes cooled by this class before the incident was recognised were
	// punished for the site's failure: lift those coolings.
	for _, slot := range lifts {
		k := Key{Route: slot, Target: t.n}
		if ch, ok := e.store.Update(&e.cfg, k, Op{Kind: OpLift, Obs: Observation{Class: c}}, ns); ok {
			e.handle(ns, e.routes.get(slot), t, ch, c)
		}
	}
	if opened {
		e.publishIncident(ns, r, t, c, true)
	}
	if closed {
		e.publishIncident(ns, r, t, open, false)
	}
	return frozen
}

// Incident is an open target incident.
type Incident struct {
	Target string
	Class  Class
}

// Incidents lists the open target incidents.
func (e *Engine) Incidents() []Incident {
	var out []Incident
	for n := int32(1); n < e.targets.len(); n++ {
		if c, ok := e.store.Incident(n); ok {
			out = append(out, Incident{Target: e.targets.get(n).name, Class: c})
		}
	}
	return out
}

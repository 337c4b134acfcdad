package engine

import "sync"

// incidentGuard watches one target for failures that are the site's, not
// the exits': many distinct routes failing it with the same class at once.
// Two half-window buckets make the window slide (as grpc-go's outlier
// detection call counter). It counts distinct routes, not attempts: a
// picker that concentrates load on a few routes banned by the site must not
// make their bans look like the site failing everyone.
type incidentGuard struct {
	// born is when the target first failed: the guard did not see the
	// successes before, so it judges only after half a window of evidence.
	born    int64
	mu      sync.Mutex
	bucket  int64          // guarded by mu: number of the current half-window
	buckets [2]guardBucket // guarded by mu
	cooled  []coolingAt    // guarded by mu: ring of recent pair coolings by incident classes
	next    int            // guarded by mu: next slot in cooled once it is full
}

// guardRoutes caps the distinct routes a bucket remembers per class and
// among successes: enough to tell "5 of 8 routes fail" from "18 of 60",
// with bounded memory and bounded scans. It also caps the coolings an
// incident can lift: those that happened before enough routes had failed
// to call it an incident.
const guardRoutes = 64

type coolingAt struct {
	slot  int32
	class Class
	at    int64
}

// guardBucket holds the distinct route slots seen in one half-window.
type guardBucket struct {
	ok    []int32             // succeeded
	fails [numClasses][]int32 // failed with each incident class
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
		cur := &g.buckets[b&1]
		cur.ok = cur.ok[:0]
		for c := range cur.fails {
			cur.fails[c] = cur.fails[c][:0]
		}
	}
	g.bucket = n
}

// addSlot adds slot to the set s unless present or full.
func addSlot(s []int32, slot int32) []int32 {
	if len(s) < guardRoutes && !containsSlot(s, slot) {
		s = append(s, slot)
	}
	return s
}

// removeSlot removes slot from the set s, if present.
func removeSlot(s []int32, slot int32) []int32 {
	for i, x := range s {
		if x == slot {
			s[i] = s[len(s)-1]
			return s[:len(s)-1]
		}
	}
	return s
}

func containsSlot(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// routes counts, over the given buckets, the distinct routes that failed
// with c and those that only succeeded.
func (g *incidentGuard) routes(c Class, buckets ...*guardBucket) (failed, succeeded int) {
	var seen [2 * guardRoutes]int32
	failing := seen[:0]
	for _, b := range buckets {
		for _, s := range b.fails[c] {
			if !containsSlot(failing, s) {
				failing = append(failing, s)
			}
		}
	}
	var okSeen [2 * guardRoutes]int32
	ok := okSeen[:0]
	for _, b := range buckets {
		for _, s := range b.ok {
			if !containsSlot(failing, s) && !containsSlot(ok, s) {
				ok = append(ok, s)
			}
		}
	}
	return len(failing), len(ok)
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
			return false // no failure yet: nothing to weigh successes against
		}
		g = &incidentGuard{born: ns}
		if !t.guard.CompareAndSwap(nil, g) {
			g = t.guard.Load()
		}
	}
	g.mu.Lock()
	g.rotate(ns, max(int64(e.cfg.IncidentWindow)/2, 1))
	cur, prev := &g.buckets[g.bucket&1], &g.buckets[(g.bucket+1)&1]
	// A route counts by its latest outcome in the half-window: one that
	// failed and then succeeded is a success.
	if c == OK {
		for k := range cur.fails {
			cur.fails[k] = removeSlot(cur.fails[k], r.slot)
		}
		cur.ok = addSlot(cur.ok, r.slot)
	} else {
		cur.ok = removeSlot(cur.ok, r.slot)
		cur.fails[c] = addSlot(cur.fails[c], r.slot)
	}
	open, ok := e.store.Incident(t.n)
	var opened, closed bool
	var lift [guardRoutes]int32
	lifts := lift[:0]
	switch {
	case ok && c == open:
		frozen = true
	case ok && c == OK:
		// Successes are back when, in the current half-window, enough
		// routes succeed and few of them fail.
		if f, s := g.routes(open, cur); s >= e.cfg.IncidentRoutes && float64(f) < e.cfg.IncidentShare/2*float64(f+s) {
			closed = e.store.SetIncident(t.n, open, false)
		}
	case !ok && c != OK && len(cur.fails[c])+len(prev.fails[c]) >= e.cfg.IncidentRoutes &&
		ns-g.born >= int64(e.cfg.IncidentWindow)/2:
		f, s := g.routes(c, cur, prev)
		if f < e.cfg.IncidentRoutes || float64(f) < e.cfg.IncidentShare*float64(f+s) {
			break
		}
		opened = e.store.SetIncident(t.n, c, true)
		frozen = true
		for _, k := range g.cooled {
			if opened && k.class == c && k.at >= ns-int64(e.cfg.IncidentWindow) {
				lifts = append(lifts, k.slot)
			}
		}
	}
	g.mu.Unlock()
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

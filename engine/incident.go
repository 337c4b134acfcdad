package engine

import "sync"

// incidentGuard watches one target for failures that are the site's, not
// the exits': many distinct routes failing it with the same class at once.
// Two half-window buckets make the window slide (as grpc-go's outlier
// detection call counter); distinct routes are remembered only up to
// IncidentRoutes per class, which is all the rule needs, so memory is fixed.
type incidentGuard struct {
	mu      sync.Mutex
	bucket  int64                    // guarded by mu: number of the current half-window
	buckets [2]guardBucket           // guarded by mu
	cooled  [guardCoolings]coolingAt // guarded by mu: ring of recent pair coolings by incident classes
	next    int                      // guarded by mu: next slot in cooled
}

// guardCoolings is how many recent coolings an incident can lift: the ones
// that happened before enough routes had failed to call it an incident.
const guardCoolings = 64

type coolingAt struct {
	slot  int32
	class Class
	at    int64
}

// noteCooling remembers that route slot's pair cooled because of class c.
func (g *incidentGuard) noteCooling(slot int32, c Class, ns int64) {
	g.mu.Lock()
	g.cooled[g.next] = coolingAt{slot: slot, class: c, at: ns}
	g.next = (g.next + 1) % guardCoolings
	g.mu.Unlock()
}

type guardBucket struct {
	attempts  int32
	successes int32
	fails     [numClasses]int32
	routes    [numClasses][]int32 // distinct failing route slots, capped at IncidentRoutes
}

func newIncidentGuard(routes int) *incidentGuard {
	g := new(incidentGuard)
	backing := make([]int32, 2*numClasses*routes)
	for b := range g.buckets {
		for c := range g.buckets[b].routes {
			i := (b*numClasses + c) * routes
			g.buckets[b].routes[c] = backing[i : i : i+routes]
		}
	}
	return g
}

func (g *incidentGuard) rotate(ns, width int64) {
	n := ns / width
	if n <= g.bucket {
		return
	}
	for b := g.bucket + 1; b <= n && b <= g.bucket+2; b++ {
		cur := &g.buckets[b&1]
		cur.attempts, cur.successes = 0, 0
		clear(cur.fails[:])
		for c := range cur.routes {
			cur.routes[c] = cur.routes[c][:0]
		}
	}
	g.bucket = n
}

// distinct counts the distinct routes failing with c across both buckets.
func (g *incidentGuard) distinct(c Class) int {
	a, b := g.buckets[0].routes[c], g.buckets[1].routes[c]
	n := len(a)
	for _, s := range b {
		if !containsSlot(a, s) {
			n++
		}
	}
	return n
}

func containsSlot(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
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
		g = newIncidentGuard(e.cfg.IncidentRoutes)
		if !t.guard.CompareAndSwap(nil, g) {
			g = t.guard.Load()
		}
	}
	g.mu.Lock()
	g.rotate(ns, max(int64(e.cfg.IncidentWindow)/2, 1))
	cur := &g.buckets[g.bucket&1]
	cur.attempts++
	if c == OK {
		cur.successes++
	} else {
		cur.fails[c]++
		if rs := cur.routes[c]; len(rs) < cap(rs) && !containsSlot(rs, r.slot) {
			cur.routes[c] = append(rs, r.slot)
		}
	}
	attempts := float64(g.buckets[0].attempts + g.buckets[1].attempts)
	share := func(c Class) float64 {
		return float64(g.buckets[0].fails[c]+g.buckets[1].fails[c]) / attempts
	}
	open, ok := e.store.Incident(t.n)
	var opened, closed bool
	var lift [guardCoolings]int32
	lifts := lift[:0]
	switch {
	case ok && c == open:
		frozen = true
	case ok && c == OK && share(open) < e.cfg.IncidentShare/2:
		closed = e.store.SetIncident(t.n, open, false)
	case !ok && c != OK && g.distinct(c) >= e.cfg.IncidentRoutes && share(c) >= e.cfg.IncidentShare:
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

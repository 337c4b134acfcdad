package engine

import (
	"math"
	"slices"
	"sort"
	"time"
)

// RouteStatus is a snapshot of one route for operators and dashboards.
type RouteStatus struct {
	ID       string
	Labels   Labels
	Tier     int     // cost tier
	Health   Health  // the global record
	Score    float64 // global score in [0, 1]
	Weight   float64 // current selection weight (0 when excluded)
	Inflight int
	Targets  []PairStatus // route×target records, by target name
}

// PairStatus is a snapshot of one route×target record.
type PairStatus struct {
	Target string
	Health Health
	Score  float64 // the pair's target factor in [0, 1]
}

// Route returns the status of route id. It allocates: for admin use, not
// the hot path.
func (e *Engine) Route(id string) (RouteStatus, bool) {
	r := e.route(id)
	if r == nil {
		return RouteStatus{}, false
	}
	st := e.global(r)
	st.Labels = slices.Clone(st.Labels)
	e.store.Pairs(r.slot, func(n int32, p Health) {
		st.Targets = append(st.Targets, PairStatus{Target: e.targets.get(n).name, Health: p, Score: p.targetFactor(&e.cfg)})
	})
	sort.Slice(st.Targets, func(i, j int) bool { return st.Targets[i].Target < st.Targets[j].Target })
	return st, true
}

// EachRoute calls fn with the status of every route but its pairs
// (Targets is nil), in the order the routes were added: for counts over
// the whole pool, which need no copy of it. It allocates nothing per
// route: fn may keep neither st nor its Labels, which are the route's own
// and must not be changed.
func (e *Engine) EachRoute(fn func(st *RouteStatus)) {
	var st RouteStatus
	for slot := range e.routes.len() {
		st = e.global(e.routes.get(slot))
		fn(&st)
	}
}

// RouteGlobal returns the status of route id but its pairs (Targets is
// nil), without allocating: for filters that look at many routes to keep
// few. Its Labels are the route's own and must not be changed.
func (e *Engine) RouteGlobal(id string) (RouteStatus, bool) {
	r := e.route(id)
	if r == nil {
		return RouteStatus{}, false
	}
	return e.global(r), true
}

// global is r's status but its pairs, with the route's own labels.
func (e *Engine) global(r *route) RouteStatus {
	h, _ := e.store.Read(Key{Route: r.slot})
	w, _ := e.pool.weight(r.slot)
	rc := r.config.Load()
	return RouteStatus{
		ID: r.id, Labels: rc.labels, Tier: int(rc.tier), Health: h, Score: h.Score(&e.cfg),
		Weight: w, Inflight: int(e.store.Inflight(r.slot)),
	}
}

// Routes returns the status of every route, in the order they were added.
func (e *Engine) Routes() []RouteStatus {
	out := make([]RouteStatus, 0, e.routes.len())
	for slot := range e.routes.len() {
		if st, ok := e.Route(e.routes.get(slot).id); ok {
			out = append(out, st)
		}
	}
	return out
}

// RouteCount is how many routes were added. Routes are never taken out
// (a reload drains those it no longer lists), so it only grows; it is one
// atomic load.
func (e *Engine) RouteCount() int { return int(e.routes.len()) }

// RouteIDs appends to dst the ids of the routes added after the first
// skip, in the order they were added: since routes are never taken out, an
// index of ids kept by a caller needs only what is new.
func (e *Engine) RouteIDs(dst []string, skip int) []string {
	for slot := int32(max(skip, 0)); slot < e.routes.len(); slot++ {
		dst = append(dst, e.routes.get(slot).id)
	}
	return dst
}

// Drain stops new work on route id; in-flight leases finish normally.
func (e *Engine) Drain(now time.Time, id string) error { return e.operate(now, id, OpDrain) }

// Eject removes route id until Restore.
func (e *Engine) Eject(now time.Time, id string) error { return e.operate(now, id, OpEject) }

// Restore returns route id to healthy, ramping up by slow start.
func (e *Engine) Restore(now time.Time, id string) error { return e.operate(now, id, OpRestore) }

func (e *Engine) operate(now time.Time, id string, kind OpKind) error {
	r := e.route(id)
	if r == nil {
		return ErrUnknownRoute
	}
	ns := now.UnixNano()
	ch, _ := e.store.Update(&e.cfg, Key{Route: r.slot}, Op{Kind: kind}, ns)
	e.handle(ns, r, nil, ch, ch.Cause)
	return nil
}

// UntilTime converts the record's deadline to a time: the zero time when there is
// none, and for an operator ejection (which lasts until Restore).
func (h *Health) UntilTime() time.Time {
	if h.Until == 0 || h.Until == math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, h.Until)
}

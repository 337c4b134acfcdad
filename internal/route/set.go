package route

import (
	"fmt"
	"iter"
)

// Set is one immutable snapshot of the routes a gateway carries, by id:
// those its list names, each with its Exit, and those an earlier list
// named that a reload removed, which the engine drains (their requests in
// flight finish, and a later list may bring them back). The gateway, its
// probes and the admin API read the same Set; a reload derives the next
// one with Next and publishes it whole (docs/design/008-gateway.md).
type Set struct {
	dialer *Dialer // its defaults applied; the exits' (newExit)
	byID   map[string]member
	listed int
}

// member is a route of a Set; exit is nil for a removed one.
type member struct {
	route *Route
	exit  *Exit
}

// NewSet is the set of routes, each with its Exit dialling as d says.
func NewSet(routes []*Route, d Dialer) (*Set, error) {
	return (&Set{dialer: d.withDefaults()}).next(routes, nil)
}

// Diff is what a reload changes, in the terms the engine hears it.
type Diff struct {
	Added    []*Route // unknown to the previous set
	Changed  []*Route // known, with another engine spec (labels, max_inflight, weight, cost, tier)
	Returned []*Route // removed by an earlier reload and listed again
	Removed  []*Route // listed before, not now: to drain
}

// Next is the set of a reload listing routes, and what it changes. A route
// listed before keeps its Exit, and the Exit its idle connections, when it
// reaches its exit the same way, credentials included; a route no longer
// listed stays in the set as removed.
func (s *Set) Next(routes []*Route) (*Set, Diff, error) {
	var d Diff
	next, err := (&Set{dialer: s.dialer}).next(routes, func(r *Route) *Exit {
		old, known := s.byID[r.ID]
		switch {
		case !known:
			d.Added = append(d.Added, r)
			return nil
		case old.exit == nil:
			d.Returned = append(d.Returned, r)
		}
		if !sameSpec(old.route, r) {
			d.Changed = append(d.Changed, r)
		}
		if old.exit != nil && sameDial(old.route, r) {
			return old.exit
		}
		return nil
	})
	if err != nil {
		return nil, Diff{}, err
	}
	for id, m := range s.byID {
		if _, listed := next.byID[id]; !listed {
			next.byID[id] = member{route: m.route}
			if m.exit != nil {
				d.Removed = append(d.Removed, m.route)
			}
		}
	}
	return next, d, nil
}

// next fills s with routes, taking each one's Exit from reuse when it
// gives one, else building it.
func (s *Set) next(routes []*Route, reuse func(*Route) *Exit) (*Set, error) {
	s.byID = make(map[string]member, len(routes))
	for _, r := range routes {
		if _, dup := s.byID[r.ID]; dup {
			return nil, fmt.Errorf("duplicate route %s", r.ID)
		}
		var x *Exit
		if reuse != nil {
			x = reuse(r)
		}
		if x == nil {
			var err error
			if x, err = newExit(r, s.dialer); err != nil {
				return nil, err
			}
		}
		s.byID[r.ID] = member{route: r, exit: x}
	}
	s.listed = len(routes)
	return s, nil
}

// Exit is the way out of route id, or nil when the set does not list it.
func (s *Set) Exit(id string) *Exit { return s.byID[id].exit }

// Route is route id, listed or removed, or nil when the set has no such
// route.
func (s *Set) Route(id string) *Route { return s.byID[id].route }

// Listed is how many routes the set lists.
func (s *Set) Listed() int { return s.listed }

// All yields every route of the set, in no order, with its Exit: nil for a
// removed route.
func (s *Set) All() iter.Seq2[*Route, *Exit] {
	return func(yield func(*Route, *Exit) bool) {
		for _, m := range s.byID {
			if !yield(m.route, m.exit) {
				return
			}
		}
	}
}

// sameDial reports whether a and b reach their exit identically,
// credentials and a provider gateway's steering included, so that
// connections made for a serve b; a reload that changes a gateway route's
// template or bounds starts its sub-exits afresh.
func sameDial(a, b *Route) bool {
	if a.Scheme != b.Scheme || (a.URL == nil) != (b.URL == nil) || (a.Gateway == nil) != (b.Gateway == nil) {
		return false
	}
	return (a.URL == nil || a.URL.String() == b.URL.String()) && (a.Gateway == nil || a.Gateway.String() == b.Gateway.String())
}

// sameSpec reports whether the engine knows a and b alike.
func sameSpec(a, b *Route) bool {
	return a.MaxInflight == b.MaxInflight && a.Weight == b.Weight && a.Cost == b.Cost && a.Tier == b.Tier && a.Labels.String() == b.Labels.String()
}

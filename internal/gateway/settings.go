package gateway

import (
	"fmt"

	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// settings are the parts of the gateway a reload changes. Immutable once
// published.
type settings struct {
	routes  *route.Set
	users   *accounts // nil: no client auth
	targets *target.Directory
	paces   bool // some target is paced
}

// Update publishes routes (derived from Routes() by route.Set.Next), users
// and target rules (nil: none); requests already running finish with what
// they started with. Every route routes lists must already be known to the
// engine (added or updated with r.Spec()). The idle connections kept for
// the routes no longer carried close once idle too long or crowded out,
// unless they serve the routes left with the same proxy and credentials.
func (g *Gateway) Update(routes *route.Set, users map[string]User, rules *target.Rules) error {
	g.updates.Lock()
	defer g.updates.Unlock()
	for r, x := range routes.All() {
		if _, ok := g.engine.RouteSpec(r.ID); x != nil && !ok {
			return fmt.Errorf("gateway: route %s is not known to the engine", r.ID)
		}
	}
	old := g.current.Load()
	next := &settings{routes: routes}
	if old == nil {
		next.users, next.targets = newAccounts(users, nil, g.cfg.Now), target.NewDirectory(rules)
	} else {
		next.users, next.targets = newAccounts(users, old.users, g.cfg.Now), old.targets.With(rules)
	}
	next.paces = next.targets.Paces()
	g.current.Store(next)
	if old != nil {
		g.pacer.Update(g.paceOf) // entries pick up the new rules' limits
	}
	return nil
}

// Routes is the set of routes the gateway carries, from which a reload
// derives the next (route.Set.Next).
func (g *Gateway) Routes() *route.Set { return g.current.Load().routes }

// Targets is what the gateway knows of targets: the rules in force and
// where users' traffic reached each target, for probes.
func (g *Gateway) Targets() *target.Directory { return g.current.Load().targets }

// paceOf is the pacing of a target under the current rules.
func (g *Gateway) paceOf(key string) pacing.Limits {
	return g.current.Load().targets.Pace(key)
}

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
	exits   map[string]*route.Exit // by route id
	users   *accounts              // nil: no client auth
	targets *target.Rules
	paces   bool // some target is paced
}

// Update replaces the routes, users and target rules; requests already
// running finish with what they started with. Every route must already be
// known to the engine (added or updated with r.Spec()). A route whose dial
// is unchanged, credentials included, keeps its Exit and the Exit's idle
// connections; the idle connections of the others' own transports
// (SOCKS5) are closed, and those in the shared one serve the routes left
// with the same proxy and credentials, or are closed once idle too long or
// crowded out.
func (g *Gateway) Update(routes []*route.Route, users map[string]User, targets *target.Rules) error {
	g.updates.Lock()
	defer g.updates.Unlock()
	if targets == nil {
		targets = target.New(nil)
	}
	old := g.current.Load()
	var oldUsers *accounts
	if old != nil {
		oldUsers = old.users
	}
	next := &settings{exits: make(map[string]*route.Exit, len(routes)), users: newAccounts(users, oldUsers, g.cfg.Now), targets: targets, paces: targets.Paces()}
	dialer := g.dialer()
	for _, r := range routes {
		if _, ok := g.engine.RouteSpec(r.ID); !ok {
			return fmt.Errorf("gateway: route %s is not known to the engine", r.ID)
		}
		if _, dup := next.exits[r.ID]; dup {
			return fmt.Errorf("gateway: duplicate route %s", r.ID)
		}
		if old != nil {
			if x, ok := old.exits[r.ID]; ok && sameDial(x.Route(), r) {
				next.exits[r.ID] = x
				continue
			}
		}
		x, err := route.NewExit(r, dialer)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		next.exits[r.ID] = x
	}
	g.current.Store(next)
	if old != nil {
		for id, x := range old.exits {
			if y, ok := next.exits[id]; !ok || y != x {
				x.CloseIdleConnections()
			}
		}
		g.pacer.Update(g.paceOf) // entries pick up the new rules' limits
	}
	return nil
}

// sameDial reports whether a and b reach their exit identically,
// credentials and a provider gateway's steering included, so that
// connections made for a serve b.
func sameDial(a, b *route.Route) bool {
	if a.Scheme != b.Scheme || (a.URL == nil) != (b.URL == nil) {
		return false
	}
	return (a.URL == nil || a.URL.String() == b.URL.String()) && sameGateway(a, b)
}

// paceOf is the pacing of a target under the current rules.
func (g *Gateway) paceOf(key string) pacing.Limits {
	return g.current.Load().targets.Pace(key)
}

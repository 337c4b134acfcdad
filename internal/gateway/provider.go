package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/provider"
	"github.com/switchyard/switchyard/internal/route"
)

// Provider gateway routes (docs/design/014-provider-gateways.md): each
// attempt through one goes out with a username built from the route's
// template. A request with a session goes through its provider session, a
// sub-exit of the route, the same username for every attempt until a
// failure that marks its IP (retiring) or its TTL ends it; one without
// goes out as the template says without a session, the provider rotating.

// headerSubExit tells a client of a gateway route which provider session
// of its session carried the answer: 1 for the first, one more for each
// that replaced a retired or expired one, "; retired" when this answer's
// failure retired it. It holds no provider session id: those are part of
// the username.
const headerSubExit = "X-Switchyard-Sub-Exit"

// banWindow is how long a sub-exit's ban of a target is remembered for
// its route: the first ban within it is the sub-exit's alone (the
// provider's IP), not evidence against the whole gateway; a second,
// through another sub-exit, is.
const banWindow = time.Minute

// maxBanTargets bounds the targets whose last ban a gateway route keeps.
const maxBanTargets = 4096

// providers holds the sub-exit tables of the gateway routes. Safe for
// concurrent use.
type providers struct {
	mu     sync.Mutex
	routes map[string]*gatewayRoute // by route id; guarded by mu
}

// gatewayRoute is one gateway route's sub-exits, for the Exit that Update
// built for it: a reload that builds another starts a new table.
type gatewayRoute struct {
	// Immutable.
	exit     *route.Exit
	gw       *route.Gateway
	user     string // the route's user name, {user}
	ttl      string // {ttl}
	sessions *provider.Sessions[*route.Exit]

	mu   sync.Mutex
	bans map[string]int64 // guarded by mu: target → unix ns of the last sub-exit ban there
}

// route is x's table, made on first use.
func (p *providers) route(x *route.Exit, s *settings) *gatewayRoute {
	id := x.Route().ID
	p.mu.Lock()
	defer p.mu.Unlock()
	if gr := p.routes[id]; gr != nil && gr.exit == x {
		return gr
	}
	if p.routes == nil {
		p.routes = make(map[string]*gatewayRoute)
	}
	// The tables of routes a reload removed or rebuilt go with them.
	for other, gr := range p.routes {
		if s.routes.Exit(other) != gr.exit {
			delete(p.routes, other)
		}
	}
	gw := x.Route().Gateway
	gr := &gatewayRoute{exit: x, gw: gw, user: x.Route().URL.User.Username(), ttl: provider.Minutes(gw.Sessions.TTL),
		sessions: provider.NewSessions[*route.Exit](gw.Sessions), bans: make(map[string]int64)}
	p.routes[id] = gr
	return gr
}

// SubExits is what route id's table of sub-exits (its provider sessions)
// did; ok is false for a route that is no provider gateway or has not
// carried a session's request yet. For the admin API.
func (g *Gateway) SubExits(id string) (st provider.Stats, ok bool) {
	if gr := g.providers.table(id); gr != nil {
		return gr.sessions.Stats(), true
	}
	return st, false
}

// table is route id's sub-exit table, nil when it has none.
func (p *providers) table(id string) *gatewayRoute {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.routes[id]
}

// live is the sub-exit sub names on route id, nil when it is gone.
func (p *providers) live(now time.Time, id string, sub SubExit) *route.Exit {
	gr := p.table(id)
	if gr == nil {
		return nil
	}
	x, _ := gr.sessions.Live(now, sub.ref)
	return x
}

// unfillableError is a gateway route's username that cannot be built for
// a request: a label its template needs is missing, or a value is not
// safe to send. The route does not satisfy the request's constraints.
type unfillableError struct {
	route string
	err   error
}

func (e *unfillableError) Error() string {
	return "route " + e.route + " cannot carry the request: " + e.err.Error()
}

func (e *unfillableError) Unwrap() error { return engine.ErrNoMatch }

// subExit is the exit of an attempt leased on gateway route x: the
// session's provider session, made once, or for a request without a
// session an exit of its own. A strict session whose provider session is
// gone fails with engine.ErrSessionRestartRequired.
func (g *Gateway) subExit(x *route.Exit, s *settings, l engine.Lease, ctl control) (*route.Exit, error) {
	gr := g.providers.route(x, s)
	v := provider.Values{User: gr.user, TTL: gr.ttl, Labels: ctl.labels}
	build := func(seq int, id string) (*route.Exit, error) {
		v.Session = id
		user, err := gr.gw.Template.Username(&v)
		if err != nil {
			return nil, &unfillableError{route: l.Route, err: err}
		}
		return x.WithUser(user, seq)
	}
	if l.Session == "" {
		// A template that always sends a session id gets a new one each
		// attempt: the provider's rotation by other means.
		id := ""
		if gr.gw.Template.Requires(provider.Session) {
			id = provider.NewID()
		}
		return build(0, id)
	}
	sub, err := gr.sessions.Get(g.cfg.Now(), subKey(l.Session, gr.gw.Template, ctl.labels), ctl.strict, func(seq int) (string, *route.Exit, error) {
		id := provider.NewID()
		if gr.gw.PassSessions {
			id = provider.PassedID(l.Session)
		}
		y, err := build(seq, id)
		return id, y, err
	})
	if errors.Is(err, provider.ErrRestart) {
		return nil, fmt.Errorf("%w: its provider session on %s is gone", engine.ErrSessionRestartRequired, l.Route)
	}
	return sub.Value, err
}

// subKey keys a session's provider session by the session and the values
// its username carries: the same session asking for another region needs
// another provider session.
func subKey(session string, t *provider.Template, labels engine.Labels) string {
	keys := t.Labels()
	if len(keys) == 0 {
		return session
	}
	var b strings.Builder
	b.WriteString(session)
	for _, k := range keys {
		v, _ := labels.Get(k)
		b.WriteString("\x00" + v)
	}
	return b.String()
}

// retires reports whether an attempt ending as c marks its sub-exit's IP:
// banned, served a captcha or soft-ban page, or silent.
func retires(c engine.Class) bool {
	switch c {
	case engine.Blocked, engine.ContentInvalid, engine.ProxyTimeout, engine.TargetTimeout:
		return true
	}
	return false
}

// reportAttempt reports o's attempt as ev, first settling what it says of
// a gateway route's sub-exit (settle).
func (g *Gateway) reportAttempt(o *outcome, ev engine.Outcome) {
	if o.exit != nil && o.exit.Route().Gateway != nil && retires(ev.Class) {
		ev, o.retired = g.settle(g.cfg.Now(), o.lease.Route, o.lease.Target, o.exit, false, ev)
	}
	g.report(o.lease, ev)
}

// SubExit names the sub-exit an attempt went through, for a late verdict
// on it (Feedback): its session's key and the provider session's serial,
// never a username or provider session id. The zero SubExit names none.
type SubExit struct{ ref provider.Ref }

// subExitOf is the SubExit of an attempt leased as l through x, the zero
// one when x is no session's sub-exit or no longer live.
func (g *Gateway) subExitOf(l engine.Lease, x *route.Exit) SubExit {
	if x == nil || x.Sub() == 0 {
		return SubExit{}
	}
	gr := g.providers.table(l.Route)
	if gr == nil {
		return SubExit{}
	}
	r, _ := gr.sessions.RefOf(x)
	return SubExit{r}
}

// Feedback takes a client's late verdict o on an attempt through route
// id at target, leased with generations gens, through sub: the proxy's
// X-Switchyard-Feedback and the fetch API's Feedback. A ban or captcha
// through a gateway route is settled as the attempt's own failure would
// have been (settle): its sub-exit is retired if still live (sub names
// that provider session alone, never the one that replaced it), and the
// first-ban rule holds for it too: a page a client's parser finds is a
// ban is as much one IP's mark as a 403 the gateway sees, and without the
// rule each such verdict would cool the whole gateway for the target. A
// verdict on a sub-exit already gone counts as a ban all the same, as
// sessionless attempts' do: its IP may have left by its TTL, unjudged.
// The engine takes the rest (engine.FeedbackAt).
func (g *Gateway) Feedback(now time.Time, id, target string, gens engine.Generations, sub SubExit, o engine.Outcome) error {
	if retires(o.Class) {
		o, _ = g.settle(now, id, target, g.providers.live(now, id, sub), true, o)
	}
	return g.engine.FeedbackAt(now, id, target, gens, o)
}

// settle retires x, route id's sub-exit (nil for none, or none still
// live), for its failure ev at target, and returns what the engine is
// told and whether x was retired: a ban or captcha that is the first on
// the route's target within banWindow is the sub-exit's alone, recorded
// in the log but kept from the engine, which would otherwise cool the
// whole gateway for the target. late marks a client's verdict (Feedback).
func (g *Gateway) settle(now time.Time, id, target string, x *route.Exit, late bool, ev engine.Outcome) (_ engine.Outcome, retired bool) {
	gr := g.providers.table(id)
	if gr == nil {
		return ev, false
	}
	sub := 0
	if x != nil && x.Sub() > 0 {
		sub, retired = x.Sub(), gr.sessions.Retire(now, x)
	}
	first := false
	if ev.Class == engine.Blocked || ev.Class == engine.ContentInvalid {
		first = gr.firstBan(target, now.UnixNano())
	}
	if log := g.cfg.Log; log != nil && (retired || first) {
		log.LogAttrs(context.Background(), slog.LevelInfo, "sub-exit failed",
			slog.String("route", id), slog.Int("sub_exit", sub), slog.String("class", ev.Class.String()),
			slog.String("target", clip(target, maxLogField)), slog.Bool("retired", retired), slog.Bool("gateway_spared", first), slog.Bool("late", late))
	}
	if obs := g.cfg.Observer; obs != nil && (retired || first) {
		obs.ObserveSubExit(ev.Class, retired, first)
	}
	if first {
		return engine.Outcome{Class: engine.Canceled, Latency: ev.Latency}, retired
	}
	return ev, retired
}

// firstBan notes a sub-exit's ban of target at ns and reports whether it
// is the first within banWindow.
func (gr *gatewayRoute) firstBan(target string, ns int64) bool {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	last, seen := gr.bans[target]
	if !seen && len(gr.bans) >= maxBanTargets {
		clear(gr.bans) // bounded: forgetting errs toward sparing the gateway once more
	}
	gr.bans[target] = ns
	return !seen || ns-last >= int64(banWindow)
}

// repin decides whether the failed attempt o of j, which retired its
// session's provider session, goes on through the new one on the same
// route: a re-pin, at most one per request (the caller counts), apart
// from the pool-wide retry budget since the exit, not the request, failed.
// Only on a session's bound route (an unbound one is retried elsewhere as
// any request), never for a strict request, and only when the request may
// be sent again with attempts left.
func (g *Gateway) repin(j *job, o *outcome, attempts int) bool {
	return o.retired && !j.ctl.strict && bound(o.lease) && attempts < g.maxAttempts(j) && j.resendable(o)
}

// subExitHeader is the value of headerSubExit for o, "" when o did not go
// through a session's provider session.
func subExitHeader(o *outcome) string {
	if o.exit == nil || o.exit.Sub() == 0 {
		return ""
	}
	v := strconv.Itoa(o.exit.Sub())
	if o.retired {
		v += "; retired"
	}
	return v
}

package admin

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
)

// proxyAuth is the alarm of routes whose proxy refuses their credentials
// (407, or SOCKS5 authentication refused: class proxy_auth). The engine
// cools such a route, but that is no news to an operator: the password in
// the proxy list is wrong, or the account ran out, and only the operator
// can mend it. So each is logged once, as a warning, until the next reload
// (Metrics.ResetProxyAuth); /readyz names them, and one gauge counts them,
// whatever the size of the pool (a series per route would be 100,000 of
// them).
//
// A route is failing from an attempt or probe answered proxy_auth until
// one through it succeeds; the other classes prove nothing of its
// credentials either way, nor does a probe that only opened a TCP
// connection to the proxy (the prober does not report those).
type proxyAuth struct {
	log *slog.Logger // immutable

	n       atomic.Int64        // len(failing), read without mu on the hot path
	mu      sync.Mutex          // guards failing and warned
	failing map[string]struct{} // guarded by mu: routes whose proxy last refused their credentials
	warned  map[string]struct{} // guarded by mu: routes logged since the last reset
}

func newProxyAuth(log *slog.Logger) *proxyAuth {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &proxyAuth{log: log, failing: make(map[string]struct{}), warned: make(map[string]struct{})}
}

// observe takes the class of an attempt or probe through route; source
// says which, for the log.
func (a *proxyAuth) observe(route string, c engine.Class, source string) {
	switch {
	case c == engine.ProxyAuth:
		a.mu.Lock()
		a.failing[route] = struct{}{}
		a.n.Store(int64(len(a.failing)))
		_, warned := a.warned[route]
		a.warned[route] = struct{}{}
		a.mu.Unlock()
		if !warned {
			a.log.Warn("the route's proxy refuses its credentials (407): check the user name and password in the proxy list; the route stays out of rotation until they pass",
				"route", route, "seen_by", source)
		}
	case c == engine.OK && a.n.Load() > 0:
		a.mu.Lock()
		delete(a.failing, route)
		a.n.Store(int64(len(a.failing)))
		a.mu.Unlock()
	}
}

// routes are the failing routes, sorted.
func (a *proxyAuth) routes() []string {
	if a.n.Load() == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.failing))
	for id := range a.failing {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// reset forgets every warning, so that a route still refused after a
// reload is logged again, and the failing routes keep does not keep:
// those no longer listed, or listed with other credentials.
func (a *proxyAuth) reset(keep func(route string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.warned)
	for id := range a.failing {
		if !keep(id) {
			delete(a.failing, id)
		}
	}
	a.n.Store(int64(len(a.failing)))
}

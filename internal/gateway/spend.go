package gateway

import "github.com/switchyard/switchyard/engine"

// What attempts cost, by their routes' prices (price_per_request=,
// price_per_gb=; docs/design/015-tiers.md), told to the Observer by cost
// tier: each attempt that reached its exit, and the bytes of the answers
// relayed and of tunnels both ways.

// billed reports whether an attempt that ended in c reached its exit's
// service: one refused at the connect or at the proxy's authentication
// carried nothing a provider bills.
func billed(c engine.Class) bool {
	return c != engine.ProxyConnectFailed && c != engine.ProxyAuth
}

// charge tells the Observer what attempts through route routeID that moved
// bytes cost; a route without prices costs nothing, and is not told.
func (g *Gateway) charge(routeID string, attempts, bytes int64) {
	obs := g.cfg.Observer
	if obs == nil {
		return
	}
	r := g.current.Load().routes.Route(routeID)
	if r == nil {
		return
	}
	if amount := r.Price(attempts, bytes); amount > 0 {
		obs.ObserveSpend(int(r.Tier), amount)
	}
}

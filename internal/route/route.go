// Package route is Switchyard's exits: the proxy-list format, stable route
// ids free of credentials, and each route's way out (Exit: direct,
// HTTP proxy, HTTPS proxy, SOCKS5) for requests, tunnels and checks alike,
// with typed errors that say where an attempt failed and the one
// classifier (Classify) that names its outcome.
package route

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/provider"
)

// Scheme is how a route reaches targets.
type Scheme string

// The schemes of the proxy list (proxies.example.txt).
const (
	Direct Scheme = "direct" // the gateway's own connection
	HTTP   Scheme = "http"   // HTTP proxy: absolute-form requests, CONNECT for tunnels
	HTTPS  Scheme = "https"  // HTTP proxy spoken over TLS
	SOCKS5 Scheme = "socks5" // SOCKS5 proxy, optionally with username/password
)

// Route is one exit. Its URL holds the credentials; everything printed
// about a route (ID, Redacted) leaves them out, user name included.
type Route struct {
	ID     string        // stable id: scheme://host:port[~user name fingerprint] (defaultID), or an id= label
	Scheme Scheme        // how targets are reached
	URL    *url.URL      // proxy address with credentials; nil for Direct
	Labels engine.Labels // labels other than the reserved id, max_inflight, cost, weight, tier and prices
	// Gateway steers a provider gateway (a gateway:// line) through its
	// username; nil for other routes. Its Scheme is HTTP, the proxy
	// beneath.
	Gateway *Gateway

	MaxInflight int     // max_inflight= label; 0 = unlimited
	Cost        float64 // cost= label
	Weight      float64 // weight= label; 0 = 1
	// Tier is the route's cost tier (tier=, 0 the cheapest): each target is
	// served from the cheapest tier that works there (docs/design/015-tiers.md).
	Tier   int32
	Line   int32   // line in the list it came from, for messages
	Prices *Prices // price_per_request=, price_per_gb=; nil when neither is set
}

// Prices are what an attempt through a route costs, in the operator's
// currency: per attempt, and per 10^9 bytes sent and received. A route
// without them keeps none: a pointer costs a million-route list less.
type Prices struct {
	PerRequest, PerGB float64
}

// Price is what attempts through r that moved bytes between them cost.
func (r *Route) Price(attempts, bytes int64) float64 {
	if r.Prices == nil {
		return 0
	}
	return float64(attempts)*r.Prices.PerRequest + r.Prices.PerGB*float64(bytes)/1e9
}

// Redacted is the route's address as it may be shown: "***" for the user
// name and for the password, since providers put API keys in either.
func (r *Route) Redacted() string {
	if r.URL == nil {
		return string(r.Scheme)
	}
	creds := ""
	if u := r.URL.User; u != nil {
		creds = "***@"
		if _, has := u.Password(); has {
			creds = "***:***@"
		}
	}
	scheme := r.URL.Scheme
	if r.Gateway != nil {
		scheme = gatewayScheme
	}
	return scheme + "://" + creds + r.URL.Host
}

// Spec is what the engine needs to know of the route. A gateway route
// carries, beside its labels, engine.AnyValue for each label its template
// fills: it takes any region= when its template has {region}
// (docs/design/014-provider-gateways.md).
func (r *Route) Spec() engine.RouteSpec {
	labels := r.Labels
	if r.Gateway != nil {
		labels = slices.Clone(labels)
		for _, k := range r.Gateway.Template.Labels() {
			labels = append(labels, engine.Label{Key: k, Value: engine.AnyValue})
		}
		slices.SortFunc(labels, func(a, b engine.Label) int { return strings.Compare(a.Key, b.Key) })
	}
	return engine.RouteSpec{ID: r.ID, Labels: labels, MaxInflight: r.MaxInflight, Weight: r.Weight, Cost: r.Cost, Tier: int(r.Tier)}
}

// Gateway is how a provider gateway route is steered: the username
// template each attempt's username is built from, and the bounds of its
// provider sessions. Immutable.
type Gateway struct {
	Template *provider.Template
	Preset   string          // the preset= named, "" for none
	Sessions provider.Config // sessions=, session_ttl=, session_idle= (a preset's idle timeout by default)
	// PassSessions sends the client's session id (provider.PassedID)
	// rather than one minted for it: session_ids=pass.
	PassSessions bool
}

// String is the gateway's options as a list line writes them. It holds
// no credential.
func (g *Gateway) String() string {
	var b strings.Builder
	if g.Preset != "" {
		b.WriteString("preset=" + g.Preset + " ")
	}
	b.WriteString(`template="` + g.Template.String() + `"`)
	b.WriteString(" sessions=" + strconv.Itoa(g.Sessions.Max))
	b.WriteString(" session_ttl=" + g.Sessions.TTL.String())
	b.WriteString(" session_idle=" + g.Sessions.Idle.String())
	if g.PassSessions {
		b.WriteString(" session_ids=pass")
	}
	return b.String()
}

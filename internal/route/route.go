// Package route is Switchyard's exits: the proxy-list format, stable route
// ids free of credentials, and each route's way out (Exit: direct,
// HTTP proxy, HTTPS proxy, SOCKS5) for requests, tunnels and checks alike,
// with typed errors that say where an attempt failed and the one
// classifier (Classify) that names its outcome.
package route

import (
	"net/url"

	"github.com/switchyard/switchyard/engine"
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
	Labels engine.Labels // labels other than the reserved id, max_inflight, cost, weight

	MaxInflight int     // max_inflight= label; 0 = unlimited
	Cost        float64 // cost= label
	Weight      float64 // weight= label; 0 = 1
	Line        int     // line in the list it came from, for messages
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
	return r.URL.Scheme + "://" + creds + r.URL.Host
}

// Spec is what the engine needs to know of the route.
func (r *Route) Spec() engine.RouteSpec {
	return engine.RouteSpec{ID: r.ID, Labels: r.Labels, MaxInflight: r.MaxInflight, Weight: r.Weight, Cost: r.Cost}
}

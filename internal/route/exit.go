package route

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
)

// Exit is one route's way out, built once per route so that connections
// through it are reused: the transport of absolute-form requests
// (RoundTrip), the tunnel dial (DialTarget) and the neutral check (Check).
// Users' traffic and probes go out the same way. Failures to get through
// the route are *Error, and each attempt records its Progress, so that
// Classify can name the outcome by the layer it reached. Safe for
// concurrent use.
type Exit struct {
	// Immutable after NewExit.
	route *Route
	// dialer is how the exit dials, its timeouts' defaults applied: one
	// for all the exits of a Set, so that a route does not carry a copy.
	dialer    *Dialer
	tls       *tls.Config // TLS to the HTTPS proxy; nil for other schemes
	transport *http.Transport
	upstream  *Upstream // the shared transport is transport; nil when it is the exit's own
	// bound, for a SOCKS5 exit, is the Upstream whose bound on idle
	// connections its own transport keeps to; nil without one.
	bound *Upstream
	sub   int // the provider session's Seq for an exit of one (WithUser); 0 otherwise
	// conns, for a bound exit, are its transport's connections open now,
	// in use or idle (bound.warm counts them).
	conns atomic.Int64
}

// NewExit builds the exit of r, dialling as d says. r must be Direct or
// name its proxy (HTTP, HTTPS, SOCKS5).
func NewExit(r *Route, d Dialer) (*Exit, error) { return newExit(r, d.withDefaults()) }

// withDefaults is d with its timeouts' defaults applied, for exits to
// share (newExit).
func (d Dialer) withDefaults() *Dialer {
	d.Timeouts = d.Timeouts.withDefaults()
	return &d
}

// newExit is NewExit dialling as d says, d's defaults applied.
func newExit(r *Route, d *Dialer) (*Exit, error) {
	switch {
	case r.Scheme == Direct:
	case r.Scheme != HTTP && r.Scheme != HTTPS && r.Scheme != SOCKS5:
		return nil, fmt.Errorf("route %s: cannot dial scheme %q", r.ID, r.Scheme)
	case r.URL == nil:
		return nil, fmt.Errorf("route %s: %s route without a proxy address", r.ID, r.Scheme)
	}
	x := &Exit{route: r, dialer: d}
	if r.Scheme == HTTPS {
		x.tls = proxyTLSConfig(d.TLS, r.URL.Hostname())
	}
	if d.Upstream != nil && r.Scheme != SOCKS5 {
		x.transport, x.upstream = d.Upstream.transport, d.Upstream
		return x, nil
	}
	idle := ownTransportIdle
	if d.Upstream != nil {
		idle = d.Upstream.maxIdle // a SOCKS5 route: the warm ones are bounded together
	}
	x.transport = &http.Transport{
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     upstreamIdleTimeout,
		// The client's Accept-Encoding goes through untouched; the answer
		// must reach it as the target sent it.
		DisableCompression: true,
	}
	switch r.Scheme {
	case HTTP, HTTPS:
		// Absolute-form requests to the proxy; Go adds the route's
		// Proxy-Authorization.
		x.transport.Proxy = http.ProxyURL(r.URL)
		x.transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return x.dialProxy(ctx)
		}
		if r.Scheme == HTTPS {
			// With an https:// proxy, Go dials the proxy through DialTLSContext.
			x.transport.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				return x.negotiate(ctx, x.proxyTLS)
			}
		}
	default:
		// SOCKS5 and Direct: the request rides a tunnel to the target.
		x.transport.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			if x.bound == nil {
				return x.dialTarget(ctx, addr)
			}
			return x.bound.dialCounted(x, &x.conns, func() (net.Conn, error) { return x.dialTarget(ctx, addr) })
		}
		x.bound = d.Upstream // nil but for SOCKS5 beside an Upstream
	}
	return x, nil
}

// Context is ctx as a request through x needs it: carrying the trace
// through which RoundTrip records the attempt's progress into p and, when x
// shares its transport (Dialer.Upstream), x itself. A request made with it
// spares RoundTrip a copy of the request to add them. Call it once per
// attempt, before the attempt starts.
func (x *Exit) Context(ctx context.Context, p *Progress) context.Context {
	ctx = p.traced(ctx)
	if x.upstream != nil {
		ctx = withExit(ctx, x)
	}
	return ctx
}

// RoundTrip sends req, an absolute-form http:// request, out through the
// exit, recording into p how far it got (see Context). A 407 is the proxy's refusal of
// the route's credentials, an *Error (PhaseProxyAuth) as for a CONNECT,
// only when it is shown to be (proxyRefused); any other 407 is the
// target's answer and comes back as such. When req's context ends, the
// error, or that of reading the body, carries its cause (net/http's own
// behaviour).
func (x *Exit) RoundTrip(req *http.Request, p *Progress) (*http.Response, error) {
	p.direct = x.route.Scheme == Direct
	if ctx := req.Context(); httptrace.ContextClientTrace(ctx) != &p.trace || x.upstream != nil && exitOf(ctx) != x {
		req = req.WithContext(x.Context(ctx, p))
	}
	resp, err := x.transport.RoundTrip(req)
	if x.bound != nil {
		x.bound.warm.touch(x) // once its connection is counted
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusProxyAuthRequired && x.proxyRefused(req, resp) {
		resp.Body.Close()
		return nil, &Error{Phase: PhaseProxyAuth, Status: resp.StatusCode, Route: x.route.ID, Forwarded: true}
	}
	return resp, nil
}

// proxyRefused tells a 407 from the route's HTTP proxy, which refused its
// credentials, from a target's 407 relayed by the proxy: a hostile site
// that answers 407 must not pass for a bad password on every exit it is
// reached through. Only a proxy was spoken to over HTTP (Direct and SOCKS5
// routes carry the request to the target itself), it must challenge as a
// proxy does (Proxy-Authenticate, RFC 9110 §11.7.1), and it must refuse a
// CONNECT to the same host with the same credentials, an answer no target
// can forge. A CONNECT it builds shows the credentials are good. Many
// proxies refuse CONNECT to any port but 443 before they look at
// credentials, so a tunnel refused otherwise is asked again on 443; if
// that proves nothing either, the 407 is the target's.
func (x *Exit) proxyRefused(req *http.Request, resp *http.Response) bool {
	if x.route.Scheme != HTTP && x.route.Scheme != HTTPS || resp.Header.Get("Proxy-Authenticate") == "" {
		return false
	}
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	for _, p := range []string{port, "443"} {
		c, err := x.dialTarget(req.Context(), net.JoinHostPort(req.URL.Hostname(), p))
		if err == nil {
			c.Close()
			return false
		}
		var e *Error
		switch {
		case !errors.As(err, &e):
			return false
		case e.Phase == PhaseProxyAuth:
			return true
		case e.Phase != PhaseTunnel || p == "443":
			return false
		}
	}
	return false
}

// DialTarget opens a byte stream to addr ("host:port") through the exit:
// directly (Direct), through an HTTP CONNECT tunnel (HTTP; HTTPS speaks
// TLS to the proxy first, verifying its certificate against Dialer.TLS's
// roots), or through SOCKS5, which resolves names at the proxy.
// Credentials in the route's URL are sent as Proxy-Authorization: Basic
// (HTTP, HTTPS) or SOCKS5 username/password. p records the stream once it
// exists.
//
// ctx bounds the whole call and Dialer.Timeouts each phase. Every failure
// to reach the target through the route is an *Error; a malformed addr is
// a plain error.
func (x *Exit) DialTarget(ctx context.Context, addr string, p *Progress) (net.Conn, error) {
	p.direct = x.route.Scheme == Direct
	dial := func() (net.Conn, error) { return x.dialTarget(ctx, addr) }
	var c net.Conn
	var err error
	if u := x.shared(); u != nil {
		c, err = u.dialCounted(x, nil, dial)
	} else {
		c, err = dial()
	}
	if err == nil {
		p.connected.Store(true)
	}
	return c, err
}

// shared is the Upstream x's connections count against, nil without one.
func (x *Exit) shared() *Upstream {
	if x.upstream != nil {
		return x.upstream
	}
	return x.bound
}

// Check is the neutral check of the exit: a TCP connection to its proxy,
// which tells a dead or hanging exit from a live one, not a bad password.
// The gateway's own connection (Direct) has nothing to check. A failure
// is an *Error.
func (x *Exit) Check(ctx context.Context) error {
	if x.route.Scheme == Direct {
		return nil
	}
	c, err := x.dialProxy(ctx)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// Route is the route the exit was built for.
func (x *Exit) Route() *Route { return x.route }

// WithUser is the exit of one provider session of x's gateway route
// (docs/design/014-provider-gateways.md): the same proxy and password,
// user as the user name, dialled alike. With a shared transport
// (Dialer.Upstream) it costs a few hundred bytes, and its connections are
// pooled apart from the other sessions' since the credentials differ; seq
// is the provider session's number within its Switchyard session (Sub).
func (x *Exit) WithUser(user string, seq int) (*Exit, error) {
	if x.route.URL == nil {
		return nil, fmt.Errorf("route %s: no proxy to send a user name to", x.route.ID)
	}
	r := *x.route
	u := *r.URL
	if pass, ok := u.User.Password(); ok {
		u.User = url.UserPassword(user, pass)
	} else {
		u.User = url.User(user)
	}
	r.URL = &u
	y, err := newExit(&r, x.dialer)
	if err != nil {
		return nil, err
	}
	y.sub = seq
	return y, nil
}

// Sub is the Seq of the provider session the exit is of (WithUser), 0 for
// a route's own exit.
func (x *Exit) Sub() int { return x.sub }

// CloseIdleConnections closes the exit's idle connections; requests in
// progress are not cut. An exit sharing its transport (Dialer.Upstream)
// has none of its own: the shared ones are closed by
// Upstream.CloseIdleConnections, or when idle too long or crowded out.
func (x *Exit) CloseIdleConnections() {
	if x.upstream == nil {
		x.transport.CloseIdleConnections()
	}
}

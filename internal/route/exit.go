package route

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
)

// Exit is one route's way out, built once per route: absolute-form and
// https:// requests (RoundTrip) over connections kept for the next request
// (an Upstream's, shared by the exits that go out the same way), tunnels
// (DialTarget) and the neutral check (Check). Users' traffic and probes go
// out the same way. Failures to get through the route are *Error, and
// each attempt records its Progress, so that Classify can name the
// outcome by the layer it reached. Safe for concurrent use.
type Exit struct {
	// Immutable after NewExit.
	route *Route
	// dialer is how the exit dials, its defaults applied (an Upstream
	// among them): one for all the exits of a Set, so that a route does
	// not carry a copy.
	dialer *Dialer
	tls    *tls.Config // TLS to the HTTPS proxy; nil for other schemes
	sub    int         // the provider session's Seq for an exit of one (WithUser); 0 otherwise

	// wire is made at the first request, so that an idle route of a large
	// pool does not carry it.
	wire atomic.Pointer[wire]
}

// wire is what an Exit's requests need of its route on every request.
type wire struct {
	// endpoint names the way out, so that exits going out the same way
	// share connections: the proxy's URL, credentials included, or
	// "direct" for the gateway's own connection.
	endpoint string
	// auth is the Proxy-Authorization line absolute-form requests carry to
	// an HTTP or HTTPS proxy; "" without credentials.
	auth string
}

// NewExit builds the exit of r, dialling as d says. r must be Direct or
// name its proxy (HTTP, HTTPS, SOCKS5).
func NewExit(r *Route, d Dialer) (*Exit, error) { return newExit(r, d.withDefaults()) }

// withDefaults is d with its defaults applied, for exits to share
// (newExit): its timeouts', and an Upstream of its own when it has none.
func (d Dialer) withDefaults() *Dialer {
	d.Timeouts = d.Timeouts.withDefaults()
	if d.Upstream == nil {
		d.Upstream = NewUpstream(0, 0)
	}
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
	return x, nil
}

// wired is x's wire, made at its first use.
func (x *Exit) wired() *wire {
	if w := x.wire.Load(); w != nil {
		return w
	}
	w := &wire{endpoint: "direct"}
	if u := x.route.URL; u != nil {
		w.endpoint = u.String()
		if u.User != nil && (x.route.Scheme == HTTP || x.route.Scheme == HTTPS) {
			pw, _ := u.User.Password()
			w.auth = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n"
		}
	}
	x.wire.CompareAndSwap(nil, w)
	return x.wire.Load()
}

// RoundTrip sends req through the exit, recording into p how far it got,
// on the goroutine of its caller: an http:// request to an HTTP or HTTPS
// proxy in absolute form, with the route's credentials; any other (http://
// through a Direct or SOCKS5 route, https:// through any) in origin form
// on a stream to the target, TLS on top for https:// verified against
// Dialer.TargetTLS's roots; a protocol upgrade on a stream of its own,
// whose connection becomes the answer's body after a 101 (*Upgraded).
// Connections are kept for the next request going out the same way (the
// Upstream's), and one is taken only when nothing waits to be read on it
// (alive): one the other end closed meanwhile has its end waiting, and
// bytes no request asked for would be read as this request's answer (an
// HTTP proxy's connection carries requests for every site, so one site's
// extra bytes must not answer another's request). One closed after that
// look fails at once, the request going again on a fresh one when it may
// be sent twice (Idempotent, its body rewindable). req's context ending
// cuts the exchange and the body, the error then carrying its cause.
//
// A 407 is the proxy's refusal of the route's credentials, an *Error
// (PhaseProxyAuth) as for a CONNECT, only when it is shown to be
// (proxyRefused); any other 407 is the target's answer and comes back as
// such.
func (x *Exit) RoundTrip(req *http.Request, p *Progress) (*http.Response, error) {
	p.direct = x.route.Scheme == Direct
	ctx := req.Context()
	w := x.wired()
	secure := req.URL.Scheme == "https"
	upgrade := req.Header.Get("Upgrade") != ""
	absolute := !secure && !upgrade && (x.route.Scheme == HTTP || x.route.Scheme == HTTPS)
	key := connKey{endpoint: w.endpoint}
	if !absolute {
		key.addr, key.tls = targetAddr(req.URL), secure
	}
	pool := x.dialer.Upstream.pool
	if upgrade {
		pool = nil // its connection becomes the client's
	}
	again := Idempotent(req.Method) && (req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	for c := pool.get(key); c != nil; c = pool.get(key) {
		if !alive(c.Conn) {
			c.Close()
			continue
		}
		p.connected.Store(true)
		if !absolute {
			p.answered.Store(true) // the target has spoken on it before: its silence is its own
		}
		resp, stale, err := exchange(ctx, c, req, absolute, w.auth, p, pool, true)
		if !stale || !again {
			return x.answered(req, resp, err, absolute)
		}
		p.connected.Store(false)
		p.answered.Store(false)
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
	c, err := x.open(ctx, key, absolute, p)
	if err != nil {
		return nil, err
	}
	resp, _, err := exchange(ctx, c, req, absolute, w.auth, p, pool, false)
	return x.answered(req, resp, err, absolute)
}

// answered is resp as RoundTrip returns it: a 407 to an absolute-form
// request that proxyRefused shows is the proxy's is the route's failure.
func (x *Exit) answered(req *http.Request, resp *http.Response, err error, absolute bool) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	if absolute && resp.StatusCode == http.StatusProxyAuthRequired && x.proxyRefused(req, resp) {
		resp.Body.Close()
		return nil, &Error{Phase: PhaseProxyAuth, Status: resp.StatusCode, Route: x.route.ID, Forwarded: true}
	}
	return resp, nil
}

// open makes a connection for key: to the HTTP or HTTPS proxy for
// absolute-form requests, else a stream to the target with TLS on top
// for https://. Every connection counts against the Upstream's cap.
func (x *Exit) open(ctx context.Context, key connKey, absolute bool, p *Progress) (*conn, error) {
	if !absolute {
		nc, err := x.DialTarget(ctx, key.addr, p)
		if err == nil && key.tls {
			nc, err = x.targetTLS(ctx, nc, key.addr, p)
		}
		if err != nil {
			return nil, err
		}
		return newConn(nc, key), nil
	}
	nc, err := x.dialer.Upstream.dialCounted(x, func() (net.Conn, error) {
		if x.tls != nil {
			return x.negotiate(ctx, x.proxyTLS)
		}
		return x.dialProxy(ctx)
	})
	if err != nil {
		return nil, err
	}
	p.connected.Store(true)
	return newConn(nc, key), nil
}

// targetTLS speaks TLS with the target at addr over stream, a tunnel
// through the exit, verified against Dialer.TargetTLS's roots (the
// system's when nil). A handshake that fails is tls_failed, the target's
// certificate or TLS through this route (PhaseTargetTLS), one that times
// out is silence at the layer reached, and either way stream is closed.
func (x *Exit) targetTLS(ctx context.Context, stream net.Conn, addr string, p *Progress) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{}
	if x.dialer.TargetTLS != nil {
		cfg = x.dialer.TargetTLS.Clone()
	}
	cfg.ServerName, cfg.NextProtos = host, []string{"http/1.1"}
	tc := tls.Client(stream, cfg)
	stop := context.AfterFunc(ctx, func() { stream.SetDeadline(aLongTimeAgo) })
	err := tc.HandshakeContext(ctx)
	stop()
	if err != nil {
		stream.Close()
		switch ne, _ := errors.AsType[net.Error](err); {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case ne != nil && ne.Timeout():
			return nil, err
		}
		return nil, &Error{Phase: PhaseTargetTLS, Route: x.route.ID, Err: err}
	}
	p.answered.Store(true) // the site spoke: its silence from here on is its own
	return tc, nil
}

// targetAddr is u's host and port, the scheme's when u names none.
func targetAddr(u *url.URL) string {
	port := u.Port()
	switch {
	case port != "":
		return u.Host
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
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
	c, err := x.dialer.Upstream.dialCounted(x, func() (net.Conn, error) { return x.dialTarget(ctx, addr) })
	if err == nil {
		p.connected.Store(true)
	}
	return c, err
}

// Route is the route the exit was built for.
func (x *Exit) Route() *Route { return x.route }

// WithUser is the exit of one provider session of x's gateway route
// (docs/design/014-provider-gateways.md): the same proxy and password,
// user as the user name, dialled alike. It costs a few hundred bytes, and
// shares the route's Upstream, its connections kept apart from the other
// sessions' since the credentials differ; seq is the provider session's
// number within its Switchyard session (Sub).
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

package route

import (
	"container/list"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is what the exits of one gateway share, so that a pool of
// 100,000 routes does not hold a transport and its idle connections per
// route: one HTTP transport for every HTTP proxy, HTTPS proxy and Direct
// route. Its connections are pooled per proxy endpoint and credentials
// (the proxy's URL: the scheme, and so the TLS to an HTTPS proxy, its host
// and port, its user name and password), or per target for Direct routes,
// and at most MaxIdle of them are kept idle across all routes, the least
// recently used closed first, however many one pool holds: a provider's
// gateway carrying 200 requests at once keeps 200 connections, where a
// cap per pool would close what it is over after every answer and dial
// it again for the next. SOCKS5 routes keep a transport of their own:
// their connections are tunnels through one proxy and must never carry
// another route's requests. Only the SOCKS5 routes used last keep idle
// connections, as many routes as MaxIdle allows at 16 each, so that a
// pool of SOCKS5 routes is bounded alike. Every connection its exits open,
// tunnels included, counts against a cap on those open at once. Safe for
// concurrent use.
type Upstream struct {
	// Immutable after NewUpstream.
	transport *http.Transport
	maxOpen   int64        // cap on open; 0: none
	open      atomic.Int64 // connections open now, in use or idle, tunnels included, and dials under way

	warm warmExits
}

// warmExits are the SOCKS5 exits whose transports may keep idle
// connections, the one used last in front; an exit pushed out of the
// last max has its idle connections closed.
type warmExits struct {
	mu    sync.Mutex
	max   int
	order list.List               // of *Exit; guarded by mu
	at    map[*Exit]*list.Element // guarded by mu
}

// touch puts x in front, closing the idle connections of the exit it
// pushes out.
func (w *warmExits) touch(x *Exit) {
	w.mu.Lock()
	if e, ok := w.at[x]; ok {
		w.order.MoveToFront(e)
		w.mu.Unlock()
		return
	}
	w.at[x] = w.order.PushFront(x)
	var out *Exit
	if w.order.Len() > w.max {
		out = w.order.Remove(w.order.Back()).(*Exit)
		delete(w.at, out)
	}
	w.mu.Unlock()
	if out != nil {
		out.transport.CloseIdleConnections()
	}
}

// Defaults of NewUpstream.
const (
	// DefaultMaxIdle is the idle connections an Upstream keeps across all
	// routes when NewUpstream is given no bound.
	DefaultMaxIdle = 1024
	// ownTransportIdle is the idle connections a route's own transport
	// keeps, per target: a SOCKS5 route's, within the Upstream's cap on
	// those kept warm, or any route's dialled without an Upstream.
	ownTransportIdle = 16
	// upstreamIdleTimeout closes a connection idle this long.
	upstreamIdleTimeout = 90 * time.Second
)

// NewUpstream returns a shared transport for exits (Dialer.Upstream),
// keeping at most maxIdle connections idle across all routes (maxIdle ≤ 0
// means DefaultMaxIdle) and at most maxOpen open, in use or idle (≤ 0: no
// cap but the process's descriptors). Each connection is dialled as the
// exit it is made for says: its Dialer's timeouts and proxy roots, and for
// a Direct route its Control and Resolver.
func NewUpstream(maxIdle, maxOpen int) *Upstream {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	u := &Upstream{maxOpen: int64(max(maxOpen, 0)), warm: warmExits{max: max(1, maxIdle/ownTransportIdle), at: make(map[*Exit]*list.Element)}}
	u.transport = &http.Transport{
		Proxy:               u.proxy,
		DialContext:         u.dial,
		DialTLSContext:      u.dialTLS,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     upstreamIdleTimeout,
		// The client's Accept-Encoding goes through untouched; the answer
		// must reach it as the target sent it.
		DisableCompression: true,
	}
	return u
}

// Open is how many connections to upstream proxies (to targets, for Direct
// routes) the exits sharing u hold open now, in use or idle, tunnels
// included.
func (u *Upstream) Open() int64 { return u.open.Load() }

// ErrUpstreamCap is the error of a dial refused because the gateway holds
// its cap of upstream connections open: its own limit, not the route's
// fault (Error.Local "upstream_cap").
var ErrUpstreamCap = errors.New("route: the cap on open upstream connections is reached")

// dialCounted dials with dial, counting the connection in Open until it is
// closed, or refuses when the cap is reached: the slot is taken before
// the dial, so that dials under way cannot overshoot it together.
func (u *Upstream) dialCounted(x *Exit, dial func() (net.Conn, error)) (net.Conn, error) {
	if n := u.open.Add(1); u.maxOpen > 0 && n > u.maxOpen {
		u.open.Add(-1)
		return nil, &Error{Phase: PhaseDial, Route: x.route.ID, Err: ErrUpstreamCap, Local: "upstream_cap"}
	}
	c, err := dial()
	if err != nil {
		u.open.Add(-1)
		return nil, err
	}
	return &countedConn{Conn: c, open: &u.open}, nil
}

// CloseIdleConnections closes the shared idle connections, every route's.
// Requests in progress are not cut.
func (u *Upstream) CloseIdleConnections() { u.transport.CloseIdleConnections() }

// exitKey carries, in a request's context, the Exit it goes out through,
// for the shared transport to pick the proxy and dial as the route says.
type exitKey struct{}

// exitOf is the Exit ctx carries, or nil.
func exitOf(ctx context.Context) *Exit {
	x, _ := ctx.Value(exitKey{}).(*Exit)
	return x
}

var errNoExit = errors.New("route: a request reached the shared transport without its exit")

// proxy is the shared transport's Proxy: the route's proxy, credentials
// included (the transport sends them as Proxy-Authorization), none for a
// Direct route.
func (u *Upstream) proxy(req *http.Request) (*url.URL, error) {
	x := exitOf(req.Context())
	switch {
	case x == nil:
		return nil, errNoExit
	case x.route.Scheme == Direct:
		return nil, nil
	}
	return x.route.URL, nil
}

// dial is the shared transport's DialContext: to the HTTP proxy of the
// route whose request asked for a connection, or for a Direct route to
// the target addr. A connection made for one request serves later ones
// of its pool's key only (the same proxy URL, or the same target without
// a proxy), so that it is the route's however many routes share it.
func (u *Upstream) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	x := exitOf(ctx)
	if x == nil {
		return nil, errNoExit
	}
	return u.dialCounted(x, func() (net.Conn, error) {
		if x.route.Scheme == Direct {
			return x.dialTarget(ctx, addr)
		}
		return x.dialProxy(ctx)
	})
}

// dialTLS is the shared transport's DialTLSContext, for HTTPS proxies: TLS
// verified against the route's roots for the proxy's name.
func (u *Upstream) dialTLS(ctx context.Context, _, _ string) (net.Conn, error) {
	x := exitOf(ctx)
	if x == nil || x.tls == nil {
		return nil, errNoExit
	}
	return x.negotiateCounted(ctx, u, x.proxyTLS)
}

// countedConn is a connection counted in Upstream.Open: closing it takes
// it out, once. It passes on what a tunnel's copy asks of the connection
// beneath (prefixConn's): the bytes it holds read ahead, the TCP
// connection to splice, the half-close.
type countedConn struct {
	net.Conn
	open   *atomic.Int64
	closed sync.Once
}

func (c *countedConn) Close() error {
	c.closed.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// Buffered is what the connection beneath holds read ahead (Read returns
// it first), 0 when it holds nothing.
func (c *countedConn) Buffered() int {
	if b, ok := c.Conn.(interface{ Buffered() int }); ok {
		return b.Buffered()
	}
	return 0
}

// TCPConn is the TCP connection beneath, nil when there is none.
func (c *countedConn) TCPConn() *net.TCPConn {
	switch in := c.Conn.(type) {
	case *net.TCPConn:
		return in
	case interface{ TCPConn() *net.TCPConn }:
		return in.TCPConn()
	}
	return nil
}

// CloseWrite half-closes the connection beneath where it can, and closes
// it otherwise.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// negotiateCounted is negotiate with the TCP connection beneath counted in
// u: the TLS connection on top is what the transport holds and closes.
func (x *Exit) negotiateCounted(ctx context.Context, u *Upstream, step func(context.Context, net.Conn) (net.Conn, error)) (net.Conn, error) {
	return x.negotiateWith(ctx, func(ctx context.Context) (net.Conn, error) {
		return u.dialCounted(x, func() (net.Conn, error) { return x.dialProxy(ctx) })
	}, step)
}

// withExit is ctx carrying x, for the shared transport.
func withExit(ctx context.Context, x *Exit) context.Context {
	return context.WithValue(ctx, exitKey{}, x)
}

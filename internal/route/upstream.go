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
// connections, as many routes as MaxIdle allows at 16 each and as many
// connections as MaxIdle together, a busy one as many as it carries at
// once, so that a pool of SOCKS5 routes is bounded alike. Every
// connection its exits open, tunnels included, counts against a cap on
// those open at once. Safe for concurrent use.
type Upstream struct {
	// Immutable after NewUpstream.
	transport *http.Transport
	maxIdle   int          // a SOCKS5 exit's transport keeps as many idle: the warm ones bound them together
	maxOpen   int64        // cap on open; 0: none
	open      atomic.Int64 // connections open now, in use or idle, tunnels included, and dials under way

	warm warmExits
}

// warmExits are the SOCKS5 exits whose transports may keep idle
// connections, the one used last in front: while they are more than
// exits, or hold more than conns connections open together, the last is
// pushed out and its idle connections closed. Each exit's count is taken
// as it is touched (held sums them), so a busy exit is counted as it is
// now, one left behind as it was when last used.
type warmExits struct {
	mu    sync.Mutex
	exits int                     // a transport each: what bounds their memory
	conns int64                   // what bounds their descriptors
	held  int64                   // guarded by mu: the warm exits' connections, as last counted
	order list.List               // of *warmExit; guarded by mu
	at    map[*Exit]*list.Element // guarded by mu
}

// warmExit is an exit in warmExits, and its connections as last counted.
type warmExit struct {
	x    *Exit
	seen int64
}

// touch puts x in front, counting its connections again, and pushes out
// the exits last used while the warm ones are over either bound.
func (w *warmExits) touch(x *Exit) {
	w.mu.Lock()
	e, ok := w.at[x]
	if ok {
		w.order.MoveToFront(e)
	} else {
		e = w.order.PushFront(&warmExit{x: x})
		w.at[x] = e
	}
	we := e.Value.(*warmExit)
	n := x.conns.Load()
	w.held += n - we.seen
	we.seen = n
	var out []*Exit
	for (w.order.Len() > w.exits || w.held > w.conns) && w.order.Len() > 1 {
		last := w.order.Remove(w.order.Back()).(*warmExit)
		delete(w.at, last.x)
		w.held -= last.seen
		out = append(out, last.x)
	}
	w.mu.Unlock()
	for _, x := range out {
		x.transport.CloseIdleConnections()
	}
}

// Defaults of NewUpstream.
const (
	// DefaultMaxIdle is the idle connections an Upstream keeps across all
	// routes when NewUpstream is given no bound.
	DefaultMaxIdle = 1024
	// ownTransportIdle is the idle connections the transport of a route
	// dialled without an Upstream keeps, per target; an Upstream keeps
	// MaxIdle / ownTransportIdle SOCKS5 routes warm at most.
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
	u := &Upstream{maxIdle: maxIdle, maxOpen: int64(max(maxOpen, 0)), warm: warmExits{exits: max(1, maxIdle/ownTransportIdle), conns: int64(maxIdle), at: make(map[*Exit]*list.Element)}}
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

// dialCounted dials with dial, counting the connection in Open, and in
// also unless nil, until it is closed, or refuses when the cap is
// reached: the slot is taken before the dial, so that dials under way
// cannot overshoot it together.
func (u *Upstream) dialCounted(x *Exit, also *atomic.Int64, dial func() (net.Conn, error)) (net.Conn, error) {
	if n := u.open.Add(1); u.maxOpen > 0 && n > u.maxOpen {
		u.open.Add(-1)
		return nil, &Error{Phase: PhaseDial, Route: x.route.ID, Err: ErrUpstreamCap, Local: "upstream_cap"}
	}
	c, err := dial()
	if err != nil {
		u.open.Add(-1)
		return nil, err
	}
	if also != nil {
		also.Add(1)
	}
	return &countedConn{Conn: c, open: &u.open, also: also}, nil
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
	return u.dialCounted(x, nil, func() (net.Conn, error) {
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
	open, also *atomic.Int64 // also: nil unless dialCounted had one
	closed     sync.Once
}

func (c *countedConn) Close() error {
	c.closed.Do(func() {
		c.open.Add(-1)
		if c.also != nil {
			c.also.Add(-1)
		}
	})
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
		return u.dialCounted(x, nil, func() (net.Conn, error) { return x.dialProxy(ctx) })
	}, step)
}

// withExit is ctx carrying x, for the shared transport.
func withExit(ctx context.Context, x *Exit) context.Context {
	return context.WithValue(ctx, exitKey{}, x)
}

package route

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is what the exits of one gateway share, so that a pool of
// 100,000 routes does not hold connections per route: the connections
// kept for the next request (connPool), pooled by the way out (the
// proxy's URL, credentials included, or the gateway's own connection) and,
// for a stream to a target, by the target, at most MaxIdle of them idle
// across all routes, the least recently used closed first however many
// one way out holds (a provider's gateway carrying 200 requests at once
// keeps 200); and the count of every connection its exits open, tunnels
// included, against a cap on those open at once. A stream to a target
// through a SOCKS5 or HTTP proxy is its exit's and carries no other
// exit's requests: other credentials are another way out. Safe for
// concurrent use.
type Upstream struct {
	// Immutable after NewUpstream.
	pool    *connPool
	maxOpen int64 // cap on open; 0: none

	open atomic.Int64 // connections open now, in use or idle, tunnels included, and dials under way
}

// Defaults of NewUpstream.
const (
	// DefaultMaxIdle is the idle connections an Upstream keeps across all
	// routes when NewUpstream is given no bound.
	DefaultMaxIdle = 1024
	// upstreamIdleTimeout closes a connection idle this long.
	upstreamIdleTimeout = 90 * time.Second
)

// NewUpstream returns what exits share (Dialer.Upstream), keeping at most
// maxIdle connections idle across all routes (maxIdle ≤ 0 means
// DefaultMaxIdle) and at most maxOpen open, in use or idle (≤ 0: no cap
// but the process's descriptors).
func NewUpstream(maxIdle, maxOpen int) *Upstream {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	return &Upstream{pool: newConnPool(maxIdle, upstreamIdleTimeout), maxOpen: int64(max(maxOpen, 0))}
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
// closed, or refuses when the cap is reached: the slot is taken before the
// dial, so that dials under way cannot overshoot it together.
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

// CloseIdleConnections closes the idle connections, every route's.
// Requests in progress are not cut.
func (u *Upstream) CloseIdleConnections() { u.pool.closeIdle(nil) }

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

package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/config"
)

// clientListener is the forward proxy's listener: it counts the open
// client connections, tunnels included, and closes at once a connection
// accepted beyond the cap. Closing rather than holding it in the kernel's
// backlog (as netutil.LimitListener does, by not accepting) fails the
// client fast, so it or its load balancer can go elsewhere, and never
// leaves it hanging unseen.
type clientListener struct {
	net.Listener
	max     int64 // 0: no cap
	open    atomic.Int64
	metrics *admin.Metrics
}

func newClientListener(ln net.Listener, max int, m *admin.Metrics) *clientListener {
	l := &clientListener{Listener: ln, max: int64(max), metrics: m}
	m.WatchClientConns(l.open.Load)
	return l
}

// Accept returns the next connection within the cap.
func (l *clientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			// Counted before the close, which the client may see first.
			l.metrics.ObserveConnCut(admin.CutOverCap)
			c.Close()
			continue
		}
		return &clientConn{Conn: c, l: l}, nil
	}
}

// clientConn is a client connection as the front door and, once
// hijacked, a tunnel hold it: it frees its place under the cap when
// closed, and keeps what tells why the server cut it.
type clientConn struct {
	net.Conn
	l      *clientListener
	closed sync.Once

	timedOut atomic.Bool // a read met its deadline
	idle     atomic.Bool // between requests (http.StateIdle)
	inBody   atomic.Bool // reading a request body under its deadline
	bodyCut  atomic.Bool // a request body fell too far behind
}

func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut.Store(true)
	}
	return n, err
}

func (c *clientConn) Close() error {
	c.closed.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// TCPConn is the TCP connection beneath c, or nil: a tunnel copies to
// and from it, so that the kernel splices the bytes, while closing c
// itself.
func (c *clientConn) TCPConn() *net.TCPConn {
	tc, _ := c.Conn.(*net.TCPConn)
	return tc
}

// SyscallConn is the socket beneath c, for the front door's watch of a
// client leaving.
func (c *clientConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// CloseWrite half-closes, as the tunnel does at the end of the client's
// side, where the connection can; otherwise it closes.
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// trackState is the front door's ConnState hook: a connection closed
// after a read deadline passed was cut, and its state says by which bound
// (the server marks a kept-alive connection active only once it read past
// the first bytes of the next request, so headers cut short there count as
// idle). Connections the client closed, or Shutdown did, are not counted.
func (l *clientListener) trackState(nc net.Conn, state http.ConnState) {
	c := nc.(*clientConn) // Accept made it
	switch state {
	case http.StateActive:
		c.idle.Store(false)
	case http.StateIdle:
		c.idle.Store(true)
		c.inBody.Store(false) // a body the handler left unread was discarded in time
	case http.StateClosed:
		timedOut := c.timedOut.Load()
		switch {
		case c.bodyCut.Load() || timedOut && c.inBody.Load():
			l.metrics.ObserveConnCut(admin.CutSlowBody)
		case timedOut && c.idle.Load():
			l.metrics.ObserveConnCut(admin.CutIdle)
		case timedOut:
			l.metrics.ObserveConnCut(admin.CutHeader)
		}
	}
}

// connKey carries a request's *clientConn in its context.
type connKey struct{}

// withConn is the front door's ConnContext hook.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// bodyLimits hold request bodies to server.min_body_rate, with
// server.body_timeout of slack.
type bodyLimits struct {
	timeout time.Duration // 0: no limit
	rate    int64         // bytes/s; 0: no rate, timeout bounds stalls alone
}

func newBodyLimits(s config.Server) bodyLimits {
	return bodyLimits{timeout: s.BodyTimeout, rate: s.MinBodyRate}
}

// wrap gives each request body of h, CONNECT aside (its connection becomes
// a tunnel), a read deadline that the bytes received push back.
func (b bodyLimits) wrap(h http.Handler) http.Handler {
	if b.timeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		c := r.Context().Value(connKey{}).(*clientConn) // withConn put it there
		// A copy: a handler leaves the Request it was given as it was.
		r2 := new(http.Request)
		*r2 = *r
		r2.Body = &limitedBody{ReadCloser: r.Body, conn: c, limits: b, slack: b.timeout}
		h.ServeHTTP(w, r2)
	})
}

// limitedBody is a request body read under a deadline: slack, the time the
// body may still fall behind the minimum rate, starts at the timeout,
// shrinks by the time each read waits and grows by the time its bytes are
// worth at the rate, never beyond the timeout, so that a fast start banks
// no credit for a stall later. Only time spent in Read counts: while the
// gateway does not read (the route is slow to take a streamed body), the
// client is not to blame. Owner: the goroutine reading the body.
type limitedBody struct {
	io.ReadCloser
	conn   *clientConn
	limits bodyLimits
	slack  time.Duration
	done   bool // EOF or error: no deadline any more
}

// errSlowBody is what the handler reading a body too slow gets.
var errSlowBody = errors.New("request body too slow")

// minBodyDeadline is the nearest a body's read deadline is ever set. The
// read that brings the body's end arms the front door's watch for the
// client's close, which waits under this same deadline should Read be
// slow to clear it: were it about to pass, the watch would end unseeing.
const minBodyDeadline = time.Second

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	start := time.Now()
	// Left set if the handler stops reading: the front door's discard of the
	// rest, before it reuses the connection, is then bounded too.
	b.conn.inBody.Store(true)
	if b.slack <= 0 {
		return 0, b.cut()
	}
	b.conn.SetReadDeadline(start.Add(max(b.slack, minBodyDeadline)))
	n, err := b.ReadCloser.Read(p)
	b.slack -= time.Since(start)
	if b.limits.rate > 0 {
		b.slack += time.Duration(n) * time.Second / time.Duration(b.limits.rate)
	} else if n > 0 {
		b.slack = b.limits.timeout
	}
	b.slack = min(b.slack, b.limits.timeout)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, b.cut()
	default:
		// The body is in, or the client gone: the server watches the
		// connection for the client's close from now on, and a deadline
		// left here would cancel the request.
		b.done = true
		b.conn.SetReadDeadline(time.Time{})
		b.conn.inBody.Store(false)
	}
	return n, err
}

// cut ends a body too slow: the deadline passed makes the server's
// discard of the rest fail, so it closes the connection.
func (b *limitedBody) cut() error {
	b.done = true
	b.conn.bodyCut.Store(true)
	b.conn.SetReadDeadline(time.Unix(1, 0))
	return errSlowBody
}

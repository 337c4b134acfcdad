package frontdoor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A connection's states, as Shutdown sees them.
const (
	connNew     int32 = iota // accepted, no request read yet
	connActive               // a request is being read or served
	connIdle                 // waiting for the next request
	connClosing              // closed by Shutdown while idle
)

// newConnGrace is how long Shutdown leaves a connection that has sent
// nothing yet, as net/http's does: its client may be about to.
const newConnGrace = 5 * time.Second

// maxDiscard is the most of a request body the handler left unread that
// is read off so that the connection can serve the next request; beyond
// it the connection is closed (net/http's maxPostHandlerReadBytes).
const maxDiscard = 256 << 10

// holdSize is the most of an answer of unknown length held back before its
// head: an answer that ends within it goes out with a Content-Length.
const holdSize = 2048

// conn is one client connection, served by one goroutine.
type conn struct {
	s        *Server
	rwc      net.Conn
	remote   string
	ctx      context.Context
	accepted time.Time
	lr       io.LimitedReader // beneath br: bounds a request's head
	br       *bufio.Reader
	state    atomic.Int32
	watch    watcher
	unread   bool // the client may still be sending: closeGently

	// The cached Date header value, remade each second.
	dateSec int64
	date    string
	hold    [holdSize]byte
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, rwc: nc, remote: nc.RemoteAddr().String(), accepted: time.Now()}
	c.lr = io.LimitedReader{R: nc, N: math.MaxInt64}
	c.br = bufio.NewReader(&c.lr)
	c.ctx = context.Background()
	if s.ConnContext != nil {
		c.ctx = s.ConnContext(c.ctx, nc)
	}
	c.watch.init(nc)
	return c
}

// serve reads and serves requests until the connection is closed, goes
// wrong, asks to be closed, or is hijacked.
func (c *conn) serve() {
	hijacked := false
	defer func() {
		if !hijacked {
			if c.unread {
				c.closeGently()
			}
			c.rwc.Close()
			c.s.setState(c, http.StateClosed)
			c.s.forget(c)
		}
	}()
	c.s.setState(c, http.StateNew)
	c.setReadDeadline(c.s.ReadHeaderTimeout)
	for served := false; ; served = true {
		if served {
			c.state.Store(connIdle)
			c.s.setState(c, http.StateIdle)
			if c.s.shuttingDown() {
				return
			}
			c.setReadDeadline(c.s.IdleTimeout)
		}
		// The header's bound starts with its first byte, not before.
		c.lr.N = c.s.maxHeaderBytes() + int64(c.br.Size())
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if served {
			if !c.state.CompareAndSwap(connIdle, connActive) {
				return // Shutdown closed it
			}
			c.setReadDeadline(c.s.ReadHeaderTimeout)
		} else if !c.state.CompareAndSwap(connNew, connActive) {
			return
		}
		req, err := http.ReadRequest(c.br)
		c.s.setState(c, http.StateActive)
		if err == nil {
			err = checkRequest(req)
		}
		if err != nil {
			c.refuse(err)
			return
		}
		c.lr.N = math.MaxInt64
		c.rwc.SetReadDeadline(time.Time{})
		var keep bool
		keep, hijacked = c.serveRequest(req)
		if !keep {
			return
		}
	}
}

// setReadDeadline bounds the next reads by d from now; 0: no bound.
func (c *conn) setReadDeadline(d time.Duration) {
	if d > 0 {
		c.rwc.SetReadDeadline(time.Now().Add(d))
	} else {
		c.rwc.SetReadDeadline(time.Time{})
	}
}

// serveRequest runs the handler on req and finishes its answer. It reports
// whether the connection may serve another request, and whether the
// handler took it.
func (c *conn) serveRequest(req *http.Request) (keep, hijacked bool) {
	req.RemoteAddr = c.remote
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	w := &response{c: c, req: req, header: make(http.Header), length: -1}
	w.closeAfter = req.Close || c.s.shuttingDown()
	expectsContinue := false
	if expect := req.Header.Get("Expect"); expect != "" {
		if !strings.EqualFold(expect, "100-continue") {
			w.closeAfter = true
			c.unread = req.ContentLength != 0 // a body may follow
			w.WriteHeader(http.StatusExpectationFailed)
			w.finish()
			return false, false
		}
		// The go-ahead is the gateway's to give, not the route's.
		req.Header.Del("Expect")
		expectsContinue = req.ProtoAtLeast(1, 1) && req.ContentLength != 0
	}
	c.watch.begin(cancel)
	if req.Body == http.NoBody || req.Body == nil {
		c.armWatch()
	} else {
		w.body = &requestBody{rc: req.Body, w: w, continueDue: expectsContinue}
		req.Body = w.body
	}
	ok := c.run(w, req)
	c.watch.stop()
	if w.hijacked {
		return false, true
	}
	if !ok {
		w.release()
		return false, false
	}
	w.finish()
	return !w.closeAfter, false
}

// run calls the handler; a panic ends the connection, logged unless it is
// http.ErrAbortHandler, the handler's way to cut an answer short.
func (c *conn) run(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logger().Error("frontdoor: panic serving a request", "remote", c.remote, "panic", fmt.Sprint(v), "stack", string(buf))
			}
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return true
}

// checkRequest refuses what net/http's server refuses after parsing.
func checkRequest(req *http.Request) error {
	if req.ProtoMajor != 1 {
		return statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	// http.ReadRequest took the Host field into req.Host, where an
	// absolute-form request's own authority wins.
	if req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect {
		return statusError{http.StatusBadRequest, "missing required Host header"}
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return statusError{http.StatusBadRequest, "malformed Host header"}
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return statusError{http.StatusBadRequest, "invalid header name"}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return statusError{http.StatusBadRequest, "invalid header value"}
			}
		}
	}
	return nil
}

// statusError is a request refused before the handler, with its status.
type statusError struct {
	code   int
	reason string
}

func (e statusError) Error() string { return e.reason }

// refuse answers a request that could not be read or was refused, unless
// the connection itself failed, and leaves the connection to be closed.
func (c *conn) refuse(err error) {
	var se statusError
	switch {
	case c.lr.N <= 0: // the head ran into its bound, read as the stream's end
		se = statusError{http.StatusRequestHeaderFieldsTooLarge, "request header too large"}
	case errors.As(err, &se):
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || isNetError(err):
		return // gone or timed out: nobody to answer
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		// Not echoed: the value is the client's.
		se = statusError{http.StatusNotImplemented, "unsupported transfer encoding"}
	default:
		se = statusError{http.StatusBadRequest, err.Error()}
	}
	status := fmt.Sprintf("%d %s", se.code, http.StatusText(se.code))
	text := status + ": " + se.reason + "\n"
	c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.rwc, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, len(text), text)
	c.unread = se.code == http.StatusRequestHeaderFieldsTooLarge
}

// lingerLimit bounds closeGently's wait for the client to stop sending.
const lingerLimit = 500 * time.Millisecond

// closeGently ends the connection's sending side and reads off what the
// client still sends, for a while: closed with unread bytes, the socket
// would be reset and the client could lose the answer before reading it.
func (c *conn) closeGently() {
	cw, ok := c.rwc.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	cw.CloseWrite()
	c.rwc.SetReadDeadline(time.Now().Add(lingerLimit))
	io.Copy(io.Discard, io.LimitReader(c.rwc, maxDiscard))
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// requestBody is a request's body as the handler reads it: the first read
// of a body the client holds back for 100-continue sends the go-ahead, and
// the body's end starts the watch for the client leaving.
type requestBody struct {
	rc          io.ReadCloser
	w           *response
	continueDue bool
	read        bool // any read was made
	eof         bool
	failed      bool // a read failed: the connection cannot be reused
	closed      bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.continueDue {
		b.continueDue = false
		b.w.sendContinue()
	}
	b.read = true
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		if !b.eof {
			b.eof = true
			b.w.c.armWatch()
		}
	case err != nil:
		b.failed = true
	}
	return n, err
}

// Close ends the handler's reads; what it left unread is read off, within
// maxDiscard, when the answer is finished.
func (b *requestBody) Close() error {
	b.closed = true
	return nil
}

// armWatch starts the watch for the client leaving, unless the next
// request is already read in: net/http's server does not watch then
// either, and the socket's end would not be the client's leaving.
func (c *conn) armWatch() {
	if c.br.Buffered() == 0 {
		c.watch.arm()
	}
}

// drain reads off what the handler left of the body and reports whether
// the connection can serve another request.
func (b *requestBody) drain(c *conn) bool {
	switch {
	case b.eof:
		return true
	case b.failed || b.continueDue:
		// A client waiting for the go-ahead never sent its body.
		return false
	}
	if !b.read {
		c.setReadDeadline(c.s.ReadHeaderTimeout)
	}
	_, err := io.CopyN(io.Discard, b.rc, maxDiscard+1)
	return err == io.EOF
}

package route

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"
)

// HTTP/1.1 on a conn, on the caller's goroutine: the request written, the
// answer's head read, its body handed over to bring the connection back
// when read to its end. net/http's Transport does the same with a reader
// and a writer goroutine per connection and channels between them and
// the caller, two goroutine handoffs each way a request; a forward proxy
// that answers one request with another pays them twice
// (docs/design/008-gateway.md, Upstream connections). net/http's own
// parser reads the answers (http.ReadResponse).

// Idempotent reports whether method may be sent twice with the effect of
// once (RFC 9110 §9.2.2): a request that may have reached the target is
// sent again, on a kept connection found closed or through another route,
// only then.
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// max1xx bounds the interim answers (100 Continue, 103 Early Hints) read
// before the final one, as net/http's Transport does.
const max1xx = 5

// aLongTimeAgo is a deadline in the past: setting it cuts the I/O in
// progress on a connection.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes req on c and reads the answer's head, ctx ending cutting
// c's I/O; with absolute, the request goes in absolute form (to an HTTP
// proxy) with auth, its Proxy-Authorization line. A failure closes c; it
// is stale when c was kept (reused) and failed before the answer's first
// byte as a connection the other end closed while idle does, so that the
// request may go again on a fresh one. The answer's body brings c back to
// pool when read to its end, unless either side said it closes (or pool
// is nil); after a 101 the body is c itself (*Upgraded).
func exchange(ctx context.Context, c *conn, req *http.Request, absolute bool, auth string, p *Progress, pool *connPool, reused bool) (resp *http.Response, stale bool, err error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	answered := false
	defer func() {
		if err == nil {
			return
		}
		stop()
		c.Close()
		switch {
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case reused && !answered && !isTimeout(err) && !isRequestError(err):
			stale = true
		}
	}()
	if err := writeRequest(c.bw, req, absolute, auth); err != nil {
		return nil, false, err
	}
	c.head.remain = maxAnswerHead
	if _, err := c.br.Peek(1); err != nil {
		return nil, false, err
	}
	answered = true
	p.answered.Store(true)
	for n := 0; ; n++ {
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			return nil, false, err
		}
		if resp.StatusCode >= http.StatusOK || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n == max1xx {
			return nil, false, fmt.Errorf("more than %d interim (1xx) answers", max1xx)
		}
	}
	c.head.remain = noHeadLimit
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		resp.Body = &Upgraded{Conn: c.Conn, R: c.br, stop: stop}
		return resp, false, nil
	case resp.Close || req.Close:
		pool = nil
	}
	b := &body{ReadCloser: resp.Body, ctx: ctx, c: c, pool: pool, stop: stop}
	if resp.Body == http.NoBody { // a HEAD's, a 204's, a 304's: the answer is whole
		b.end()
		return resp, false, nil
	}
	resp.Body = b
	return resp, false, nil
}

// writeRequest writes req's head and body to bw and flushes it: in
// absolute form with auth (a Proxy-Authorization line, or "") for an HTTP
// proxy, in origin form on a stream to the target. A body of unknown
// length goes chunked. The body is closed, whatever happens, as a
// RoundTripper closes it.
func writeRequest(bw *bufio.Writer, req *http.Request, absolute bool, auth string) error {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	if body != nil {
		defer body.Close()
	}
	// The head is written by a function of its own: its frame is large,
	// and off the stack by the time the request is written out, which an
	// attempt's fresh goroutine would otherwise grow its stack for.
	if err := writeHead(bw, req, body != nil, absolute, auth); err != nil {
		return err
	}
	if body != nil {
		if err := writeBody(bw, body, req.ContentLength); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeHead writes req's head to bw as net/http's Transport writes it:
// Host, User-Agent (none when empty), the framing of a body (hasBody) or
// of an empty one for the methods that carry one, the headers sorted. The
// Proxy-Authorization comes from the route (auth, absolute form only),
// never from req's headers, so that they can be shared by every attempt.
// Invalid header names or values and a Host or request target that would
// split the head are refused (*RequestError).
func writeHead(bw *bufio.Writer, req *http.Request, hasBody, absolute bool, auth string) error {
	u := req.URL
	host := req.Host
	if host == "" {
		host = u.Host
	}
	uri := u.RequestURI()
	switch {
	case !httpguts.ValidHostHeader(host):
		return &RequestError{Reason: "invalid Host " + strconv.Quote(host)}
	case !validTarget(uri), !validTarget(u.Host):
		return &RequestError{Reason: "invalid request target"}
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	if absolute && u.Opaque == "" {
		bw.WriteString(u.Scheme)
		bw.WriteString("://")
		bw.WriteString(u.Host)
	}
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if ua := req.Header.Get("User-Agent"); ua != "" { // none when the client sent none, as net/http writes an empty one
		if !httpguts.ValidHeaderFieldValue(ua) {
			return &RequestError{Reason: "invalid value of header User-Agent"}
		}
		bw.WriteString("User-Agent: ")
		bw.WriteString(ua)
		bw.WriteString("\r\n")
	}
	switch {
	case hasBody && req.ContentLength > 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(req.ContentLength, 10))
		bw.WriteString("\r\n")
	case hasBody:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch:
		bw.WriteString("Content-Length: 0\r\n") // as net/http says a body is empty
	}
	// Sorted, as net/http writes them: the order a site sees does not
	// change from one request to the next.
	var room [32]string
	keys := room[:0]
	for k := range req.Header {
		if !excludedHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			return &RequestError{Reason: "invalid header name " + strconv.Quote(k)}
		}
		for _, v := range req.Header[k] {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &RequestError{Reason: "invalid value of header " + k}
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if absolute {
		bw.WriteString(auth)
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// writeBody writes body: its length's worth when known (a body that ends
// before is an error), else chunked.
func writeBody(bw *bufio.Writer, body io.Reader, length int64) error {
	if length > 0 {
		n, err := bw.ReadFrom(io.LimitReader(body, length))
		if err == nil && n < length {
			err = fmt.Errorf("request body of %d bytes, not the %d its length says", n, length)
		}
		return err
	}
	cw := httputil.NewChunkedWriter(bw)
	if _, err := io.Copy(cw, body); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	_, err := bw.WriteString("\r\n") // no trailer
	return err
}

// excludedHeader reports whether writeRequest writes header k itself, or
// not at all, rather than as req has it: in any case, since a second Host
// or framing header spelt otherwise would be a second request smuggled in.
func excludedHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer", "Proxy-Authorization":
		return true
	}
	return false
}

// validTarget reports whether s may go into a request line: no spaces or
// control bytes that would split or end it.
func validTarget(s string) bool {
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// RequestError is a request that cannot be written as it is: the caller's
// mistake, no evidence about the route it was to go through.
type RequestError struct{ Reason string }

func (e *RequestError) Error() string { return "route: the request cannot be sent: " + e.Reason }

func isRequestError(err error) bool {
	_, ok := err.(*RequestError)
	return ok
}

// body is an answer's body on c: read to its end, c goes back to pool (or
// is closed when pool is nil); closed before, c is closed first, so that
// nothing waits for the rest of a body no one will read. A read cut by
// ctx's end fails with its cause, as net/http's do.
type body struct {
	io.ReadCloser // http.ReadResponse's
	ctx           context.Context
	c             *conn
	pool          *connPool
	stop          func() bool // detaches c from the attempt's end; false when that came first
	done          bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		if !b.done {
			b.end()
		}
	case err != nil && b.ctx.Err() != nil:
		err = context.Cause(b.ctx)
	}
	return n, err
}

// end gives c back, its answer read whole.
func (b *body) end() {
	b.done = true
	if b.stop() && b.pool != nil {
		b.pool.put(b.c)
	} else {
		b.c.Close()
	}
}

func (b *body) Close() error {
	if !b.done {
		b.done = true
		b.stop()
		b.c.Close()
	}
	return nil
}

// Upgraded is a 101's body: the connection itself, read through R, which
// may hold the first bytes of the new protocol. It lives as long as the
// attempt unless detached (Detach), as once the client's connection is
// spliced to it.
type Upgraded struct {
	Conn net.Conn
	R    *bufio.Reader
	stop func() bool
}

func (u *Upgraded) Read(p []byte) (int, error) { return u.R.Read(p) }

// Close closes the connection.
func (u *Upgraded) Close() error {
	u.stop()
	return u.Conn.Close()
}

// Detach keeps the connection open when the attempt ends.
func (u *Upgraded) Detach() { u.stop() }

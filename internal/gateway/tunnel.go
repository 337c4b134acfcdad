package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/route"
)

// serveConnect builds a tunnel to the CONNECT authority through a leased
// route. Only the connect phase is observed and retried: every failure
// there is a *route.Error, before any byte of the client's went out, so a
// retry on another route is safe whatever the tunnel will carry.
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, s *settings, ctl control, rec *record) {
	addr := r.Host
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || strings.ContainsFunc(addr, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		badRequest(w, "CONNECT needs a host:port authority")
		return
	}
	if !g.admit(r.Context(), w, host) {
		return
	}
	target, _ := s.targets.Resolve(host)
	// A tunnel holds its target's concurrency slot for as long as it lives.
	release, ok := g.admitPace(w, r, s, target)
	if !ok {
		return
	}
	defer release()
	g.budget.request(g.cfg.Now())
	if _, known := g.origins.Load(target); !known {
		g.noteOrigin(target, host) // for probes, until an absolute-form request names the origin
	}
	var tried []string
	var last result
	for {
		l, x, err := g.lease(r.Context(), s, ctl, target, tried)
		if err != nil {
			if tried == nil {
				acquireError(w, err)
				return
			}
			g.respond(w, rec, &last, len(tried))
			return
		}
		tried = append(tried, l.Route)
		conn, latency, class, blocked := g.dialTunnel(r.Context(), l, x, addr)
		if conn != nil {
			rec.route, rec.class, rec.attempts = l.Route, engine.OK, len(tried)
			g.observeRequest(r.Method, engine.OK, len(tried))
			g.tunnel(w, r, rec, l, conn, latency, len(tried))
			return
		}
		last = result{route: l.Route, class: class, blocked: blocked, done: func() {}}
		if !g.retry(r.Method, ctl, &reqBody{}, &last, len(tried)) {
			g.respond(w, rec, &last, len(tried))
			return
		}
	}
}

// dialTunnel opens a stream to addr through the leased route. A failure is
// reported here; a success is reported when the tunnel shows how it went.
// An admission refusal at connect time is returned and reported Canceled:
// it says nothing about the route.
func (g *Gateway) dialTunnel(ctx context.Context, l engine.Lease, x *exit, addr string) (net.Conn, time.Duration, engine.Class, *guard.Error) {
	outcome := engine.Outcome{Class: engine.Canceled}
	var conn net.Conn
	defer func() {
		if conn == nil {
			g.report(l, outcome)
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, g.cfg.AttemptTimeout)
	defer cancel()
	start := g.cfg.Now()
	c, err := g.dialer(addr).DialTarget(dctx, x.route, addr)
	outcome.Latency = g.cfg.Now().Sub(start)
	if err != nil {
		outcome.Class = route.Classify(err)
		blocked := refusal(err)
		if ctx.Err() != nil || blocked != nil {
			outcome.Class = engine.Canceled
		}
		return nil, 0, outcome.Class, blocked
	}
	conn = c
	return conn, outcome.Latency, engine.OK, nil
}

// tunnel hands the client connection over to a splice with upstream. The
// outcome is reported as soon as it is known, so a tunnel that lives for
// hours does not hold its lease past the engine's lease TTL: OK at the
// first byte from the server (the route carried the client to a live
// target); TargetReset when the server ends its side without a word; and
// Canceled when the client ended its side first and the server never
// spoke (no evidence: the client gave up or had nothing to say).
func (g *Gateway) tunnel(w http.ResponseWriter, r *http.Request, rec *record, l engine.Lease, upstream net.Conn, latency time.Duration, attempts int) {
	var once sync.Once
	report := func(c engine.Class) {
		once.Do(func() { g.report(l, engine.Outcome{Class: c, Latency: latency}) })
	}
	defer report(engine.Canceled) // every other path, panics included
	defer upstream.Close()

	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		fail(w, http.StatusHTTPVersionNotSupported, "bad_request", "switchyard: CONNECT is served over HTTP/1.1 only")
		return
	}
	defer client.Close()
	answer := "HTTP/1.1 200 Connection established\r\n" +
		headerRoute + ": " + l.Route + "\r\n" +
		headerAttempts + ": " + strconv.Itoa(attempts) + "\r\n\r\n"
	if _, err := io.WriteString(client, answer); err != nil {
		return
	}
	// Logged now, not when the tunnel ends: it may live for hours.
	rec.status = http.StatusOK
	g.logRequest(r.Context(), rec)

	// Which side ended first decides the outcome of a silent tunnel.
	const clientFirst, serverFirst = 1, 2
	var first atomic.Int32
	var fromClient io.Reader = client
	if brw.Reader.Buffered() > 0 { // bytes sent right behind the CONNECT
		fromClient = brw.Reader
	}
	up := make(chan struct{})
	go func() {
		defer close(up)
		_, err := io.Copy(upstream, fromClient)
		first.CompareAndSwap(0, clientFirst)
		endWrite(upstream, err)
	}()
	spoke := &firstByte{Writer: client, seen: func() { report(engine.OK) }}
	_, err = io.Copy(spoke, upstream)
	if first.CompareAndSwap(0, serverFirst) {
		report(engine.TargetReset) // a no-op if the server spoke
	}
	endWrite(client, err)
	<-up
	// Here the deferred report is Canceled: the client ended its side
	// before the server said anything.
}

// endWrite passes the end of one direction on: a clean end as a
// half-close, so that a peer that sends, half-closes and then reads still
// gets its answer; an error as a full close, which ends the other
// direction too.
func endWrite(c net.Conn, err error) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// firstByte calls seen once, at the first byte written through it.
type firstByte struct {
	io.Writer
	seen func() // owner: the copying goroutine
}

func (f *firstByte) Write(p []byte) (int, error) {
	if len(p) > 0 && f.seen != nil {
		f.seen()
		f.seen = nil
	}
	return f.Writer.Write(p)
}

package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// serveConnect builds a tunnel to the CONNECT authority through the
// attempt loop, or, when the gateway intercepts TLS for the host, answers
// the CONNECT itself and serves the requests inside (intercept). Only the
// connect phase is retried and hedged: every failure there is a
// *route.Error, before any byte of the client's went out, so another route
// is safe whatever the tunnel will carry, and of two connects in flight
// only the first to succeed becomes the tunnel.
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, s *settings, ctl control, rec *record, user engine.Labels) {
	host, addr, ok := g.admit(r.Context(), w, r.Host, true)
	if !ok {
		return
	}
	target, policy := s.targets.Resolve(host)
	if g.intercepts(host) {
		// Each request inside is paced, and its target noted, as an
		// absolute-form request is.
		g.intercept(w, r, rec, &interception{
			host: host, addr: addr, target: target, ctl: ctl, connect: connectJob(target, addr, ctl, policy),
			user: rec.user, userLabels: user, proxyAuth: r.Header.Get("Proxy-Authorization"),
		})
		return
	}
	// A tunnel holds its target's concurrency slot for as long as it lives.
	release, ok := g.admitPace(w, r, rec, s, target)
	if !ok {
		return
	}
	defer release()
	j := connectJob(target, addr, ctl, policy)
	win, last, attempts, hedges, err := g.run(r.Context(), s, j)
	rec.waited = j.waited
	switch {
	case win != nil:
		g.tunnelUp(s, host, target, rec, win, attempts, hedges)
		g.tunnel(w, r, rec, win, addr, attempts)
	case last != nil:
		g.respond(w, rec, last, attempts, hedges)
	default:
		acquireError(w, rec, err)
	}
}

// connectJob is the attempt loop's job of building a tunnel to addr. A
// session's bound exit never changes silently (bound), and a session's
// first tunnel binds it, so it is never hedged.
func connectJob(target, addr string, ctl control, policy *target.Policy) *job {
	return &job{
		target:  target,
		ctl:     ctl,
		addr:    addr,
		another: true,
		hedge:   ctl.session == "" && (policy == nil || !policy.NoHedge),
	}
}

// tunnelUp notes a tunnel built: its origin for probes, until an
// absolute-form request names one, the log's fields and the metrics.
func (g *Gateway) tunnelUp(s *settings, host, target string, rec *record, win *outcome, attempts, hedges int) {
	if !s.targets.Known(target) {
		s.targets.NoteOrigin(target, host)
	}
	rec.route, rec.class, rec.attempts, rec.hedges = win.lease.Route, engine.OK, attempts, hedges
	g.observeRequest(rec.method, engine.OK, attempts, hedges, rec.start)
}

// dialTunnel opens a stream to addr through the leased route. A success is
// the caller's to report, when the tunnel shows how it went. An admission
// refusal at connect time, and the gateway's own want of resources, are
// Canceled: they say nothing about the route.
func (g *Gateway) dialTunnel(ctx context.Context, l engine.Lease, x *route.Exit, addr string) *outcome {
	o := &outcome{lease: l}
	start := g.cfg.Now()
	conn, err := x.DialTarget(ctx, addr, &o.progress)
	o.latency = g.cfg.Now().Sub(start)
	o.timeout = o.progress.Timeout()
	if err != nil {
		o.class, _ = route.Classify(err, &o.progress)
		if o.blocked = refusal(err); o.blocked != nil {
			o.class = engine.Canceled
		}
		if o.local = route.LocalReason(err); o.local != "" {
			o.latency = 0
			g.localFailure(o.local, l.Route, err)
		}
		return o
	}
	o.class, o.conn = engine.OK, conn
	return o
}

// tunnel answers the CONNECT and hands the client connection over to a
// splice with the winner's stream to addr.
func (g *Gateway) tunnel(w http.ResponseWriter, r *http.Request, rec *record, win *outcome, addr string, attempts int) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		g.dropTunnel(win)
		fail(w, http.StatusHTTPVersionNotSupported, "bad_request", "switchyard: CONNECT is served over HTTP/1.1 only")
		return
	}
	defer client.Close()
	// The attempt's token, as a relayed answer carries it: a client whose
	// parser finds a ban in the pages inside, which the gateway cannot
	// see, gives its verdict on the tunnel's route×target (feedback.go).
	answer := "HTTP/1.1 200 Connection established\r\n" +
		headerRoute + ": " + win.lease.Route + "\r\n" +
		headerAttempts + ": " + strconv.Itoa(attempts) + "\r\n" +
		headerAttempt + ": " + g.attemptToken(win.lease, g.subExitOf(win.lease, win.exit), rec.user, g.cfg.Now()) + "\r\n"
	if sub := subExitHeader(win); sub != "" {
		answer += headerSubExit + ": " + sub + "\r\n"
	}
	answer += "\r\n"
	if _, err := io.WriteString(client, answer); err != nil {
		g.dropTunnel(win)
		return
	}
	// Logged now, not when the tunnel ends: it may live for hours.
	rec.status = http.StatusOK
	g.logRequest(r.Context(), rec)
	var fromClient io.Reader = client
	if brw.Reader.Buffered() > 0 { // bytes sent right behind the CONNECT
		fromClient = brw.Reader
	}
	g.splice(client, fromClient, win, addr)
}

// dropTunnel closes a tunnel built for a client that is gone: no evidence.
func (g *Gateway) dropTunnel(win *outcome) {
	win.discard()
	g.report(win.lease, engine.Outcome{Class: engine.Canceled, Latency: win.latency})
}

// splice copies between client, read through fromClient, and the winner's
// stream until both directions end. The outcome is reported as soon as it
// is known, so a tunnel that lives for hours does not hold its lease past
// the engine's lease TTL: OK at the first byte from the server (the route
// carried the client to a live target); target_timeout when the client has
// spoken and the server has not answered within the lease's deadline (the
// evidence of a silent exit behind a CONNECT it accepted, or of a silent
// site); target_reset when the server ends its side without a word; and
// Canceled when the client ended its side first and the server never
// spoke (no evidence: the client gave up or had nothing to say). The stall
// watch looks at the tunnel to its end (stall.go); a tunnel it cuts is
// reported Canceled, its exit's failed check being the evidence.
func (g *Gateway) splice(client net.Conn, fromClient io.Reader, win *outcome, addr string) {
	l, upstream := win.lease, win.conn
	var once sync.Once
	report := func(c engine.Class, latency time.Duration) {
		once.Do(func() { g.reportAttempt(win, engine.Outcome{Class: c, Latency: latency}) })
	}
	defer report(engine.Canceled, win.latency) // every other path, panics included
	defer win.discard()
	watched := g.watchTunnel(win, addr, func() {
		report(engine.Canceled, win.latency)
		client.Close()
		upstream.Close()
	})
	if watched != nil {
		defer g.forgetTunnel(watched)
	}

	// Which side ended first decides the outcome of a silent tunnel. One
	// goroutine besides this one: each copy blocks (in the kernel, when
	// it splices).
	const clientFirst, serverFirst = 1, 2
	var first atomic.Int32
	var silence *time.Timer // owner: the client's copier, then (after up) this goroutine
	up := make(chan struct{})
	var sent int64
	go func() {
		defer close(up)
		spoke := func() {
			if l.Deadline > 0 {
				silence = time.AfterFunc(l.Deadline, func() { report(engine.TargetTimeout, l.Deadline) })
			}
		}
		var err error
		if watched == nil {
			sent, _, err = pipe(upstream, fromClient, client, spoke)
		} else {
			sent, err = relayWatched(upstream, fromClient, func(n int) {
				if spoke != nil {
					spoke()
					spoke = nil
				}
				watched.clientSpoke(n)
			})
		}
		first.CompareAndSwap(0, clientFirst)
		endWrite(upstream, err)
	}()
	received, _, err := pipe(client, upstream, upstream, func() { report(engine.OK, win.latency) })
	if first.CompareAndSwap(0, serverFirst) {
		report(engine.TargetReset, win.latency) // a no-op if the server spoke
	}
	endWrite(client, err)
	<-up
	g.charge(l.Route, 0, sent+received)
	if silence != nil {
		silence.Stop()
	}
	// Here the deferred report is Canceled: the client ended its side
	// before the server said anything.
}

// pipe copies src, a reader of the connection from, to dst until src ends,
// calling spoke once the first bytes are in, before they are written. Those,
// and whatever src still holds buffered (bytes behind the CONNECT in the
// server's reader, a target's first words read with the proxy's answer),
// are copied by hand; the rest, when both ends are TCP connections or
// wrappers that hand theirs over (tcpConn), goes by io.Copy between the
// two *net.TCPConn, which Linux splices in the kernel: no copy through
// user space, no buffer. Otherwise (a TLS connection to an HTTPS proxy)
// it goes through a pooled buffer. It reports the bytes copied, whether it
// spliced, and the error that ended the copy, nil at src's end.
func pipe(dst net.Conn, src io.Reader, from net.Conn, spoke func()) (copied int64, spliced bool, err error) {
	bp := relayBuffers.Get().(*[]byte)
	defer func() {
		if bp != nil {
			relayBuffers.Put(bp)
		}
	}()
	buf := *bp
	for spoke != nil || buffered(src) > 0 {
		n, err := src.Read(buf)
		if n > 0 {
			if spoke != nil {
				spoke()
				spoke = nil
			}
			w, err := dst.Write(buf[:n])
			copied += int64(w)
			if err != nil {
				return copied, false, err
			}
		}
		switch {
		case err == io.EOF:
			return copied, false, nil
		case err != nil:
			return copied, false, err
		}
	}
	if r, w := tcpConn(from), tcpConn(dst); r != nil && w != nil {
		relayBuffers.Put(bp)
		bp = nil
		n, err := io.Copy(w, r)
		return copied + n, true, err
	}
	// Both hidden, so that neither side's ReadFrom or WriteTo brings a
	// buffer of its own.
	n, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
	return copied + n, false, err
}

// buffered is how many bytes r holds read ahead of its connection, to be
// read through r before the connection itself.
func buffered(r io.Reader) int {
	if b, ok := r.(interface{ Buffered() int }); ok {
		return b.Buffered()
	}
	return 0
}

// tcpConn is the TCP connection c is, or that a wrapper adding nothing
// to its bytes hands over (the server's client connections, route's
// tunnels that held a target's first bytes: TCPConn), or nil.
func tcpConn(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case interface{ TCPConn() *net.TCPConn }:
		return c.TCPConn()
	}
	return nil
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

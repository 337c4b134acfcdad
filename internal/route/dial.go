package route

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/proxy"

	"github.com/switchyard/switchyard/engine"
)

// Timeouts bounds each phase of reaching a target, so that an exit that is
// down (dial) and one that accepts but stalls (handshake) fail at known
// times. Zero or negative fields get the defaults: Dial 5s, Handshake 5s.
type Timeouts struct {
	Dial      time.Duration // TCP connect to the proxy, or to the target for Direct
	Handshake time.Duration // TLS to an HTTPS proxy, SOCKS5 negotiation, the CONNECT exchange
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Dial <= 0 {
		t.Dial = 5 * time.Second
	}
	if t.Handshake <= 0 {
		t.Handshake = 5 * time.Second
	}
	return t
}

// Dialer is how an Exit reaches out: how long each phase may take, which
// roots an HTTPS proxy is verified against, and the connect-time admission
// of Direct routes.
type Dialer struct {
	Timeouts Timeouts
	TLS      *tls.Config // roots for HTTPS proxies; nil means the system's
	// Control, when set, gives the net.Dialer Control of a Direct route's
	// connection to host (the target's name as asked for, without port): it
	// sees each address the name resolved to and may refuse it (SSRF
	// admission); a nil Control checks nothing, as for an allow-listed
	// host. Proxies are dialled without it: they resolve the target
	// themselves.
	Control func(host string) func(network, address string, c syscall.RawConn) error
	// Resolver looks up the targets of Direct routes; nil means the
	// system's. The gateway's admission resolves with the same one, so a
	// name reads alike at both checks.
	Resolver *net.Resolver
	// TargetTLS holds the roots sites fetched over https:// through an
	// exit are verified against (Exit.RoundTrip); nil means the system's.
	TargetTLS *tls.Config
	// Upstream is what the exits dialling alike share: the connections
	// kept for the next request, idle ones capped across routes, and the
	// cap on those open at once. nil gives the exits made with this
	// Dialer (one NewExit, or a Set's) one of their own, without a cap.
	Upstream *Upstream
}

// dialTarget opens a byte stream to addr through the exit; see DialTarget.
func (x *Exit) dialTarget(ctx context.Context, addr string) (net.Conn, error) {
	// addr goes verbatim into the CONNECT request line and Host header:
	// no spaces or control bytes that could split them.
	host, _, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsFunc(addr, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return nil, fmt.Errorf("route %s: invalid target address %q", x.route.ID, addr)
	}
	if x.route.Scheme != Direct {
		return x.negotiate(ctx, func(ctx context.Context, conn net.Conn) (net.Conn, error) {
			return x.handshake(ctx, conn, addr)
		})
	}
	nd := net.Dialer{Timeout: x.dialer.Timeouts.Dial, Resolver: x.dialer.Resolver}
	if x.dialer.Control != nil {
		nd.Control = x.dialer.Control(host)
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		err = callerGaveUp(ctx, err)
		return nil, &Error{Phase: PhaseTarget, Route: x.route.ID, Err: err, Local: localReason(err)}
	}
	return c, nil
}

// dialProxy connects to the route's proxy.
func (x *Exit) dialProxy(ctx context.Context) (net.Conn, error) {
	nd := net.Dialer{Timeout: x.dialer.Timeouts.Dial}
	conn, err := nd.DialContext(ctx, "tcp", x.route.URL.Host)
	if err != nil {
		err = callerGaveUp(ctx, err)
		phase := PhaseDial
		if isTimeout(err) {
			phase = PhaseDialTimeout
		}
		return nil, &Error{Phase: phase, Route: x.route.ID, Err: err, Local: localReason(err)}
	}
	return conn, nil
}

// localReason names the gateway's own resource that a failed dial ran out
// of, "" when err says nothing of the kind: the socket could not be made
// (out of descriptors, per process or system-wide; out of kernel buffers
// or memory) or no local port was left to connect from. None of it is the
// route's doing. The names are the errno's, as the metric's reason label.
func localReason(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	switch errno {
	case syscall.EMFILE:
		return "emfile"
	case syscall.ENFILE:
		return "enfile"
	case syscall.ENOBUFS:
		return "enobufs"
	case syscall.ENOMEM:
		return "enomem"
	case syscall.EADDRNOTAVAIL:
		return "eaddrnotavail"
	}
	return ""
}

// LocalReason is the gateway's own resource that err, an attempt's error,
// says ran out (Error.Local), or "" when err is not such a failure.
func LocalReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Local
	}
	return ""
}

// negotiate connects to the route's proxy and runs step on the connection
// within Timeouts.Handshake: step makes a tunnel of it, or a TLS
// connection to the proxy. Every failure comes back as an *Error.
func (x *Exit) negotiate(ctx context.Context, step func(context.Context, net.Conn) (net.Conn, error)) (net.Conn, error) {
	return x.negotiateWith(ctx, x.dialProxy, step)
}

// negotiateWith is negotiate over the connection dial makes to the proxy.
func (x *Exit) negotiateWith(ctx context.Context, dial func(context.Context) (net.Conn, error), step func(context.Context, net.Conn) (net.Conn, error)) (net.Conn, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, x.dialer.Timeouts.Handshake)
	defer cancel()
	// Cancellation or the handshake timeout cuts any I/O in progress.
	stop := context.AfterFunc(hctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	out, err := step(hctx, conn)
	if !stop() && err == nil {
		// Time ran out just as the step finished: the deadline may
		// already be set on the stream, so it is not usable.
		err = context.Cause(hctx)
	}
	if err == nil {
		return out, nil
	}
	conn.Close()
	var e *Error
	if !errors.As(err, &e) {
		// An I/O failure mid-handshake: say whose clock ran out.
		switch {
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case hctx.Err() != nil:
			err = fmt.Errorf("no answer within %v: %w", x.dialer.Timeouts.Handshake, err)
		}
		e = &Error{Phase: PhaseHandshake, Err: err}
	}
	e.Route = x.route.ID
	return nil, e
}

// handshake turns conn, open to the route's proxy, into a tunnel to addr.
// I/O failures come back as they are; answers from the proxy as *Error.
func (x *Exit) handshake(ctx context.Context, conn net.Conn, addr string) (net.Conn, error) {
	if x.route.Scheme == SOCKS5 {
		return socks5(ctx, conn, x.route.URL, addr)
	}
	if x.tls != nil {
		tc, err := x.proxyTLS(ctx, conn)
		if err != nil {
			return nil, err
		}
		conn = tc
	}
	return connect(conn, x.route.URL, addr)
}

// proxyTLS speaks TLS with the route's HTTPS proxy over conn.
func (x *Exit) proxyTLS(ctx context.Context, conn net.Conn) (net.Conn, error) {
	tc := tls.Client(conn, x.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// proxyTLSConfig is the client config for TLS to an HTTPS proxy: base's
// roots, the name to verify from the route's URL (base may serve many
// routes), and no ALPN, since the proxy is spoken to in HTTP/1.1.
func proxyTLSConfig(base *tls.Config, host string) *tls.Config {
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.ServerName = host
	cfg.NextProtos = nil
	return cfg
}

// connect asks an HTTP proxy for a tunnel to addr (RFC 9110 §9.3.6).
func connect(conn net.Conn, proxyURL *url.URL, addr string) (net.Conn, error) {
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if u := proxyURL.User; u != nil {
		pw, _ := u.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, err
	}
	switch code := resp.StatusCode; {
	case code == http.StatusProxyAuthRequired:
		return nil, &Error{Phase: PhaseProxyAuth, Status: code}
	case code < 200 || code > 299:
		return nil, &Error{Phase: PhaseTunnel, Status: code}
	}
	if n := br.Buffered(); n > 0 {
		first, _ := br.Peek(n)
		return &prefixConn{Conn: conn, prefix: first}, nil
	}
	return conn, nil
}

// prefixConn first yields the bytes that arrived with the proxy's CONNECT
// answer and were buffered while reading it: a target that speaks first
// (SMTP, SSH banners) would otherwise lose its opening bytes.
type prefixConn struct {
	net.Conn
	prefix []byte // owner: the reader of the conn
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Buffered is how many of the target's first bytes are still to be read
// through c, before the connection beneath. Only the reader may ask.
func (c *prefixConn) Buffered() int { return len(c.prefix) }

// TCPConn is the TCP connection beneath c, or nil when it is another kind
// (TLS to an HTTPS proxy). Writing to it is writing to c; reading from it
// skips what Buffered counts. The gateway's tunnels copy between TCP
// connections so that the kernel splices them.
func (c *prefixConn) TCPConn() *net.TCPConn {
	tc, _ := c.Conn.(*net.TCPConn)
	return tc
}

// CloseWrite half-closes the connection beneath where it can (TCP; TLS
// sends its close_notify), as for a tunnel without a buffered start; it
// closes it otherwise.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// socks5 negotiates a CONNECT to addr with a SOCKS5 proxy (RFC 1928),
// authenticating with username/password (RFC 1929) when proxyURL has them.
func socks5(ctx context.Context, conn net.Conn, proxyURL *url.URL, addr string) (net.Conn, error) {
	var auth *proxy.Auth
	if u := proxyURL.User; u != nil {
		pw, _ := u.Password()
		auth = &proxy.Auth{User: u.Username(), Password: pw}
	}
	rec := &socksRecorder{Conn: conn}
	d, _ := proxy.SOCKS5("tcp", proxyURL.Host, auth, connDialer{rec}) // never fails
	if _, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", addr); err != nil {
		if e := rec.refusal(); e != nil {
			e.Err = err
			return nil, e
		}
		return nil, err
	}
	// x/net reads exactly the handshake's bytes: nothing of the target's is
	// held in rec, so the stream continues on conn itself.
	return conn, nil
}

// connDialer hands x/net's SOCKS5 client the connection DialTarget already
// opened, so that dialing and negotiating are timed and classified apart.
type connDialer struct{ c net.Conn }

func (d connDialer) Dial(string, string) (net.Conn, error) { return d.c, nil }

func (d connDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	return d.c, nil
}

// socksRecorder keeps what a SOCKS5 proxy answered during the handshake.
// x/net reports failures as untyped text, so the proxy's verdict is read
// from its own bytes instead of from the wording of its errors.
type socksRecorder struct {
	net.Conn
	read []byte // owner: the handshake goroutine
}

func (c *socksRecorder) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read = append(c.read, p[:n]...)
	return n, err
}

// refusal is the proxy's refusal among the answers recorded, if it made
// one: method choice (RFC 1928 §3), auth status (RFC 1929 §2), then the
// CONNECT reply (RFC 1928 §6). It is nil when the proxy did not answer as
// SOCKS5 (garbage, an early end, a command or address type it does not
// support): the handshake itself broke.
func (c *socksRecorder) refusal() *Error {
	b := c.read
	if len(b) < 2 || b[0] != 5 {
		return nil
	}
	method, b := b[1], b[2:]
	switch method {
	case 0xff: // no acceptable method: the proxy wants credentials we lack
		return &Error{Phase: PhaseProxyAuth}
	case 0x02: // username/password, answered VER STATUS
		if len(b) < 2 {
			return nil
		}
		if b[1] != 0 {
			return &Error{Phase: PhaseProxyAuth}
		}
		b = b[2:]
	}
	if len(b) < 2 || b[0] != 5 {
		return nil
	}
	switch rep := b[1]; rep {
	case socksGeneralFailure, socksNotAllowed, socksNetUnreachable, socksHostUnreachable, socksRefused, socksTTLExpired:
		return &Error{Phase: PhaseTunnel, Reply: rep}
	}
	return nil
}

// The SOCKS5 replies (RFC 1928 §6) that are the proxy's verdict on the
// target; the others (succeeded, command or address type not supported,
// unassigned) say nothing about it.
const (
	socksGeneralFailure  = 0x01
	socksNotAllowed      = 0x02 // connection not allowed by ruleset
	socksNetUnreachable  = 0x03
	socksHostUnreachable = 0x04
	socksRefused         = 0x05
	socksTTLExpired      = 0x06
)

// Error says where reaching a target through a route failed, so that the
// attempt can be classified (Classify) and a retry decided.
type Error struct {
	Phase  Phase  // where it failed
	Status int    // the proxy's HTTP answer (to CONNECT, or a 407 to a forwarded request), for PhaseProxyAuth and PhaseTunnel; 0 otherwise
	Reply  byte   // the SOCKS5 proxy's reply code (RFC 1928 §6), for PhaseTunnel; 0 otherwise
	Route  string // route id: never holds credentials
	Err    error  // cause; nil when Status says it all. Never holds credentials.
	// Forwarded is set for the proxy's 407 to a forwarded request: nothing
	// in the answer proves the proxy passed nothing on, so bytes of the
	// request may have reached the target.
	Forwarded bool
	// Local names the gateway's own resource that ran out before anything
	// left it ("emfile", "enfile", "enobufs", "enomem", "eaddrnotavail",
	// or a cap of the gateway's own), "" otherwise. Such a failure is the
	// gateway's fault, not the route's: Class is Canceled, no evidence.
	Local string
}

// Phase is the step of reaching a target that failed.
type Phase uint8

// The phases, in the order DialTarget goes through them.
const (
	PhaseDial        Phase = iota // the proxy could not be reached: refused, unreachable, its name did not resolve
	PhaseDialTimeout              // connecting to the proxy took longer than Timeouts.Dial or ctx allowed
	PhaseHandshake                // TLS to an HTTPS proxy, SOCKS5 negotiation or the CONNECT exchange failed or stalled
	PhaseProxyAuth                // the proxy rejected the credentials: 407, or SOCKS5 authentication refused
	PhaseTunnel                   // the proxy refused or could not build the tunnel to this target
	PhaseTarget                   // Direct route: the target itself could not be reached
	PhaseTargetTLS                // TLS with the target through the route failed: its certificate or handshake
)

var phaseNames = [...]string{
	PhaseDial:        "dial",
	PhaseDialTimeout: "dial timeout",
	PhaseHandshake:   "handshake",
	PhaseProxyAuth:   "proxy auth",
	PhaseTunnel:      "tunnel",
	PhaseTarget:      "target",
	PhaseTargetTLS:   "TLS with the target",
}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Error reads "route <id>: <phase>: <cause>", with "proxy answered
// <status>" as the cause when the proxy's HTTP answer says it all.
func (e *Error) Error() string {
	msg := "route " + e.Route + ": " + e.Phase.String()
	if e.Local != "" {
		msg += ": the gateway is out of local resources (" + e.Local + ")"
	}
	if e.Status != 0 {
		msg += ": proxy answered " + strconv.Itoa(e.Status)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Class maps the failure to the engine's outcome class, by the layer that
// failed. The caller giving up, and the gateway running out of its own
// resources (Local), are Canceled whatever the phase: no evidence either
// way. Otherwise:
//
//	PhaseDial        proxy_connect_failed
//	PhaseDialTimeout proxy_timeout
//	PhaseHandshake   proxy_timeout when it stalled (the exit accepted and went quiet);
//	                 proxy_connect_failed when it broke (a bad TLS certificate, garbage
//	                 or a closed connection instead of an answer, a SOCKS5 command or
//	                 address type the proxy does not support): the exit is unusable
//	PhaseProxyAuth   proxy_auth
//	PhaseTunnel      blocked when the proxy refused this target (CONNECT 403, SOCKS5
//	                 "not allowed by ruleset"); tunnel_failed when it could not reach
//	                 it (any other status, a SOCKS5 failure, unreachable, refused or
//	                 TTL reply): both about this target through this exit
//	PhaseTarget      dns_failed, target_timeout, or target_reset for refused and
//	                 unreachable: a Direct route has no exit of its own to blame,
//	                 so the evidence is about the target (route×target scope).
//	PhaseTargetTLS   tls_failed: the site's certificate or handshake, through this
//	                 route; nothing of the request went out.
func (e *Error) Class() engine.Class {
	if e.Local != "" || errors.Is(e.Err, context.Canceled) {
		return engine.Canceled
	}
	switch e.Phase {
	case PhaseDialTimeout:
		return engine.ProxyTimeout
	case PhaseHandshake:
		if isTimeout(e.Err) {
			return engine.ProxyTimeout
		}
		return engine.ProxyConnectFailed
	case PhaseProxyAuth:
		return engine.ProxyAuth
	case PhaseTunnel:
		if e.Status == http.StatusForbidden || e.Reply == socksNotAllowed {
			return engine.Blocked
		}
		return engine.TunnelFailed
	case PhaseTargetTLS:
		return engine.TLSFailed
	case PhaseTarget:
		var dns *net.DNSError
		switch {
		case errors.As(e.Err, &dns):
			return engine.DNSFailed
		case isTimeout(e.Err):
			return engine.TargetTimeout
		}
		return engine.TargetReset
	}
	return engine.ProxyConnectFailed
}

// NeverLeft reports whether nothing of the caller's can have reached the
// target, so that the attempt is safe to retry on another route whatever
// the request's method (docs/design/007-attempts.md). It holds for every
// Error but a Forwarded 407: an Exit fails with one before the stream to
// the target exists, or when a proxy refused to build it.
func (e *Error) NeverLeft() bool { return !e.Forwarded }

// callerGaveUp replaces err by the cause of ctx's end when the caller's
// context ended, so the outcome reads Canceled (or a timeout) rather than
// a network error.
func callerGaveUp(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

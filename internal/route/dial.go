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

// DialTarget opens a byte stream to addr ("host:port") through r: directly
// (Direct), through an HTTP CONNECT tunnel (HTTP; HTTPS speaks TLS to the
// proxy first, verifying its certificate against tlsConfig's roots, or the
// system's when tlsConfig is nil), or through SOCKS5, which resolves names
// at the proxy. Credentials in r.URL are sent as Proxy-Authorization: Basic
// (HTTP, HTTPS) or SOCKS5 username/password.
//
// ctx bounds the whole call and t each phase. Every failure to reach the
// target through r is an *Error; a malformed addr or a route that cannot be
// dialled (unknown scheme, no URL) is a plain error.
func DialTarget(ctx context.Context, r *Route, addr string, t Timeouts, tlsConfig *tls.Config) (net.Conn, error) {
	return Dialer{Timeouts: t, TLS: tlsConfig}.DialTarget(ctx, r, addr)
}

// Dialer is DialTarget with every setting named, for callers that need
// more than timeouts and TLS roots.
type Dialer struct {
	Timeouts Timeouts
	TLS      *tls.Config // roots for HTTPS proxies; nil means the system's
	// Control, when set, is the net.Dialer Control of Direct routes only:
	// it sees each address the target resolved to and may refuse it (SSRF
	// admission). Proxies are dialled without it; they resolve the target
	// themselves.
	Control func(network, address string, c syscall.RawConn) error
}

// DialTarget is the package's DialTarget with d's settings.
func (d Dialer) DialTarget(ctx context.Context, r *Route, addr string) (net.Conn, error) {
	t, tlsConfig := d.Timeouts, d.TLS
	// addr goes verbatim into the CONNECT request line and Host header:
	// no spaces or control bytes that could split them.
	if _, _, err := net.SplitHostPort(addr); err != nil || strings.ContainsFunc(addr, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return nil, fmt.Errorf("route %s: invalid target address %q", r.ID, addr)
	}
	t = t.withDefaults()
	nd := net.Dialer{Timeout: t.Dial}
	if r.Scheme == Direct {
		nd.Control = d.Control
		c, err := nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, &Error{Phase: PhaseTarget, Route: r.ID, Err: callerGaveUp(ctx, err)}
		}
		return c, nil
	}
	switch {
	case r.URL == nil:
		return nil, fmt.Errorf("route %s: %s route without a proxy address", r.ID, r.Scheme)
	case r.Scheme != HTTP && r.Scheme != HTTPS && r.Scheme != SOCKS5:
		return nil, fmt.Errorf("route %s: cannot dial scheme %q", r.ID, r.Scheme)
	}

	conn, err := nd.DialContext(ctx, "tcp", r.URL.Host)
	if err != nil {
		err = callerGaveUp(ctx, err)
		phase := PhaseDial
		if isTimeout(err) {
			phase = PhaseDialTimeout
		}
		return nil, &Error{Phase: phase, Route: r.ID, Err: err}
	}

	hctx, cancel := context.WithTimeout(ctx, t.Handshake)
	defer cancel()
	// Cancellation or the handshake timeout cuts any I/O in progress.
	stop := context.AfterFunc(hctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	tunnel, err := handshake(hctx, conn, r, addr, tlsConfig)
	if !stop() && err == nil {
		// Time ran out just as the handshake finished: the deadline may
		// already be set on the stream, so it is not usable.
		err = hctx.Err()
	}
	if err == nil {
		return tunnel, nil
	}
	conn.Close()
	var e *Error
	if !errors.As(err, &e) {
		// An I/O failure mid-handshake: say whose clock ran out.
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case hctx.Err() != nil:
			err = fmt.Errorf("no answer within %v: %w", t.Handshake, err)
		}
		e = &Error{Phase: PhaseHandshake, Err: err}
	}
	e.Route = r.ID
	return nil, e
}

// handshake turns conn, open to r's proxy, into a tunnel to addr. I/O
// failures come back as they are; answers from the proxy as *Error.
func handshake(ctx context.Context, conn net.Conn, r *Route, addr string, tlsConfig *tls.Config) (net.Conn, error) {
	if r.Scheme == SOCKS5 {
		return socks5(ctx, conn, r.URL, addr)
	}
	if r.Scheme == HTTPS {
		tc := tls.Client(conn, proxyTLS(tlsConfig, r.URL.Hostname()))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		conn = tc
	}
	return connect(conn, r.URL, addr)
}

// proxyTLS is the client config for TLS to an HTTPS proxy. One config
// serves every route, so the name to verify always comes from the route's
// URL; no ALPN is offered since CONNECT is spoken as HTTP/1.1.
func proxyTLS(base *tls.Config, host string) *tls.Config {
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
		if phase := rec.phase(); phase != PhaseHandshake {
			return nil, &Error{Phase: phase, Err: err}
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
// x/net reports failures as untyped text, so the phase is read from the
// proxy's own bytes instead of from the wording of its errors.
type socksRecorder struct {
	net.Conn
	read []byte // owner: the handshake goroutine
}

func (c *socksRecorder) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read = append(c.read, p[:n]...)
	return n, err
}

// phase says where a failed SOCKS5 handshake stopped, from the answers
// recorded: method choice (RFC 1928 §3), auth status (RFC 1929 §2), then
// the CONNECT reply (RFC 1928 §6).
func (c *socksRecorder) phase() Phase {
	b := c.read
	if len(b) < 2 || b[0] != 5 {
		return PhaseHandshake
	}
	method, b := b[1], b[2:]
	switch method {
	case 0xff: // no acceptable method: the proxy wants credentials we lack
		return PhaseProxyAuth
	case 0x02: // username/password, answered VER STATUS
		if len(b) < 2 {
			return PhaseHandshake
		}
		if b[1] != 0 {
			return PhaseProxyAuth
		}
		b = b[2:]
	}
	if len(b) >= 2 && b[1] != 0 { // VER REP …: the proxy refused or failed the CONNECT
		return PhaseTunnel
	}
	return PhaseHandshake
}

// Error says where reaching a target through a route failed, so that the
// attempt loop can classify the outcome and decide on a retry.
type Error struct {
	Phase  Phase  // where it failed
	Status int    // the proxy's HTTP answer to CONNECT, for PhaseProxyAuth and PhaseTunnel; 0 otherwise
	Route  string // route id: never holds credentials
	Err    error  // cause; nil when Status says it all. Never holds credentials.
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
)

var phaseNames = [...]string{
	PhaseDial:        "dial",
	PhaseDialTimeout: "dial timeout",
	PhaseHandshake:   "handshake",
	PhaseProxyAuth:   "proxy auth",
	PhaseTunnel:      "tunnel",
	PhaseTarget:      "target",
}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Error reads "route <id>: <phase>: <cause>", or "route <id>: proxy
// answered CONNECT with <status>".
func (e *Error) Error() string {
	msg := "route " + e.Route + ": "
	if e.Status != 0 {
		msg += "proxy answered CONNECT with " + strconv.Itoa(e.Status)
	} else {
		msg += e.Phase.String()
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Class maps the failure to the engine's outcome class. The caller giving
// up is Canceled whatever the phase. Otherwise:
//
//	PhaseDial        proxy_connect_failed
//	PhaseDialTimeout proxy_timeout
//	PhaseHandshake   proxy_timeout when it stalled (the exit accepted and went quiet);
//	                 tunnel_failed when the proxy broke it (bad TLS certificate,
//	                 garbage or a closed connection instead of an answer)
//	PhaseProxyAuth   proxy_auth
//	PhaseTunnel      tunnel_failed, even for a 403 naming one host: the proxy,
//	                 not the site, refused
//	PhaseTarget      dns_failed, target_timeout, or target_reset for refused and
//	                 unreachable: a Direct route has no exit of its own to blame,
//	                 so the evidence is about the target (route×target scope).
func (e *Error) Class() engine.Class {
	if errors.Is(e.Err, context.Canceled) {
		return engine.Canceled
	}
	switch e.Phase {
	case PhaseDialTimeout:
		return engine.ProxyTimeout
	case PhaseHandshake:
		if isTimeout(e.Err) {
			return engine.ProxyTimeout
		}
		return engine.TunnelFailed
	case PhaseProxyAuth:
		return engine.ProxyAuth
	case PhaseTunnel:
		return engine.TunnelFailed
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
// target. It is true of every Error: DialTarget fails only before the
// stream exists, and a tunnel not yet built carried no bytes, so the
// connect phase is always safe to retry on another route, whatever the
// request's method (SPEC §2.4).
func (e *Error) NeverLeft() bool { return true }

// Classify maps an error from reaching a target to its outcome class: an
// *Error anywhere in the chain by its Class, the caller's context by
// Canceled or ProxyTimeout, nil by OK, and anything else as the exit
// failing to connect.
func Classify(err error) engine.Class {
	var e *Error
	switch {
	case err == nil:
		return engine.OK
	case errors.As(err, &e):
		return e.Class()
	case errors.Is(err, context.Canceled):
		return engine.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return engine.ProxyTimeout
	}
	return engine.ProxyConnectFailed
}

// callerGaveUp replaces err by ctx's error when the caller's context ended,
// so the outcome reads Canceled (or a timeout) rather than a network error.
func callerGaveUp(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

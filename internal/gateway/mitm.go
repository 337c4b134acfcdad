package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/target"
)

// TLS interception (docs/design/012-mitm.md). With MITM set, the gateway
// answers a CONNECT itself, terminates the client's TLS with a leaf the
// local CA mints for the CONNECT's host, and serves every request inside
// as it serves an absolute-form one: through the attempt loop, each
// attempt a tunnel through its route and TLS to the site, verified. What
// a plain tunnel hides (a 403, a 429's Retry-After, a captcha page, a 5xx)
// becomes evidence, and the request can be retried on another route.

// MITM configures TLS interception.
type MITM struct {
	// Authority mints the certificates clients are shown.
	Authority *mitm.Authority
	// Only, when not empty, are the host patterns ("example.com",
	// "*.example.com", "*") whose tunnels are intercepted; every other
	// tunnel stays plain.
	Only []string
	// Bypass are host patterns whose tunnels stay plain: pinned apps,
	// banks. It wins over Only.
	Bypass []string
	// HandshakeTimeout bounds a client's TLS handshake, from the CONNECT's
	// answer; IdleTimeout closes an intercepted connection idle this long
	// between requests. The config gives them [server]'s header_timeout
	// and idle_timeout; zero means none.
	HandshakeTimeout, IdleTimeout time.Duration
}

// mitmProtos are what an intercepted client is offered: HTTP/2 first, as
// a site would.
var mitmProtos = []string{"h2", "http/1.1"}

// recordTypeHandshake starts every TLS connection's first record (RFC
// 8446 §5.1): a CONNECT whose client sends anything else is not TLS.
const recordTypeHandshake = 0x16

// interception is what an intercepted CONNECT settled for every request
// inside: where they go, who asked and what they asked for.
type interception struct {
	host, addr string // the CONNECT's host and host:port, as admitted
	target     string
	ctl        control
	connect    *job // the plain tunnel, for a client that does not speak TLS
	user       string
	userLabels engine.Labels
	// proxyAuth is the CONNECT's Proxy-Authorization, which may carry a
	// session and labels in its username: they steer every request
	// inside, as they would the tunnel. A secret: never logged.
	proxyAuth string
}

type interceptionKey struct{}

// newInterceptor is the server that intercepted connections are handed
// to, one at a time (intercept); nil without MITM.
func (g *Gateway) newInterceptor() *http.Server {
	m := g.cfg.MITM
	if m == nil {
		return nil
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(g.serveIntercepted),
		ReadHeaderTimeout: m.HandshakeTimeout,
		IdleTimeout:       m.IdleTimeout,
		BaseContext:       func(l net.Listener) context.Context { return l.(*handOver).ctx },
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
	if g.cfg.Log != nil {
		srv.ErrorLog = slog.NewLogLogger(g.cfg.Log.Handler(), slog.LevelWarn)
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	return srv
}

// intercepts reports whether a CONNECT to host is intercepted.
func (g *Gateway) intercepts(host string) bool {
	return g.interceptor != nil && (g.only == nil || g.only.Matches(host)) && (g.bypass == nil || !g.bypass.Matches(host))
}

// intercept answers the CONNECT and, once the client's TLS handshake is
// done, hands the connection to the interceptor, which serves it in its own
// goroutine until it closes. A client that does not start with a TLS
// handshake gets a plain tunnel through the attempt loop instead; having
// been told 200 already, a client whose tunnel cannot be built is told by
// its connection closing.
func (g *Gateway) intercept(w http.ResponseWriter, r *http.Request, rec *record, in *interception) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		fail(w, http.StatusHTTPVersionNotSupported, "bad_request", "switchyard: CONNECT is served over HTTP/1.1 only")
		return
	}
	handed := false
	defer func() {
		if !handed {
			client.Close()
		}
	}()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	rec.status, rec.intercepted = http.StatusOK, true
	g.logRequest(r.Context(), rec)

	m := g.cfg.MITM
	if m.HandshakeTimeout > 0 {
		client.SetReadDeadline(time.Now().Add(m.HandshakeTimeout))
	}
	first, err := brw.Reader.Peek(1)
	if err != nil {
		return
	}
	conn := &readAhead{Conn: client, r: brw.Reader}
	if first[0] != recordTypeHandshake {
		client.SetReadDeadline(time.Time{})
		g.plainTunnel(r.Context(), conn, brw.Reader, rec, in)
		return
	}
	tc := tls.Server(conn, &tls.Config{
		NextProtos: mitmProtos,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			// The certificate names what the CONNECT named, where the
			// requests go: a client naming another host in its SNI is
			// refused rather than shown a certificate for a host it is
			// not talking to.
			if sni := hello.ServerName; sni != "" && !strings.EqualFold(strings.TrimSuffix(sni, "."), in.host) {
				return nil, fmt.Errorf("SNI %q is not the CONNECT's host %q", sni, in.host)
			}
			return m.Authority.Leaf(in.host)
		},
	})
	if err := tc.HandshakeContext(r.Context()); err != nil {
		// Most often a client that does not trust the CA yet.
		if g.cfg.Log != nil {
			g.cfg.Log.LogAttrs(r.Context(), slog.LevelWarn, "mitm: TLS handshake with the client failed",
				slog.String("host", clip(in.host, maxLogField)), slog.String("err", err.Error()))
		}
		return
	}
	client.SetReadDeadline(time.Time{})
	handed = true
	g.interceptor.Serve(&handOver{conn: tc, ctx: context.WithValue(context.Background(), interceptionKey{}, in)})
}

// plainTunnel builds a tunnel for an intercepted CONNECT whose client
// speaks something other than TLS, paced as a tunnel is.
func (g *Gateway) plainTunnel(ctx context.Context, client net.Conn, fromClient io.Reader, rec *record, in *interception) {
	s := g.current.Load()
	release, err := g.pace(ctx, s, in.target)
	if err != nil {
		return
	}
	defer release()
	win, last, attempts, hedges, _ := g.run(ctx, s, in.connect)
	if win == nil {
		if last != nil {
			last.done()
		}
		return
	}
	g.tunnelUp(s, in.host, in.target, rec, win, attempts, hedges)
	g.splice(client, fromClient, win, in.connect.addr)
}

// serveIntercepted serves one request of an intercepted connection as
// ServeHTTP serves an absolute-form one, addressed to the CONNECT's
// authority (not to the request's Host: the client's TLS was with that
// host), authenticated by the CONNECT.
func (g *Gateway) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	in := r.Context().Value(interceptionKey{}).(*interception)
	r.URL.Scheme, r.URL.Host = "https", in.addr
	if port := r.URL.Port(); port == "443" {
		r.URL.Host = strings.TrimSuffix(in.addr, ":443")
	}
	s := g.current.Load()
	w, rec := g.begin(w, r, s)
	defer g.logRequest(r.Context(), rec)
	rec.user, rec.intercepted = in.user, true
	if in.proxyAuth != "" {
		r.Header.Set("Proxy-Authorization", in.proxyAuth)
	} else {
		r.Header.Del("Proxy-Authorization")
	}
	ctl, ok := g.control(w, r, rec, in.userLabels)
	if !ok || g.toNode(w, r, rec, ctl) {
		return
	}
	g.serveForward(w, r, s, ctl, rec)
}

// handOver is a listener of one connection: the interceptor serves it
// (Serve returns at the second Accept, the connection served on in its
// own goroutine).
type handOver struct {
	conn net.Conn
	ctx  context.Context
}

func (h *handOver) Accept() (net.Conn, error) {
	c := h.conn
	if c == nil {
		return nil, net.ErrClosed
	}
	h.conn = nil
	return c, nil
}

func (h *handOver) Close() error   { return nil }
func (h *handOver) Addr() net.Addr { return handOverAddr{} }

type handOverAddr struct{}

func (handOverAddr) Network() string { return "mitm" }
func (handOverAddr) String() string  { return "mitm" }

// readAhead is a connection read through the reader that already holds
// its first bytes.
type readAhead struct {
	net.Conn
	r *bufio.Reader
}

func (c *readAhead) Read(p []byte) (int, error) { return c.r.Read(p) }

// Buffered is what the reader holds ahead of the connection; TCPConn is the
// connection under it, for a splice once that is read (pipe).
func (c *readAhead) Buffered() int         { return c.r.Buffered() }
func (c *readAhead) TCPConn() *net.TCPConn { return tcpConn(c.Conn) }

// hostRules compiles host patterns; nil for none.
func hostRules(hosts []string) *target.Rules {
	if len(hosts) == 0 {
		return nil
	}
	return target.New([]target.Rule{{Hosts: hosts}})
}

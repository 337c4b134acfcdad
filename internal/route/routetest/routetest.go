// Package routetest runs fake upstream proxies on 127.0.0.1 with fault
// profiles, for tests of anything that talks to proxies: dialers, the
// gateway, probes. The proxies behave for real — they tunnel, forward and
// refuse over real sockets — so a test sees what a client of a real proxy
// would. They reach loopback targets only: nothing leaves the machine.
package routetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Kind is the protocol a fake proxy speaks.
type Kind uint8

// The kinds of proxy.
const (
	HTTPProxy   Kind = iota // HTTP: CONNECT tunnels and absolute-form requests
	SOCKS5Proxy             // SOCKS5 (RFC 1928), CONNECT only, optional username/password (RFC 1929)
)

// Behavior is a proxy's fault profile. The zero value is a healthy HTTP
// proxy without authentication. Target hosts are names or IPs without
// port, matched without regard to case.
type Behavior struct {
	User, Password string          // required Proxy-Authorization Basic (HTTP) or SOCKS5 username/password; empty User = no auth
	Kind           Kind            // HTTPProxy (default) or SOCKS5Proxy
	TLS            bool            // HTTPProxy only: speak TLS (an "https" proxy) with a fresh self-signed certificate; see CertPool
	Refuse         bool            // nothing listens: the URL points at a ClosedPort, so connecting is refused
	Blackhole      bool            // accept connections and never answer, not even a TLS handshake
	Answer407      bool            // answer every request and CONNECT with 407; SOCKS5: accept no authentication method
	BlockHosts     []string        // target hosts refused: 403 (HTTP) or reply "not allowed by ruleset" (SOCKS5)
	HostStatus     map[string]int  // HTTPProxy: target host → the status CONNECTs and requests for it are answered with instead
	HostReply      map[string]byte // SOCKS5Proxy: target host → the reply code (RFC 1928 §6) its CONNECTs get instead
	Hangup         bool            // close each connection once the request (SOCKS5: the greeting) is read, without a word
	Garbage        bool            // answer each request (SOCKS5: the greeting) with bytes of no protocol at all
	Silent         bool            // read each request (SOCKS5: the CONNECT request, after the greeting) and never answer it
	SSLPortsOnly   bool            // HTTPProxy: answer CONNECT to any port but 443 with 403, before looking at credentials (Squid's default rules)
	KeepAlive      bool            // HTTPProxy: serve further absolute-form requests on a connection whose request was forwarded, as real proxies do (benchmarks)
	Hangable       bool            // HTTPProxy: copy tunnels through user space, so that Hang stops the ones under way too (else they splice in the kernel, as benchmarks want)
	// Received, when set, is called with each HTTP request once it is
	// read, before it is answered (or, Silent, not): a test that must act
	// while an attempt is surely under way.
	Received func()
}

// Proxy is a fake upstream proxy on 127.0.0.1 with a fault profile. It
// serves one request or tunnel per connection (answers say Connection:
// close), which every HTTP/1.1 client handles, unless Behavior.KeepAlive.
type Proxy struct {
	URL *url.URL // scheme http, https or socks5; with the credentials when Behavior.User is set

	// Immutable after Start.
	b    Behavior
	srv  *server         // nil when Refuse
	tls  *tls.Config     // server side, when TLS
	pool *x509.CertPool  // trusts the proxy's certificate, when TLS
	tr   *http.Transport // forwards absolute-form requests

	release   func() // frees the ClosedPort of a Refuse proxy
	closeOnce sync.Once

	requests atomic.Int64
	checks   atomic.Int64
	asked    askLog
	hung     atomic.Bool // Hang
}

// NewProxy starts a proxy with behaviour b. It is closed by t.Cleanup,
// which cuts every connection through it and waits for its goroutines.
func NewProxy(t testing.TB, b Behavior) *Proxy {
	t.Helper()
	p, err := Start(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Start starts a proxy with behaviour b outside a test (a demo, a tool).
// The caller must Close it.
func Start(b Behavior) (*Proxy, error) {
	if b.TLS && b.Kind != HTTPProxy {
		return nil, errors.New("routetest: TLS is for HTTP proxies only")
	}
	p := &Proxy{b: b, URL: &url.URL{Scheme: "http"}}
	switch {
	case b.Kind == SOCKS5Proxy:
		p.URL.Scheme = "socks5"
	case b.TLS:
		p.URL.Scheme = "https"
	}
	if b.User != "" {
		p.URL.User = url.UserPassword(b.User, b.Password)
	}
	if b.Refuse {
		addr, release, err := closedPort()
		if err != nil {
			return nil, err
		}
		p.URL.Host = addr
		p.release = release
		return p, nil
	}
	srv, err := listen()
	if err != nil {
		return nil, err
	}
	p.srv = srv
	p.URL.Host = p.srv.ln.Addr().String()
	if b.TLS {
		cert, pool, err := selfSigned()
		if err != nil {
			p.srv.ln.Close()
			return nil, err
		}
		p.tls = &tls.Config{Certificates: []tls.Certificate{cert}}
		p.pool = pool
	}
	p.tr = &http.Transport{
		DialContext: p.dialTracked,
		// No idle connections to targets, so that close leaves nothing
		// behind, unless KeepAlive: then Close closes them, and as many
		// are kept as requests are carried at once (net/http keeps 2 a
		// host by default: 64 clients through the proxy would dial the
		// target again for most requests, as no real proxy does).
		DisableKeepAlives:   !b.KeepAlive,
		MaxIdleConnsPerHost: 1024,
	}
	p.srv.start(p.serve)
	return p, nil
}

// Close stops the proxy: it cuts every connection through it and returns
// once its goroutines have. Closing twice is harmless.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		if p.srv != nil {
			p.srv.close()
			p.tr.CloseIdleConnections()
		}
		if p.release != nil {
			p.release()
		}
	})
}

// Hang makes the proxy hang, as a proxy process stuck or an exit's peer
// gone does: from now on it accepts connections and never answers them,
// and, with Behavior.Hangable, the tunnels it carries carry no more bytes
// either way.
func (p *Proxy) Hang() { p.hung.Store(true) }

// Requests is how many requests the proxy has received: HTTP requests
// (CONNECT included) and SOCKS5 sessions, or for a blackhole, connections;
// not the gateway's checks (Checks).
func (p *Proxy) Requests() int { return int(p.requests.Load()) }

// Checks is how many tunnels the proxy was asked for to a name under
// .invalid, which never resolves (RFC 6761): the gateway's neutral check
// of a route before it knows a site. They reach nothing, so neither
// Requests nor Asked counts them (a SOCKS5 session counts as a request
// until its CONNECT names one).
func (p *Proxy) Checks() int { return int(p.checks.Load()) }

// isCheck reports whether a client's target host is one a check names.
func isCheck(host string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), ".invalid")
}

// CertPool trusts the proxy's certificate; nil unless Behavior.TLS.
func (p *Proxy) CertPool() *x509.CertPool { return p.pool }

func (p *Proxy) serve(c net.Conn) {
	switch {
	case p.b.Blackhole || p.hung.Load():
		p.requests.Add(1)
		io.Copy(io.Discard, c) // never answer; returns when close cuts c
	case p.b.Kind == SOCKS5Proxy:
		p.serveSOCKS5(c)
	case p.tls != nil:
		p.serveHTTP(tls.Server(c, p.tls))
	default:
		p.serveHTTP(c)
	}
}

// dialTarget connects to a target on a client's behalf, on loopback only
// (the name localhost or a loopback address, checked again as connected),
// so that no test reaches out of the machine. The connection is tracked,
// so the caller must release it.
func (p *Proxy) dialTarget(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); !strings.EqualFold(host, "localhost") && (err != nil || !ip.IsLoopback()) {
		return nil, errors.New("routetest: refusing a target off loopback: " + host)
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !p.srv.track(c) {
		return nil, net.ErrClosed
	}
	return c, nil
}

// dialTracked is the forwarding transport's dialer: its connections are
// cut by close like any other, and released when the transport closes them.
func (p *Proxy) dialTracked(ctx context.Context, _, addr string) (net.Conn, error) {
	c, err := p.dialTarget(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c, srv: p.srv}, nil
}

// loopbackOnly is a net.Dialer Control refusing any address off loopback.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().IsLoopback() {
		return errors.New("routetest: refusing an address off loopback: " + address)
	}
	return nil
}

// trackedConn releases its connection from the server's set when closed.
type trackedConn struct {
	net.Conn
	srv *server
}

func (c *trackedConn) Close() error {
	c.srv.release(c.Conn)
	return nil
}

func (p *Proxy) blocked(host string) bool {
	for _, h := range p.b.BlockHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// forHost is what m sets for host, if anything.
func forHost[V any](m map[string]V, host string) (V, bool) {
	for h, v := range m {
		if strings.EqualFold(h, host) {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// garbage is what a Garbage proxy answers: no protocol's opening.
const garbage = "SSH-2.0-NotAProxy\r\n\r\n"

func (p *Proxy) serveHTTP(c net.Conn) {
	br := bufio.NewReader(c)
	for p.serveRequest(c, br) && p.b.KeepAlive {
		// the next request on the same connection
	}
}

// serveRequest serves the next request on c, and reports whether the
// connection may serve another: only after a forwarded request.
func (p *Proxy) serveRequest(c net.Conn, br *bufio.Reader) (again bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	if isCheck(req.URL.Hostname()) {
		p.checks.Add(1)
	} else {
		p.requests.Add(1)
		if req.URL.Host != "" {
			p.asked.note(req.URL.Host)
		}
	}
	if p.b.Received != nil {
		p.b.Received()
	}
	status, refused := forHost(p.b.HostStatus, req.URL.Hostname())
	switch {
	case p.b.Hangup:
	case p.b.Garbage:
		io.WriteString(c, garbage)
		io.Copy(io.Discard, br) // until the client gives up
	case p.b.Silent:
		io.Copy(io.Discard, br)
	case p.b.SSLPortsOnly && req.Method == http.MethodConnect && req.URL.Port() != "443":
		answer(c, http.StatusForbidden)
	case p.b.Answer407 || !p.authorized(req.Header.Get("Proxy-Authorization")):
		answer(c, http.StatusProxyAuthRequired)
	case p.blocked(req.URL.Hostname()):
		answer(c, http.StatusForbidden)
	case refused:
		answer(c, status)
	case req.Method == http.MethodConnect:
		p.tunnel(c, br, req.URL.Host)
	case req.URL.IsAbs():
		return p.forward(c, req)
	default:
		answer(c, http.StatusBadRequest)
	}
	return false
}

// authorized checks a Proxy-Authorization header against the configured
// credentials.
func (p *Proxy) authorized(header string) bool {
	if p.b.User == "" {
		return true
	}
	scheme, encoded, _ := strings.Cut(header, " ")
	got, err := base64.StdEncoding.DecodeString(encoded)
	return err == nil && strings.EqualFold(scheme, "Basic") && string(got) == p.b.User+":"+p.b.Password
}

// answer writes a bodiless response; 407 carries the challenge clients
// expect.
func answer(w io.Writer, code int) {
	resp := &http.Response{StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Close: true}
	if code == http.StatusProxyAuthRequired {
		resp.Header.Set("Proxy-Authenticate", `Basic realm="routetest"`)
	}
	resp.Write(w)
}

// tunnel serves CONNECT: dial the target, answer 200, splice. Bytes the
// client sent after its request are already in br and go first.
func (p *Proxy) tunnel(c net.Conn, br *bufio.Reader, addr string) {
	t, err := p.dialTarget(context.Background(), addr)
	if err != nil {
		answer(c, http.StatusBadGateway)
		return
	}
	defer p.srv.release(t)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if p.b.Hangable {
		splice(hangs{c, p}, br, hangs{t, p})
		return
	}
	splice(c, br, t)
}

// hangs is one end of a tunnel that takes bytes and drops them once its
// proxy hangs.
type hangs struct {
	net.Conn
	p *Proxy
}

func (h hangs) Write(b []byte) (int, error) {
	if h.p.hung.Load() {
		return len(b), nil
	}
	return h.Conn.Write(b)
}

func (h hangs) CloseWrite() error {
	closeWrite(h.Conn)
	return nil
}

// hopHeaders are meaningful for one connection only (RFC 9110 §7.6.1):
// never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward serves an absolute-form request by performing it and copying the
// answer back, and reports whether the answer went out whole.
func (p *Proxy) forward(c net.Conn, req *http.Request) bool {
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(req)
	if err != nil {
		answer(c, http.StatusBadGateway)
		return false
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	resp.Close = !p.b.KeepAlive
	// Through a buffer flushed before each read of the body: the head
	// goes out in one write, and a body the target streams still passes
	// on as it comes. Written unbuffered, every piece of every header
	// line was a write(2) of its own: a fifth of the CPU of the gateway's
	// live benchmarks, which count this proxy's with the gateway's.
	// The struct hides bufio.Writer's ReadFrom, which reads the body into
	// the buffer's free space: a flush inside that read would move it.
	bw := bufio.NewWriter(c)
	resp.Body = flushFirst{resp.Body, bw}
	werr := resp.Write(struct{ io.Writer }{bw})
	// What was read of a body that broke off goes out too, as it did
	// unbuffered: the gateway's tests of truncated answers rely on it.
	return bw.Flush() == nil && werr == nil
}

// flushFirst is a body that flushes w before each read.
type flushFirst struct {
	io.ReadCloser
	w *bufio.Writer
}

func (f flushFirst) Read(p []byte) (int, error) {
	if err := f.w.Flush(); err != nil {
		return 0, err
	}
	return f.ReadCloser.Read(p)
}

// SOCKS5 wire values (RFC 1928, RFC 1929).
const (
	socksNoAuth      = 0x00
	socksUserPass    = 0x02
	socksNoMethod    = 0xff
	socksConnect     = 0x01
	socksIPv4        = 0x01
	socksDomain      = 0x03
	socksIPv6        = 0x04
	replyOK          = 0x00
	replyNotAllowed  = 0x02
	replyUnreachable = 0x04
	replyRefused     = 0x05
	replyBadCommand  = 0x07
	replyBadAddrType = 0x08
)

func (p *Proxy) serveSOCKS5(c net.Conn) {
	// Greeting: VER NMETHODS METHODS…
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 5 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	p.requests.Add(1)
	switch {
	case p.b.Hangup:
		return
	case p.b.Garbage:
		io.WriteString(c, garbage)
		io.Copy(io.Discard, c)
		return
	}
	method := byte(socksNoAuth)
	if p.b.User != "" {
		method = socksUserPass
	}
	if p.b.Answer407 || bytes.IndexByte(methods, method) < 0 {
		c.Write([]byte{5, socksNoMethod})
		return
	}
	if _, err := c.Write([]byte{5, method}); err != nil {
		return
	}
	if method == socksUserPass && !p.socksAuth(c) {
		return
	}

	// Request: VER CMD RSV ATYP DST.ADDR DST.PORT
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil {
		return
	}
	if req[1] != socksConnect {
		socksReply(c, replyBadCommand)
		return
	}
	var host string
	switch req[3] {
	case socksIPv4, socksIPv6:
		ip := make([]byte, 4)
		if req[3] == socksIPv6 {
			ip = make([]byte, 16)
		}
		if _, err := io.ReadFull(c, ip); err != nil {
			return
		}
		host = net.IP(ip).String()
	case socksDomain:
		name, err := readShortString(c)
		if err != nil {
			return
		}
		host = name
	default:
		socksReply(c, replyBadAddrType)
		return
	}
	port := make([]byte, 2)
	if _, err := io.ReadFull(c, port); err != nil {
		return
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port[0])<<8|int(port[1])))
	if isCheck(host) {
		p.requests.Add(-1)
		p.checks.Add(1)
	} else {
		p.asked.note(addr)
	}
	if p.b.Silent {
		io.Copy(io.Discard, c)
		return
	}
	if code, ok := forHost(p.b.HostReply, host); ok {
		socksReply(c, code)
		return
	}
	if p.blocked(host) {
		socksReply(c, replyNotAllowed)
		return
	}
	t, err := p.dialTarget(context.Background(), addr)
	if err != nil {
		code := byte(replyUnreachable)
		if errors.Is(err, syscall.ECONNREFUSED) {
			code = replyRefused
		}
		socksReply(c, code)
		return
	}
	defer p.srv.release(t)
	if socksReply(c, replyOK) != nil {
		return
	}
	splice(c, c, t)
}

// socksAuth runs the username/password subnegotiation (RFC 1929).
func (p *Proxy) socksAuth(c net.Conn) bool {
	ver := make([]byte, 1)
	if _, err := io.ReadFull(c, ver); err != nil || ver[0] != 1 {
		return false
	}
	user, err := readShortString(c)
	if err != nil {
		return false
	}
	pass, err := readShortString(c)
	if err != nil {
		return false
	}
	ok := user == p.b.User && pass == p.b.Password
	status := byte(1)
	if ok {
		status = 0
	}
	_, err = c.Write([]byte{1, status})
	return ok && err == nil
}

// readShortString reads a length-prefixed string, as SOCKS5 sends names and
// credentials.
func readShortString(r io.Reader) (string, error) {
	n := make([]byte, 1)
	if _, err := io.ReadFull(r, n); err != nil {
		return "", err
	}
	s := make([]byte, n[0])
	_, err := io.ReadFull(r, s)
	return string(s), err
}

// socksReply answers a SOCKS5 request; the bound address is left zero, as
// clients do not need it for CONNECT.
func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{5, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// splice copies both ways until both directions end. Each end of stream is
// passed on as a half-close, so a client that sends, half-closes and then
// reads still gets its answer.
func splice(c net.Conn, fromClient io.Reader, t net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(t, fromClient)
		closeWrite(t)
	}()
	io.Copy(c, t)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "routetest proxy"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// ServeTCP runs a raw TCP server on 127.0.0.1, handle serving each
// connection, for targets and proxies no fixture models (a target that
// speaks first, a proxy that answers garbage). It is closed by t.Cleanup,
// which closes every connection and waits for the handlers to return.
func ServeTCP(t testing.TB, handle func(c net.Conn)) (addr string) {
	t.Helper()
	s, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	s.start(handle)
	t.Cleanup(s.close)
	return s.ln.Addr().String()
}

// ClosedPort returns an address on 127.0.0.1 where connecting is refused
// for the rest of the test. The port of a closed listener would soon be
// handed to another test's listener; this one is held as the local end of
// a loopback connection, which no listener can bind and nothing listens on.
func ClosedPort(t testing.TB) string {
	t.Helper()
	addr, release, err := closedPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}

// closedPort is ClosedPort without a test: release frees the port.
func closedPort() (addr string, release func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return "", nil, err
	}
	peer, err := ln.Accept()
	if err != nil {
		c.Close()
		return "", nil, err
	}
	release = func() {
		c.Close()
		peer.Close()
	}
	return c.LocalAddr().String(), release, nil
}

// StalledPort returns an address on 127.0.0.1 where connecting hangs until
// the dialer gives up, for dial timeouts: a listener that never accepts
// and whose accept queue is full drops every new connection request. It
// skips the test where the system cannot shorten the queue.
func StalledPort(t testing.TB) string {
	t.Helper()
	addr, release, err := stalledPort()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("routetest: no stalled port on this system")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}

// stalledPort is StalledPort without a test: release frees the port.
func stalledPort() (addr string, release func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var queued []net.Conn
	release = func() {
		for _, c := range queued {
			c.Close()
		}
		ln.Close()
	}
	if err := shortenQueue(ln.(*net.TCPListener)); err != nil {
		release()
		return "", nil, err
	}
	addr = ln.Addr().String()
	// Queue connections until one hangs: the queue is full. A loopback
	// connect that can succeed does so at once, well within the wait.
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return addr, release, nil
		case err != nil:
			release()
			return "", nil, err
		}
		queued = append(queued, c)
	}
	release()
	return "", nil, errors.New("routetest: the accept queue of a stalled port never filled")
}

// server accepts on 127.0.0.1 and serves each connection on its own
// goroutine, tracking every connection (targets dialled for clients too)
// so that close can cut them all.
type server struct {
	ln net.Listener // immutable

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // guarded by mu
	closed bool                  // guarded by mu

	wg sync.WaitGroup // the accept loop and one goroutine per connection
}

func listen() (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &server{ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

func (s *server) start(handle func(net.Conn)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var backoff time.Duration
		for {
			c, err := s.ln.Accept()
			if err != nil && !errors.Is(err, net.ErrClosed) {
				// Out of descriptors (a test that exhausts them, and
				// the connections queued meanwhile): serve on once
				// there are some again, as net/http's server does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			backoff = 0
			if err != nil || !s.track(c) {
				return // closed
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.release(c)
				handle(c)
			}()
		}
	}()
}

// close stops accepting, cuts every open connection and returns once all
// the server's goroutines have.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.ln.Close()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
}

// track registers c to be cut by close. Once the server is closed it
// closes c instead and reports false.
func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// release closes c and forgets it.
func (s *server) release(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// NoLeaks runs f as a subtest and fails t if goroutines started during it
// are still running a moment after it (and its cleanups) ended. It tells
// goroutines apart by identity (go.uber.org/goleak), not by count, so one
// that ended cannot hide one that leaked; but it sees every goroutine of
// the process, so call it only from tests that do not call t.Parallel; f's
// own subtests may.
func NoLeaks(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Run("run", f)
	// Goroutines of closed connections finish just after: allow a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := goleak.Find(before)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines leaked: %v", err)
		}
	}
}

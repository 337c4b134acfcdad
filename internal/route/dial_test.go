package route_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// The credentials every test route carries, distinctive so that finding
// either in any error text cannot be a coincidence.
const (
	user     = "crawler-Qv7acct"
	password = "pw-Xyzzy-7f3a-never-print"
	banner   = "220 target speaks first\r\n"
)

// dialCase is what one test dials: a route, a target address and the TLS
// config for HTTPS proxies.
type dialCase struct {
	r         *route.Route
	addr      string
	tlsConfig *tls.Config
	proxy     *routetest.Proxy // nil unless the route goes through a routetest proxy
}

type setup func(t *testing.T) dialCase

// routeFor is the route the list parser makes of the proxy at u.
func routeFor(t testing.TB, u *url.URL) *route.Route {
	t.Helper()
	routes, err := route.ParseList("routeFor", []byte(u.String()))
	if err != nil {
		t.Fatal(err)
	}
	return &routes[0]
}

// viaProxy dials target through a routetest proxy with behaviour b; the
// route always carries user and password.
func viaProxy(b routetest.Behavior, target func(testing.TB) string) setup {
	return func(t *testing.T) dialCase {
		p := routetest.NewProxy(t, b)
		u := *p.URL
		u.User = url.UserPassword(user, password)
		return dialCase{r: routeFor(t, &u), addr: target(t), tlsConfig: &tls.Config{RootCAs: p.CertPool()}, proxy: p}
	}
}

// viaRaw dials a page target through a proxy on a raw listener whose
// handler plays the proxy's part.
func viaRaw(scheme route.Scheme, handle func(c net.Conn)) setup {
	return func(t *testing.T) dialCase {
		u := &url.URL{Scheme: string(scheme), Host: routetest.ServeTCP(t, handle), User: url.UserPassword(user, password)}
		return dialCase{r: routeFor(t, u), addr: pageTarget(t)}
	}
}

func direct(target func(testing.TB) string) setup {
	return func(t *testing.T) dialCase {
		return dialCase{r: &route.Route{ID: "direct", Scheme: route.Direct}, addr: target(t)}
	}
}

// withoutCredentials strips the route's credentials.
func withoutCredentials(s setup) setup {
	return func(t *testing.T) dialCase {
		d := s(t)
		u := *d.r.URL
		u.User = nil
		d.r = routeFor(t, &u)
		return d
	}
}

// untrusted verifies the proxy's certificate against an empty pool.
func untrusted(s setup) setup {
	return func(t *testing.T) dialCase {
		d := s(t)
		d.tlsConfig = &tls.Config{RootCAs: x509.NewCertPool()}
		return d
	}
}

// pageTarget is a web server answering "hello <path>".
func pageTarget(t testing.TB) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// bannerTarget speaks first, as SMTP and SSH servers do, then echoes.
func bannerTarget(t testing.TB) string {
	return routetest.ServeTCP(t, func(c net.Conn) {
		io.WriteString(c, banner)
		io.Copy(c, c)
	})
}

func blockedHost(testing.TB) string { return "blocked.example:443" }

// dialThrough opens a tunnel to d's target through an Exit of d's route.
func dialThrough(t *testing.T, ctx context.Context, d dialCase, timeouts route.Timeouts) (net.Conn, *route.Progress, error) {
	t.Helper()
	x := newExit(t, d, route.Dialer{Timeouts: timeouts, TLS: d.tlsConfig})
	p := new(route.Progress)
	c, err := x.DialTarget(ctx, d.addr, p)
	return c, p, err
}

// newExit is the Exit of d's route, its idle connections closed with the
// test.
func newExit(t *testing.T, d dialCase, dialer route.Dialer) *route.Exit {
	t.Helper()
	if dialer.Upstream == nil {
		dialer.Upstream = route.NewUpstream(0, 0)
	}
	t.Cleanup(dialer.Upstream.CloseIdleConnections)
	x, err := route.NewExit(d.r, dialer)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func fetchPage(t *testing.T, c net.Conn, addr string) {
	t.Helper()
	fmt.Fprintf(c, "GET /page HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || string(body) != "hello /page" {
		t.Fatalf("got %s %q, want 200 %q", resp.Status, body, "hello /page")
	}
}

// readBanner reads the banner, then checks the stream goes on after it.
func readBanner(t *testing.T, c net.Conn) {
	t.Helper()
	got := make([]byte, len(banner))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != banner {
		t.Fatalf("read %q, %v; want %q", got, err, banner)
	}
	io.WriteString(c, "ping")
	got = got[:4]
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo after the banner: %q, %v", got, err)
	}
}

func TestDialTarget(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		auth := routetest.Behavior{User: user, Password: password}
		tests := []struct {
			desc   string
			setup  setup
			banner bool // the target speaks first
		}{
			{desc: "direct", setup: direct(pageTarget)},
			{desc: "http", setup: viaProxy(routetest.Behavior{}, pageTarget)},
			{desc: "http with auth", setup: viaProxy(auth, pageTarget)},
			{desc: "https", setup: viaProxy(routetest.Behavior{TLS: true}, pageTarget)},
			{desc: "https with auth", setup: viaProxy(routetest.Behavior{TLS: true, User: user, Password: password}, pageTarget)},
			{desc: "socks5", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy}, pageTarget)},
			{desc: "socks5 with auth", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: user, Password: password}, pageTarget)},
			{desc: "direct, target speaks first", setup: direct(bannerTarget), banner: true},
			{desc: "http, target speaks first", setup: viaProxy(routetest.Behavior{}, bannerTarget), banner: true},
			{desc: "https, target speaks first", setup: viaProxy(routetest.Behavior{TLS: true}, bannerTarget), banner: true},
			{desc: "socks5, target speaks first", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy}, bannerTarget), banner: true},
			{
				// The banner arrives in the same segment as the CONNECT
				// answer, so the response reader buffers it: it must not be
				// lost.
				desc: "first bytes buffered with the CONNECT answer",
				setup: viaRaw(route.HTTP, func(c net.Conn) {
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"+banner)
					io.Copy(c, c)
				}),
				banner: true,
			},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				d := tc.setup(t)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, p, err := dialThrough(t, ctx, d, route.Timeouts{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if class, reached := route.Classify(nil, p); class != engine.OK || !reached {
					t.Errorf("Classify(nil) = %v, reached %v; want ok, reached", class, reached)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if tc.banner {
					readBanner(t, c)
				} else {
					fetchPage(t, c, d.addr)
				}
				if d.proxy != nil && d.proxy.Requests() != 1 {
					t.Errorf("proxy saw %d requests, want 1", d.proxy.Requests())
				}
			})
		}
	})
}

func TestDialTargetFailures(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		var (
			short    = route.Timeouts{Dial: time.Second, Handshake: 50 * time.Millisecond}
			canceled = func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx, cancel
			}
			// Cancel while the call is under way (waiting on a blackhole).
			canceledSoon = func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				timer := time.AfterFunc(20*time.Millisecond, cancel)
				return ctx, func() { timer.Stop(); cancel() }
			}
			expired = func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithDeadline(ctx, time.Now().Add(-time.Second))
			}
			garbage = func(c net.Conn) {
				io.WriteString(c, "SSH-2.0-NotAProxy\r\n\r\n")
				io.Copy(io.Discard, c)
			}
		)
		tests := []struct {
			desc     string
			setup    setup
			timeouts route.Timeouts
			ctx      func(context.Context) (context.Context, context.CancelFunc) // nil: 5s from now
			phase    route.Phase
			anyPhase bool // the caller's cancel may land in any phase
			status   int
			reply    byte
			class    engine.Class
		}{
			{desc: "refused proxy", setup: viaProxy(routetest.Behavior{Refuse: true}, pageTarget), phase: route.PhaseDial, class: engine.ProxyConnectFailed},
			{desc: "refused socks5 proxy", setup: viaProxy(routetest.Behavior{Refuse: true, Kind: routetest.SOCKS5Proxy}, pageTarget), phase: route.PhaseDial, class: engine.ProxyConnectFailed},
			{desc: "blackhole proxy", setup: viaProxy(routetest.Behavior{Blackhole: true}, pageTarget), timeouts: short, phase: route.PhaseHandshake, class: engine.ProxyTimeout},
			{desc: "blackhole https proxy", setup: viaProxy(routetest.Behavior{Blackhole: true, TLS: true}, pageTarget), timeouts: short, phase: route.PhaseHandshake, class: engine.ProxyTimeout},
			{desc: "blackhole socks5 proxy", setup: viaProxy(routetest.Behavior{Blackhole: true, Kind: routetest.SOCKS5Proxy}, pageTarget), timeouts: short, phase: route.PhaseHandshake, class: engine.ProxyTimeout},
			{desc: "407", setup: viaProxy(routetest.Behavior{Answer407: true}, pageTarget), phase: route.PhaseProxyAuth, status: 407, class: engine.ProxyAuth},
			{desc: "wrong password", setup: viaProxy(routetest.Behavior{User: user, Password: "other"}, pageTarget), phase: route.PhaseProxyAuth, status: 407, class: engine.ProxyAuth},
			{desc: "no credentials", setup: withoutCredentials(viaProxy(routetest.Behavior{User: user, Password: password}, pageTarget)), phase: route.PhaseProxyAuth, status: 407, class: engine.ProxyAuth},
			{desc: "https proxy, wrong password", setup: viaProxy(routetest.Behavior{TLS: true, User: user, Password: "other"}, pageTarget), phase: route.PhaseProxyAuth, status: 407, class: engine.ProxyAuth},
			{desc: "socks5 wrong password", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: user, Password: "other"}, pageTarget), phase: route.PhaseProxyAuth, class: engine.ProxyAuth},
			{desc: "socks5 no credentials", setup: withoutCredentials(viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: user, Password: password}, pageTarget)), phase: route.PhaseProxyAuth, class: engine.ProxyAuth},
			{desc: "socks5 refuses all auth", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, Answer407: true}, pageTarget), phase: route.PhaseProxyAuth, class: engine.ProxyAuth},
			{desc: "CONNECT to a blocked host", setup: viaProxy(routetest.Behavior{BlockHosts: []string{"blocked.example"}}, blockedHost), phase: route.PhaseTunnel, status: 403, class: engine.Blocked},
			{desc: "CONNECT to a closed port", setup: viaProxy(routetest.Behavior{}, routetest.ClosedPort), phase: route.PhaseTunnel, status: 502, class: engine.TunnelFailed},
			{desc: "socks5 to a blocked host", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, BlockHosts: []string{"blocked.example"}}, blockedHost), phase: route.PhaseTunnel, reply: 2, class: engine.Blocked},
			{desc: "socks5 with auth to a blocked host", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: user, Password: password, BlockHosts: []string{"blocked.example"}}, blockedHost), phase: route.PhaseTunnel, reply: 2, class: engine.Blocked},
			{desc: "socks5 to a closed port", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy}, routetest.ClosedPort), phase: route.PhaseTunnel, reply: 5, class: engine.TunnelFailed},
			{desc: "socks5 command not supported", setup: viaProxy(routetest.Behavior{Kind: routetest.SOCKS5Proxy, HostReply: map[string]byte{"127.0.0.1": 7}}, pageTarget), phase: route.PhaseHandshake, class: engine.ProxyConnectFailed},
			{desc: "https proxy with an untrusted certificate", setup: untrusted(viaProxy(routetest.Behavior{TLS: true}, pageTarget)), phase: route.PhaseHandshake, class: engine.ProxyConnectFailed},
			{desc: "http proxy answers garbage", setup: viaRaw(route.HTTP, garbage), phase: route.PhaseHandshake, class: engine.ProxyConnectFailed},
			{desc: "socks5 proxy answers garbage", setup: viaRaw(route.SOCKS5, garbage), phase: route.PhaseHandshake, class: engine.ProxyConnectFailed},
			{desc: "canceled before the call", setup: viaProxy(routetest.Behavior{}, pageTarget), ctx: canceled, phase: route.PhaseDial, class: engine.Canceled},
			{desc: "canceled during the handshake", setup: viaProxy(routetest.Behavior{Blackhole: true}, pageTarget), ctx: canceledSoon, anyPhase: true, class: engine.Canceled},
			{desc: "canceled during the socks5 handshake", setup: viaProxy(routetest.Behavior{Blackhole: true, Kind: routetest.SOCKS5Proxy}, pageTarget), ctx: canceledSoon, anyPhase: true, class: engine.Canceled},
			{desc: "caller's deadline passed", setup: viaProxy(routetest.Behavior{}, pageTarget), ctx: expired, phase: route.PhaseDialTimeout, class: engine.ProxyTimeout},
			{desc: "direct to a closed port", setup: direct(routetest.ClosedPort), phase: route.PhaseTarget, class: engine.TargetReset},
			{desc: "direct, caller's deadline passed", setup: direct(pageTarget), ctx: expired, phase: route.PhaseTarget, class: engine.TargetTimeout},
			{desc: "direct, canceled", setup: direct(pageTarget), ctx: canceled, phase: route.PhaseTarget, class: engine.Canceled},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				d := tc.setup(t)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if tc.ctx != nil {
					ctx, cancel = tc.ctx(ctx)
				}
				defer cancel()

				start := time.Now()
				c, p, err := dialThrough(t, ctx, d, tc.timeouts)
				if err == nil {
					c.Close()
					t.Fatal("dial succeeded, want an error")
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("failing took %v: a phase is not bounded", took)
				}
				var e *route.Error
				if !errors.As(err, &e) {
					t.Fatalf("error %T %v, want *route.Error", err, err)
				}
				if !tc.anyPhase && e.Phase != tc.phase {
					t.Errorf("phase %v, want %v (%v)", e.Phase, tc.phase, err)
				}
				if e.Status != tc.status || e.Reply != tc.reply {
					t.Errorf("status %d, reply %d; want %d, %d (%v)", e.Status, e.Reply, tc.status, tc.reply, err)
				}
				if got := e.Class(); got != tc.class {
					t.Errorf("class %v, want %v (%v)", got, tc.class, err)
				}
				if got, reached := route.Classify(err, p); got != tc.class || reached {
					t.Errorf("Classify = %v, reached %v; want %v, not reached", got, reached, tc.class)
				}
				if !e.NeverLeft() {
					t.Error("NeverLeft = false, want true")
				}
				if e.Route != d.r.ID {
					t.Errorf("Route = %q, want %q", e.Route, d.r.ID)
				}
				t.Log(err)
				checkNoSecret(t, err)
			})
		}
	})
}

// checkNoSecret fails if the user name or the password, in clear or in
// their Basic encoding, appears in any error of err's chain.
func checkNoSecret(t *testing.T, err error) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	texts := []string{fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}
	for i := 0; err != nil && i < 10; i++ {
		texts = append(texts, err.Error())
		err = errors.Unwrap(err)
	}
	for _, s := range texts {
		if strings.Contains(s, user) || strings.Contains(s, password) || strings.Contains(s, basic) {
			t.Errorf("error text reveals the credentials: %s", s)
		}
	}
}

// A caller's mistake is a plain error, never a *route.Error: it says
// nothing about the route. A route that cannot be dialled has no Exit; a
// malformed address is refused before anything is dialled.
func TestDialTargetRejectsBadInput(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		proxyURL := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
		tests := []struct {
			desc string
			r    *route.Route
			addr string // "": NewExit must refuse the route
		}{
			{desc: "no port", r: routeFor(t, proxyURL), addr: "example.com"},
			{desc: "header injection", r: routeFor(t, proxyURL), addr: "example.com:80\r\nX-Evil: 1"},
			{desc: "space", r: routeFor(t, proxyURL), addr: "example.com:80 HTTP/1.0"},
			{desc: "unknown scheme", r: &route.Route{ID: "ftp://127.0.0.1:1", Scheme: "ftp", URL: proxyURL}},
			{desc: "proxy route without URL", r: &route.Route{ID: "http", Scheme: route.HTTP}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				x, err := route.NewExit(tc.r, route.Dialer{})
				if tc.addr == "" {
					if err == nil {
						t.Fatal("NewExit accepted the route, want an error")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				c, err := x.DialTarget(context.Background(), tc.addr, new(route.Progress))
				if err == nil {
					c.Close()
					t.Fatal("dial succeeded, want an error")
				}
				var e *route.Error
				if errors.As(err, &e) {
					t.Errorf("got *route.Error %v for a caller's mistake, want a plain error", err)
				}
			})
		}
	})
}

func TestErrorClass(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	ioTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		desc  string
		err   *route.Error
		class engine.Class
		text  string // "" = not checked
	}{
		{desc: "proxy refused", err: &route.Error{Phase: route.PhaseDial, Route: "http://1.2.3.4:80~0bfe935e", Err: refused}, class: engine.ProxyConnectFailed,
			text: "route http://1.2.3.4:80~0bfe935e: dial: dial tcp: connect: connection refused"},
		{desc: "proxy name did not resolve", err: &route.Error{Phase: route.PhaseDial, Err: &net.DNSError{Err: "no such host", Name: "proxy.example", IsNotFound: true}}, class: engine.ProxyConnectFailed},
		{desc: "proxy dial timeout", err: &route.Error{Phase: route.PhaseDialTimeout, Err: ioTimeout}, class: engine.ProxyTimeout},
		{desc: "handshake stalled", err: &route.Error{Phase: route.PhaseHandshake, Err: ioTimeout}, class: engine.ProxyTimeout},
		{desc: "handshake broken", err: &route.Error{Phase: route.PhaseHandshake, Err: io.ErrUnexpectedEOF}, class: engine.ProxyConnectFailed},
		{desc: "407", err: &route.Error{Phase: route.PhaseProxyAuth, Status: 407, Route: "http://1.2.3.4:80~0bfe935e"}, class: engine.ProxyAuth,
			text: "route http://1.2.3.4:80~0bfe935e: proxy auth: proxy answered 407"},
		{desc: "403 for one host", err: &route.Error{Phase: route.PhaseTunnel, Status: 403, Route: "http://1.2.3.4:80~0bfe935e"}, class: engine.Blocked,
			text: "route http://1.2.3.4:80~0bfe935e: tunnel: proxy answered 403"},
		{desc: "502 for one host", err: &route.Error{Phase: route.PhaseTunnel, Status: 502}, class: engine.TunnelFailed},
		{desc: "socks5 not allowed by ruleset", err: &route.Error{Phase: route.PhaseTunnel, Reply: 2}, class: engine.Blocked},
		{desc: "socks5 host unreachable", err: &route.Error{Phase: route.PhaseTunnel, Reply: 4}, class: engine.TunnelFailed},
		{desc: "direct refused", err: &route.Error{Phase: route.PhaseTarget, Route: "direct", Err: refused}, class: engine.TargetReset},
		{desc: "direct timeout", err: &route.Error{Phase: route.PhaseTarget, Err: ioTimeout}, class: engine.TargetTimeout},
		{desc: "direct deadline", err: &route.Error{Phase: route.PhaseTarget, Err: context.DeadlineExceeded}, class: engine.TargetTimeout},
		{desc: "direct DNS", err: &route.Error{Phase: route.PhaseTarget, Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x.example", IsNotFound: true}}}, class: engine.DNSFailed},
		{desc: "canceled while dialing", err: &route.Error{Phase: route.PhaseDial, Err: context.Canceled}, class: engine.Canceled},
		{desc: "canceled in handshake", err: &route.Error{Phase: route.PhaseHandshake, Route: "socks5://1.2.3.4:1080~0bfe935e", Err: context.Canceled}, class: engine.Canceled,
			text: "route socks5://1.2.3.4:1080~0bfe935e: handshake: context canceled"},
		{desc: "direct canceled", err: &route.Error{Phase: route.PhaseTarget, Err: context.Canceled}, class: engine.Canceled},
		{desc: "gateway out of descriptors", err: &route.Error{Phase: route.PhaseDial, Route: "http://1.2.3.4:80~0bfe935e", Local: "emfile",
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}}, class: engine.Canceled,
			text: "route http://1.2.3.4:80~0bfe935e: dial: the gateway is out of local resources (emfile): dial tcp: socket: too many open files"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := tc.err.Class(); got != tc.class {
				t.Errorf("Class() = %v, want %v", got, tc.class)
			}
			if !tc.err.NeverLeft() {
				t.Error("NeverLeft() = false, want true")
			}
			if tc.text != "" && tc.err.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", tc.err.Error(), tc.text)
			}
		})
	}
}

// Classify of an attempt that reached nothing; the layers reached are
// covered by TestClassifyByLayer.
func TestClassifyNothingReached(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		err   error
		class engine.Class
	}{
		{desc: "nil", err: nil, class: engine.OK},
		{desc: "wrapped *Error", err: fmt.Errorf("attempt 2: %w", &route.Error{Phase: route.PhaseProxyAuth, Status: 407}), class: engine.ProxyAuth},
		{desc: "canceled", err: fmt.Errorf("fetch: %w", context.Canceled), class: engine.Canceled},
		{desc: "deadline", err: context.DeadlineExceeded, class: engine.ProxyTimeout},
		{desc: "anything else", err: errors.New("boom"), class: engine.ProxyConnectFailed},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got, reached := route.Classify(tc.err, new(route.Progress)); got != tc.class || reached {
				t.Errorf("Classify(%v) = %v, reached %v; want %v, not reached", tc.err, got, reached, tc.class)
			}
		})
	}
}

// FuzzProxyAnswer feeds Exit.DialTarget arbitrary answers from an HTTP or SOCKS5
// proxy: whatever a proxy says, the dial ends in time with a tunnel or an
// *Error of a connect-phase class, never a panic.
func FuzzProxyAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 Connection established\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n220 banner\r\n",
		"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
		"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno\n",
		"HTTP/1.0 100 Continue\r\n\r\n",
		"SSH-2.0-NotAProxy\r\n",
		"",
	} {
		f.Add(false, []byte(s))
	}
	for _, b := range [][]byte{
		{5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0},              // no auth, success
		{5, 2, 1, 0, 5, 0, 0, 3, 3, 'a', 'b', 'c', 0, 80}, // auth, success with a name
		{5, 0xff},    // no acceptable method
		{5, 2, 1, 1}, // auth refused
		{5, 2, 1, 0, 5, 4, 0, 1, 0, 0, 0, 0, 0, 0}, // host unreachable
		{5, 0, 5, 0, 0, 9},                         // unknown address type
		{4, 0},                                     // SOCKS4 answer
	} {
		f.Add(true, b)
	}
	f.Fuzz(func(t *testing.T, socks bool, answer []byte) {
		proxyAddr := routetest.ServeTCP(t, func(c net.Conn) {
			c.Write(answer)
			io.Copy(io.Discard, c)
		})
		scheme := route.HTTP
		if socks {
			scheme = route.SOCKS5
		}
		x, err := route.NewExit(routeFor(t, &url.URL{Scheme: string(scheme), Host: proxyAddr, User: url.UserPassword(user, password)}),
			route.Dialer{Timeouts: route.Timeouts{Handshake: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := x.DialTarget(context.Background(), "127.0.0.1:1", new(route.Progress))
		if err == nil {
			c.Close()
			return
		}
		var e *route.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T %v, want *route.Error", err, err)
		}
		switch e.Class() {
		case engine.ProxyAuth, engine.Blocked, engine.TunnelFailed, engine.ProxyTimeout, engine.ProxyConnectFailed:
		default:
			t.Errorf("class %v for a proxy's answer (%v)", e.Class(), err)
		}
	})
}

// Dialer.Control guards Direct routes only, asked with the target's host:
// a refusal there is a PhaseTarget *route.Error wrapping Control's error
// and nothing connects; a nil Control (an allow-listed host) checks
// nothing; a proxy route dials its proxy without it.
func TestDialerControl(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		errRefused := errors.New("refused by control")
		tests := []struct {
			desc    string
			proxy   bool
			allowed bool // Control has no check for the host
			wantErr bool
		}{
			{desc: "direct route refused", wantErr: true},
			{desc: "direct route, host allowed", allowed: true},
			{desc: "proxy route dialled without control", proxy: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				var reached atomic.Bool
				target := routetest.ServeTCP(t, func(c net.Conn) { reached.Store(true); c.Close() })
				r := &route.Route{ID: "direct", Scheme: route.Direct}
				if tc.proxy {
					r = routeFor(t, routetest.NewProxy(t, routetest.Behavior{}).URL)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var asked atomic.Value
				control := func(host string) func(string, string, syscall.RawConn) error {
					asked.Store(host)
					if tc.allowed {
						return nil
					}
					return func(string, string, syscall.RawConn) error { return errRefused }
				}
				c, err := newExit(t, dialCase{r: r}, route.Dialer{Control: control}).DialTarget(ctx, target, new(route.Progress))
				switch host := asked.Load(); {
				case tc.proxy && host != nil:
					t.Errorf("Control asked for %v on a proxy route", host)
				case !tc.proxy && host != "127.0.0.1":
					t.Errorf("Control asked for %v, want the target's host 127.0.0.1", host)
				}
				if !tc.wantErr {
					if err != nil {
						t.Fatal(err)
					}
					c.Close()
					return
				}
				var e *route.Error
				if !errors.As(err, &e) || e.Phase != route.PhaseTarget || !errors.Is(err, errRefused) {
					t.Fatalf("got %v, want a target-phase *route.Error wrapping the refusal", err)
				}
				if reached.Load() {
					t.Error("the target was connected to")
				}
			})
		}
	})
}

// A dial that fails because the gateway ran out of its own resources
// (descriptors, kernel buffers, local ports) is no evidence against the
// route: a real errno from the socket layer (Control runs between socket()
// and connect(), and its error comes back as the dial's) is an *Error with
// Local set, classified Canceled and reaching nothing, on a tunnel and on
// a forwarded request alike. Other errnos stay the route's.
func TestDialLocalResources(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc   string
			errno  syscall.Errno
			reason string // "" = not local
		}{
			{desc: "process out of descriptors", errno: syscall.EMFILE, reason: "emfile"},
			{desc: "system out of descriptors", errno: syscall.ENFILE, reason: "enfile"},
			{desc: "out of socket buffers", errno: syscall.ENOBUFS, reason: "enobufs"},
			{desc: "out of kernel memory", errno: syscall.ENOMEM, reason: "enomem"},
			{desc: "out of local ports", errno: syscall.EADDRNOTAVAIL, reason: "eaddrnotavail"},
			{desc: "refused is the target's", errno: syscall.ECONNREFUSED},
		}
		for _, tc := range tests {
			for _, p := range []path{tunnel, forward} {
				t.Run(tc.desc+"/"+p.String(), func(t *testing.T) {
					t.Parallel()
					var reached atomic.Bool
					target := routetest.ServeTCP(t, func(c net.Conn) { reached.Store(true); c.Close() })
					control := func(string) func(string, string, syscall.RawConn) error {
						return func(string, string, syscall.RawConn) error { return tc.errno }
					}
					d := route.Dialer{Control: control}
					x := newExit(t, dialCase{r: &route.Route{ID: "direct", Scheme: route.Direct}}, d)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					var progress route.Progress
					var err error
					if p == tunnel {
						var c net.Conn
						if c, err = x.DialTarget(ctx, target, &progress); err == nil {
							c.Close()
						}
					} else {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+"/", nil)
						var resp *http.Response
						if resp, err = x.RoundTrip(req, &progress); err == nil {
							resp.Body.Close()
						}
					}
					if !errors.Is(err, tc.errno) {
						t.Fatalf("got %v, want an error wrapping %v", err, tc.errno)
					}
					class, hit := route.Classify(err, &progress)
					if got := route.LocalReason(err); got != tc.reason {
						t.Errorf("LocalReason = %q, want %q", got, tc.reason)
					}
					switch {
					case hit || reached.Load():
						t.Error("the target was reached")
					case tc.reason != "" && class != engine.Canceled:
						t.Errorf("class %v, want canceled (no evidence)", class)
					case tc.reason == "" && class == engine.Canceled:
						t.Errorf("class canceled for %v, want evidence", tc.errno)
					}
				})
			}
		}
	})
}

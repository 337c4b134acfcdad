package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/probe"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// ssrfCase is one entry of the SSRF conformance table: a target host as a
// client may write it, and what the gateway must make of it.
type ssrfCase struct {
	host  string // as written in the authority, IPv6 in brackets; the port is the test site's
	port  string // instead of the site's port
	allow bool   // run with 127.0.0.1/32 allow-listed, else with nothing allowed
	name  bool   // a DNS name: never run on Direct routes, which would resolve it for real
	// status is 400 (malformed), 403 (blocked) or 0 (carried); with
	// resolve_proxy_targets, resolved is 403 for a name that resolves to a
	// blocked address or not at all.
	status, resolved int
	asked            string // when carried: the host the route is asked to reach, if not host
}

// ssrfTable holds every spelling of an internal destination known to slip
// past naive checks, and a few that must pass, so that it is not vacuous:
// see docs/security.md.
var ssrfTable = []ssrfCase{
	// Loopback, however spelled.
	{host: "127.0.0.1", status: 403},
	{host: "127.0.0.2", status: 403},
	{host: "127.1", status: 403},
	{host: "2130706433", status: 403},
	{host: "0177.0.0.1", status: 403},
	{host: "00000177.0.0.01", status: 403},
	{host: "0x7f000001", status: 403},
	{host: "0X7F.0X0.0X0.0X1", status: 403},
	{host: "0x7f.1", status: 403},
	{host: "127.0.0.1.", status: 403},
	{host: "127.0.0.1..", status: 403},
	{host: "１２７.０.０.１", status: 403},
	{host: "%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1", status: 403}, // full-width digits, percent-encoded
	{host: "127。0。0。1", status: 403},
	{host: "𝟏𝟐𝟕.𝟎.𝟎.𝟏", status: 403},
	{host: "０ｘ７ｆ０００００１", status: 403},
	{host: "[::1]", status: 403},
	{host: "[0:0:0:0:0:0:0:1]", status: 403},
	{host: "[::ffff:127.0.0.1]", status: 403},
	{host: "[::ffff:7f00:1]", status: 403},
	{host: "[64:ff9b::7f00:1]", status: 403},
	{host: "[2001:0:4136:e378::80ff:fffe]", status: 403}, // Teredo, client 127.0.0.1
	{host: "0", status: 403},
	{host: "0.0.0.0", status: 403},
	{host: "[::]", status: 403},
	// Private, shared and link-local.
	{host: "10.0.0.1", status: 403},
	{host: "①⓪.⓪.⓪.①", status: 403},
	{host: "172.16.0.1", status: 403},
	{host: "192.168.1.1", status: 403},
	{host: "100.64.0.1", status: 403},
	{host: "169.254.1.1", status: 403},
	{host: "[2002:c0a8:1::]", status: 403}, // 6to4 of 192.168.0.1
	{host: "[::10.0.0.1]", status: 403},
	{host: "[fc00::1]", status: 403},
	{host: "[fe80::1]", status: 403},
	{host: "[fe80::1%25eth0]", status: 403},
	{host: "[fec0::1]", status: 403},
	// Cloud metadata.
	{host: "169.254.169.254", status: 403},
	{host: "１６９.２５４.１６９.２５４", status: 403},
	{host: "169.254.169.254..", status: 403},
	{host: "2852039166", status: 403},
	{host: "0251.0376.0251.0376", status: 403},
	{host: "0xa9fea9fe", status: 403},
	{host: "0xa9.254.0251.0xfe", status: 403},
	{host: "169.16689662", status: 403},
	{host: "168.63.129.16", status: 403},
	{host: "100.100.100.200", status: 403},
	{host: "[fd00:ec2::254]", status: 403},
	{host: "[::ffff:169.254.169.254]", status: 403},
	{host: "[::169.254.169.254]", status: 403},
	{host: "[::ffff:0:169.254.169.254]", status: 403},
	{host: "[64:ff9b::a9fe:a9fe]", status: 403},
	{host: "[64:ff9b:1::a9fe:a9fe]", status: 403},
	{host: "[2002:a9fe:a9fe::]", status: 403},
	// Special-purpose ranges.
	{host: "192.0.0.8", status: 403},
	{host: "192.0.2.1", status: 403},
	{host: "198.51.100.1", status: 403},
	{host: "203.0.113.1", status: 403},
	{host: "198.18.0.1", status: 403},
	{host: "224.0.0.1", status: 403},
	{host: "240.0.0.1", status: 403},
	{host: "255.255.255.255", status: 403},
	{host: "[ff02::1]", status: 403},
	{host: "[100::1]", status: 403},
	{host: "[2001:db8::1]", status: 403},
	// Names.
	{host: "localhost", name: true, status: 403},
	{host: "LocalHost", name: true, status: 403},
	{host: "localhost.", name: true, status: 403},
	{host: "localhost..", name: true, status: 403},
	{host: "ｌｏｃａｌｈｏｓｔ", name: true, status: 403},
	{host: "app.localhost", name: true, status: 403},
	{host: "localhost.localdomain", name: true, status: 403},
	{host: "ip6-localhost", name: true, status: 403},
	{host: "ip6-loopback", name: true, status: 403},
	{host: "metadata.google.internal", name: true, status: 403},
	{host: "METADATA.Google.Internal.", name: true, status: 403},
	{host: "metadata", name: true, status: 403},
	{host: "instance-data.ec2.internal", name: true, status: 403},
	{host: "instance-data", name: true, status: 403},
	{host: "db.corp.internal", name: true, status: 403},
	{host: "printer.local", name: true, status: 403},
	{host: "localhost", name: true, allow: true, status: 403}, // allow_cidrs covers addresses, not names
	// Names judged by what they resolve to, with resolve_proxy_targets.
	{host: "rebind.test", name: true, resolved: 403},
	{host: "mixed.test", name: true, resolved: 403},
	{host: "unresolvable.test", name: true, resolved: 403},
	// Malformed.
	{host: "", status: 400},
	{host: "127.0.0.1", port: "0", allow: true, status: 400},
	{host: "127.0.0.1", port: "65536", allow: true, status: 400},
	{host: "127.0.0.1", port: "99999999999999999999", allow: true, status: 400},
	{host: "127.0.0.1", port: "http", allow: true, status: 400},
	{host: "127.0.0.1", port: "-1", allow: true, status: 400},
	{host: "١٢٧.٠.٠.١", status: 400},
	{host: "[::ｆｆｆｆ:127.0.0.1]", status: 400},
	{host: "%FF%FE.0.0.1", status: 400},
	{host: "08.0.0.1", status: 400},
	{host: "1.2.3.4.5", status: 400},
	{host: "a<b.test", name: true, status: 400},
	// Carried, and sent as checked.
	{host: "127.0.0.1", allow: true},
	{host: "127.0.0.2", allow: true, status: 403}, // the allow-list is not a blanket
	{host: "2130706433", allow: true, asked: "127.0.0.1"},
	{host: "0x7f.1", allow: true, asked: "127.0.0.1"},
	{host: "１２７.０.０.１", allow: true, asked: "127.0.0.1"},
	{host: "127.0.0.1..", allow: true, asked: "127.0.0.1"},
	{host: "[::ffff:127.0.0.1]", allow: true, asked: "127.0.0.1"},
	{host: "127.0.0.1", port: "0%s", allow: true}, // the site's port with a leading zero
	{host: "public.test", name: true},
	{host: "PUBLIC.test", name: true},
	{host: "ｐｕｂｌｉｃ.test", name: true, asked: "public.test"},
	{host: "public.test..", name: true, asked: "public.test."},
	{host: "bücher.test", name: true, asked: "xn--bcher-kva.test"},
}

// ssrfResolver resolves the table's names under resolve_proxy_targets,
// as they are sent, from a name server on loopback: nothing is looked up
// elsewhere, and nothing dials the public address.
func ssrfResolver(t *testing.T) *net.Resolver {
	public := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	return routetest.NewDNS(t, map[string][]netip.Addr{
		"rebind.test":        {netip.MustParseAddr("127.0.0.1")},
		"mixed.test":         {public[0], netip.MustParseAddr("10.0.0.1")},
		"public.test":        public,
		"xn--bcher-kva.test": public,
	}).Resolver()
}

// TestSSRFConformance runs the SSRF table through the real gateway on every
// route type, with and without resolve_proxy_targets, as absolute-form
// requests and as CONNECT, and asserts what the route was actually asked
// to reach: a blocked or malformed target gets 403 or 400 with no route
// leased, nothing asked of the proxy or the dialer, and the site not
// reached; a carried one is asked for once, as admission read it.
func TestSSRFConformance(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		kinds := []struct {
			name  string
			proxy *routetest.Behavior // nil: Direct
		}{
			{name: "direct"},
			{name: "http", proxy: &routetest.Behavior{}},
			{name: "https", proxy: &routetest.Behavior{TLS: true}},
			{name: "socks5", proxy: &routetest.Behavior{Kind: routetest.SOCKS5Proxy}},
		}
		for _, kind := range kinds {
			for _, resolve := range []bool{false, true} {
				for _, allow := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/resolve=%v/allow=%v", kind.name, resolve, allow), func(t *testing.T) {
						t.Parallel()
						u := newSSRFEnv(t, kind.proxy, resolve, allow)
						for _, tc := range ssrfTable {
							if tc.allow != allow || tc.name && kind.proxy == nil {
								continue
							}
							for _, form := range []ssrfForm{absoluteForm, connectForm, probeForm} {
								t.Run(string(form)+" "+tc.host+":"+tc.port, func(t *testing.T) { u.check(t, tc, form) })
							}
						}
					})
				}
			}
		}
	})
}

// ssrfEnv is a gateway over one route to a site on 127.0.0.1, recording
// what the route is asked to reach.
type ssrfEnv struct {
	v       *env
	site    *site
	port    string // the site's
	resolve bool
	asked   func() []string // "host:port" as the proxy or the Direct dialer was asked for it, in order
	clock   time.Time       // the engine's time for probes, moved on past each pair's cooldown
}

func newSSRFEnv(t *testing.T, proxy *routetest.Behavior, resolve, allow bool) *ssrfEnv {
	tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })
	_, port, _ := net.SplitHostPort(tg.Listener.Addr().String())
	var allowed []netip.Prefix
	if allow {
		allowed = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}
	cfg := Config{
		MaxAttempts:         1,
		Admission:           admit.New(allowed, nil),
		ResolveProxyTargets: resolve,
		Resolver:            ssrfResolver(t),
	}
	u := &ssrfEnv{site: tg, port: port, resolve: resolve}
	if proxy == nil {
		u.v = newEnv(t, cfg, "direct")
		u.asked = u.recordDirect(t)
		return u
	}
	p := routetest.NewProxy(t, *proxy)
	if proxy.TLS {
		cfg.ProxyTLS = &tls.Config{RootCAs: p.CertPool()}
	}
	u.v = newEnv(t, cfg, proxyLine(p, ""))
	u.asked = p.Asked
	return u
}

// recordDirect rebuilds the Direct route's exit with a dialer that records
// each host and port it is asked to connect to and, after the gateway's
// own connect-time check, refuses anything but 127.0.0.1 (as the test
// proxies do), so that no regression can send traffic off the machine.
func (u *ssrfEnv) recordDirect(t *testing.T) func() []string {
	var mu sync.Mutex
	var asked []string
	d := u.v.g.dialer()
	check := d.Control
	d.Control = func(host string) func(string, string, syscall.RawConn) error {
		admission := check(host)
		return func(network, address string, c syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			mu.Lock()
			asked = append(asked, net.JoinHostPort(host, fmt.Sprint(ap.Port())))
			mu.Unlock()
			if admission != nil {
				if err := admission(network, address, c); err != nil {
					return err
				}
			}
			if err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
				return errors.New("ssrf test: refusing to connect off 127.0.0.1: " + address)
			}
			return nil
		}
	}
	set, err := route.NewSet(u.v.routes[:1], d)
	if err != nil {
		t.Fatal(err)
	}
	s := *u.v.g.current.Load()
	s.routes = set
	u.v.g.current.Store(&s)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

// ssrfForm is how a table entry's target is asked for.
type ssrfForm string

const (
	absoluteForm ssrfForm = "absolute" // a client's absolute-form request
	connectForm  ssrfForm = "CONNECT"  // a client's CONNECT
	probeForm    ssrfForm = "probe"    // the prober's fetch of the target's page
)

// check asks for tc's target in form and judges the answer and what the
// route was asked.
func (u *ssrfEnv) check(t *testing.T, tc ssrfCase, form ssrfForm) {
	port := u.port
	if tc.port != "" {
		port = strings.ReplaceAll(tc.port, "%s", u.port)
	}
	authority := tc.host + ":" + port
	if form == probeForm {
		u.checkProbe(t, tc, authority)
		return
	}
	connect := form == connectForm
	// The Host header is ignored beside an authority in the request line
	// (RFC 9112 §3.2.2), and net/http's server refuses a non-ASCII one.
	req := "GET http://" + authority + "/ HTTP/1.1\r\nHost: ssrf.test\r\n\r\n"
	if connect {
		req = "CONNECT " + authority + " HTTP/1.1\r\nHost: ssrf.test\r\n\r\n"
	}
	u.v.g.Close() // an idle connection to the site would be reused, not asked for
	askedBefore, hitsBefore := len(u.asked()), u.site.Hits()
	resp, tunnel := rawConn(t, u.v.url.Host, req)
	asked := u.asked()[askedBefore:]
	status := tc.status
	if u.resolve && tc.resolved != 0 {
		status = tc.resolved
	}
	if status != 0 {
		if resp.StatusCode != status {
			t.Fatalf("answered %d %q, want %d", resp.StatusCode, resp.Header.Get(headerError), status)
		}
		wantError := map[int]string{400: "bad_request", 403: "blocked_destination"}[status]
		// net/http's server itself refuses a port that is not a number and
		// brackets around no IPv6 address, before the gateway sees them.
		if got := resp.Header.Get(headerError); got != wantError && !(status == 400 && got == "") {
			t.Errorf("X-Switchyard-Error %q, want %q", got, wantError)
		}
		if route := resp.Header.Get(headerRoute); route != "" || len(asked) != 0 || u.site.Hits() != hitsBefore {
			t.Errorf("route %q leased, asked for %q, site hit %d times: want nothing", route, asked, u.site.Hits()-hitsBefore)
		}
		return
	}
	want := u.want(tc)
	if len(asked) != 1 || asked[0] != want {
		t.Fatalf("the route was asked for %q, want [%q] (answered %d)", asked, want, resp.StatusCode)
	}
	if !strings.HasPrefix(want, "127.0.0.1:") {
		// A name: the test proxy refuses anything off loopback.
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("answered %d, want the proxy's refusal as 502", resp.StatusCode)
		}
		return
	}
	if connect && resp.StatusCode == http.StatusOK {
		resp = u.through(t, tunnel)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(body) != "reached" {
		t.Errorf("answered %d %q, want the site's answer", resp.StatusCode, body)
	}
}

// want is the host:port the route must be asked for to carry tc.
func (u *ssrfEnv) want(tc ssrfCase) string {
	want := tc.asked
	if want == "" {
		want = strings.Trim(tc.host, "[]")
	}
	return net.JoinHostPort(want, u.port)
}

// checkProbe has the prober fetch http://authority/ for a half-open
// route×target pair, as it would for a target's recorded origin: refused
// targets must be asked of nobody, carried ones as admission read them.
func (u *ssrfEnv) checkProbe(t *testing.T, tc ssrfCase, authority string) {
	const key = "probed.test"
	u.v.g.Close()
	askedBefore, hitsBefore := len(u.asked()), u.site.Hits()
	if u.clock.IsZero() {
		u.clock = time.Now()
	}
	if err := u.v.e.Feedback(u.clock, u.v.id(0), key, engine.Outcome{Class: engine.Blocked}); err != nil {
		t.Fatal(err)
	}
	pair, _ := u.v.pair(t, 0, key)
	u.clock = pair.Health.UntilTime()
	u.v.e.Sweep(u.clock)
	p := probe.New(u.v.e, u.v.g, probe.Config{
		TargetURL: func(string) string { return "http://" + authority + "/" },
		Admit:     u.v.g.Admit,
		Now:       func() time.Time { return u.clock },
	})
	if jobs := p.Drain(context.Background(), nil); len(jobs) == 0 {
		t.Fatal("no probe job for the half-open pair: the probe proves nothing")
	}
	p.Wait()
	u.clock = u.clock.Add(time.Second)
	asked, hits := u.asked()[askedBefore:], u.site.Hits()-hitsBefore
	status := tc.status
	if u.resolve && tc.resolved != 0 {
		status = tc.resolved
	}
	if status != 0 {
		if len(asked) != 0 || hits != 0 {
			t.Errorf("the probe asked the route for %q and hit the site %d times: want nothing", asked, hits)
		}
		return
	}
	want := u.want(tc)
	if len(asked) != 1 || asked[0] != want {
		t.Fatalf("the route was asked for %q, want [%q]", asked, want)
	}
	if strings.HasPrefix(want, "127.0.0.1:") && hits != 1 {
		t.Errorf("the probe hit the site %d times, want once", hits)
	}
}

// through asks the site for its page through a tunnel.
func (u *ssrfEnv) through(t *testing.T, tunnel *bufio.ReadWriter) *http.Response {
	if _, err := tunnel.WriteString("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil || tunnel.Flush() != nil {
		t.Fatal("writing through the tunnel:", err)
	}
	resp, err := http.ReadResponse(tunnel.Reader, nil)
	if err != nil {
		t.Fatal("reading through the tunnel:", err)
	}
	return resp
}

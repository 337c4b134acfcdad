package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/lookalike"
	"github.com/switchyard/switchyard/internal/probe"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// Probes cannot be turned against the network the gateway sits in: a host
// is a target's probe origin only once a target answered there, after
// admission, and a probe meets the same admission, at connect time too,
// as users' traffic. Names resolve through a name server on loopback that
// the test rebinds; 127.0.0.2 is allowed, 127.0.0.1 is the blocked
// address no probe may reach.
func TestProbesNeverReachBlocked(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		allowed, internal := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")
		site, blocked, port := pairedListeners(t, allowed, internal)
		var blockedHits atomic.Int64
		serveCounting(t, site, nil)
		serveCounting(t, blocked, &blockedHits)
		dns := routetest.NewDNS(t, map[string][]netip.Addr{
			"inside.example.test": {internal},
			"rebind.example.test": {allowed},
		})
		adm := admit.New([]netip.Prefix{netip.PrefixFrom(allowed, 32)}, nil)
		v := newEnv(t, Config{Admission: adm, Resolver: dns.Resolver(), AttemptTimeout: 2 * time.Second}, "direct")
		key, _ := v.g.current.Load().targets.Resolve("inside.example.test")
		if other, _ := v.g.current.Load().targets.Resolve("rebind.example.test"); other != key {
			t.Fatalf("the names are targets %q and %q: want one target", key, other)
		}
		get := func(host string) int {
			t.Helper()
			resp, err := v.client(t, "").Get("http://" + net.JoinHostPort(host, port) + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}

		// A name that resolves to a blocked address is refused at connect
		// time and never becomes the probe origin.
		if code := get("inside.example.test"); code != http.StatusForbidden {
			t.Fatalf("inside.example.test answered %d, want 403", code)
		}
		if u := v.g.Targets().ProbeURL(key); strings.Contains(u, "inside") {
			t.Fatalf("probe page %q: a refused host became the origin", u)
		}
		// A name that answered is the origin; then it rebinds inside.
		if code := get("rebind.example.test"); code != http.StatusOK {
			t.Fatalf("rebind.example.test answered %d, want 200", code)
		}
		if u, want := v.g.Targets().ProbeURL(key), "http://"+net.JoinHostPort("rebind.example.test", port)+"/"; u != want {
			t.Fatalf("probe page %q, want %q", u, want)
		}
		dns.Set("rebind.example.test", internal)

		// The pair cools and is probed: the probe meets the rebinding at
		// connect time, and is no evidence.
		if err := v.e.Feedback(time.Now(), v.id(0), key, engine.Outcome{Class: engine.Blocked}); err != nil {
			t.Fatal(err)
		}
		pair, _ := v.pair(t, 0, key)
		v.e.Sweep(pair.Health.UntilTime())
		p := probe.New(v.e, v.g, probe.Config{TargetURL: v.g.Targets().ProbeURL, Admit: v.g.Admit, Now: pair.Health.UntilTime})
		jobs := p.Drain(context.Background(), nil)
		p.Wait()
		if len(jobs) == 0 {
			t.Fatal("no probe job for the half-open pair: the test proves nothing")
		}
		if n := blockedHits.Load(); n > 0 {
			t.Errorf("the blocked address was reached %d times", n)
		}
		if st, _ := v.pair(t, 0, key); st.Health.State != engine.HalfOpen {
			t.Errorf("pair %v after a refused probe, want half_open (no evidence)", st.Health.State)
		}
	})
}

// pairedListeners listens on a and b with one port, so that a name moved
// from a to b by DNS reaches the other listener at the same host:port.
func pairedListeners(t *testing.T, a, b netip.Addr) (la, lb net.Listener, port string) {
	t.Helper()
	for range 20 {
		la, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		p := la.Addr().(*net.TCPAddr).Port
		if lb, err := net.Listen("tcp", netip.AddrPortFrom(b, uint16(p)).String()); err == nil {
			t.Cleanup(func() { la.Close(); lb.Close() })
			return la, lb, strconv.Itoa(p)
		}
		la.Close()
	}
	t.Fatal("no port free on both addresses")
	return nil, nil, ""
}

// serveCounting answers 200 to every request on ln, counting them in hits
// when set, until the test ends.
func serveCounting(t *testing.T, ln net.Listener, hits *atomic.Int64) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// A neutral probe's CONNECT goes to port 443 of a host a target answered
// at, through absolute-form requests or tunnels; none before one did.
func TestNeutralAuthority(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			connect bool
		}{
			{desc: "absolute-form"},
			{desc: "CONNECT", connect: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				site := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				v := newEnv(t, Config{}, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
				if got := v.g.Targets().NeutralAuthority(); got != "" {
					t.Fatalf("before any request: %q, want none", got)
				}
				addr := strings.TrimPrefix(site.URL, "http://")
				if tc.connect {
					c, _, resp := connect(t, v, addr)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("CONNECT: %d", resp.StatusCode)
					}
					c.Close()
				} else {
					v.warm(t, site, 1)
				}
				if got := v.g.Targets().NeutralAuthority(); got != "127.0.0.1:443" {
					t.Errorf("after a request to %s: %q, want 127.0.0.1:443", addr, got)
				}
			})
		}
	})
}

// TestJudgeProbe classifies probes' answers with the soft-ban signatures
// users' answers meet: a challenge page served with a 200 keeps a pair
// cooled instead of passing its probe.
func TestJudgeProbe(t *testing.T) {
	site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/challenge":
			io.WriteString(w, "<html><head><title>Just a moment...</title></head></html>")
		case "/own":
			io.WriteString(w, "<html>please verify you are human</html>")
		default:
			io.WriteString(w, "<html>the page</html>")
		}
	})
	tests := []struct {
		desc, path string
		rules      []target.Rule
		want       engine.Class
	}{
		{"a page", "/", nil, engine.OK},
		{"a built-in challenge", "/challenge", nil, engine.ContentInvalid},
		{"built-ins off", "/challenge", []target.Rule{{Hosts: []string{"127.0.0.1"}, Policy: target.Policy{NoBuiltinSignatures: true}}}, engine.OK},
		{"the target's own signature", "/own", []target.Rule{{Hosts: []string{"127.0.0.1"}, Policy: target.Policy{BlockSignatures: []string{"verify you are human"}}}}, engine.ContentInvalid},
	}
	for _, tc := range tests {
		v := newEnv(t, Config{Targets: target.New(tc.rules)}, "direct")
		resp, err := http.Get(site.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := v.g.JudgeProbe("direct", "127.0.0.1", resp)
		resp.Body.Close()
		if got != tc.want {
			t.Errorf("%s: %v, want %v", tc.desc, got, tc.want)
		}
	}
}

// A probe served the page the lookalike detector found a route out with
// keeps the pair cooled, and teaches the detector nothing: probing a clean
// route's one page again and again never makes it a repeat.
func TestJudgeProbeRechecksLookalikes(t *testing.T) {
	const banned = "<html>we are checking your browser</html>"
	site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/banned" {
			io.WriteString(w, banned)
			return
		}
		io.WriteString(w, "<html>the page</html>")
	})
	v := newEnv(t, Config{}, "direct")
	d := v.g.lookalike
	for u := range 40 {
		path := fmt.Sprintf("/p%d", u)
		page := fmt.Sprintf("<html>page %c%c</html>", 'a'+u%26, 'a'+u/26)
		d.Judge("127.0.0.1", fmt.Sprintf("good%d", u%2), lookalike.Answer{URL: lookalike.URLDigest(path, ""), Body: lookalike.BodyDigest([]byte(page)), Size: len(page)})
		if u%4 == 0 {
			d.Judge("127.0.0.1", "bad", lookalike.Answer{URL: lookalike.URLDigest(path, ""), Body: lookalike.BodyDigest([]byte(banned)), Size: len(banned)})
		}
	}
	probe := func(routeID, path string) engine.Class {
		resp, err := http.Get(site.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		class, _ := v.g.JudgeProbe(routeID, "127.0.0.1", resp)
		if body, _ := io.ReadAll(resp.Body); path == "/banned" && string(body) != banned {
			t.Fatalf("the page read was not put back: %q", body)
		}
		return class
	}
	if got := probe("bad", "/banned"); got != engine.ContentInvalid {
		t.Errorf("the route's ban page, probed: %v, want %v", got, engine.ContentInvalid)
	}
	// Learned, fifty probes' one page would be most of the target's
	// evidence, and the other routes would no longer look different from
	// each other.
	for range 50 {
		if got := probe("good0", "/"); got != engine.OK {
			t.Fatalf("a clean route's page, probed: %v, want ok", got)
		}
	}
	if v := d.Judge("127.0.0.1", "bad", lookalike.Answer{URL: lookalike.URLDigest("/new", ""), Body: lookalike.BodyDigest([]byte(banned)), Size: len(banned)}); v != lookalike.Repeated {
		t.Errorf("the route's ban page for a user after the probes: %v, want %v (the probes were learned)", v, lookalike.Repeated)
	}
}

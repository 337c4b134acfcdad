package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// setup returns an engine over the given proxy list, and the routes.
func setup(t *testing.T, list string) (*engine.Engine, []*route.Route) {
	t.Helper()
	parsed, err := route.ParseList("test.txt", []byte(list))
	if err != nil {
		t.Fatal(err)
	}
	// Routes serve at once: TestCandidatesAreChecked covers the check.
	e, err := engine.New(engine.Config{Seed: 1, MaxRemovedShare: -1, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var routes []*route.Route
	for i := range parsed {
		routes = append(routes, &parsed[i])
		if err := e.AddRoute(t0, parsed[i].Spec()); err != nil {
			t.Fatal(err)
		}
	}
	return e, routes
}

// exits are the routes' ways out, by id, as the gateway would hand them
// to the prober.
type exits map[string]*route.Exit

func (m exits) Exit(id string) *route.Exit { return m[id] }

// exitsOf builds the exits of routes, dialling as d says; their idle
// connections are closed with the test.
func exitsOf(t *testing.T, routes []*route.Route, d route.Dialer) exits {
	t.Helper()
	if d.Upstream == nil {
		d.Upstream = route.NewUpstream(0, 0)
	}
	t.Cleanup(d.Upstream.CloseIdleConnections)
	m := make(exits, len(routes))
	for _, r := range routes {
		x, err := route.NewExit(r, d)
		if err != nil {
			t.Fatal(err)
		}
		m[r.ID] = x
	}
	return m
}

// halfOpen cools the record (route, or route×target when target is set)
// and wakes it, returning the time it went half-open.
func halfOpen(t *testing.T, e *engine.Engine, id, target string) time.Time {
	t.Helper()
	class := engine.ProxyAuth
	if target != "" {
		class = engine.Blocked
	}
	if err := e.Feedback(t0, id, target, engine.Outcome{Class: class}); err != nil {
		t.Fatal(err)
	}
	st, _ := e.Route(id)
	until := st.Health.UntilTime()
	for _, p := range st.Targets {
		if p.Target == target {
			until = p.Health.UntilTime()
		}
	}
	e.Sweep(until)
	return until
}

// answer drains and waits for probe rounds until no job is left or rounds
// run out, so a record needing several probes gets them all.
func answer(t *testing.T, p *Prober) {
	t.Helper()
	for range 5 {
		if jobs := p.Drain(context.Background(), nil); len(jobs) == 0 {
			return
		}
		p.Wait()
	}
}

func state(e *engine.Engine, id, target string) engine.State {
	st, _ := e.Route(id)
	if target == "" {
		return st.Health.State
	}
	for _, p := range st.Targets {
		if p.Target == target {
			return p.Health.State
		}
	}
	return engine.Candidate
}

func TestNeutralProbes(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		live := routetest.NewProxy(t, routetest.Behavior{User: "u", Password: "Sekr1t"})
		dead := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
		e, routes := setup(t, live.URL.String()+"\n"+dead.URL.String()+"\ndirect\n")
		tests := []struct {
			route *route.Route
			want  engine.State
		}{
			{routes[0], engine.Healthy},
			{routes[1], engine.Cooling},
			{routes[2], engine.Healthy},
		}
		var now time.Time
		for _, tt := range tests {
			now = halfOpen(t, e, tt.route.ID, "")
		}
		p := New(e, exitsOf(t, routes, route.Dialer{Timeouts: route.Timeouts{Dial: time.Second}}), Config{Now: func() time.Time { return now }})
		answer(t, p)
		for _, tt := range tests {
			if got := state(e, tt.route.ID, ""); got != tt.want {
				t.Errorf("%s: %v after probes, want %v", tt.route.Redacted(), got, tt.want)
			}
		}
	})
}

// TestCandidatesAreChecked: a new route is checked before users' traffic.
// Without a probe URL, and before any site is known, the check is a
// CONNECT to the reserved authority: it lets a live exit in to ramp up
// (it refuses the tunnel), and keeps out a dead one and one that takes
// connections and never answers, which a TCP check let in.
func TestCandidatesAreChecked(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		live := routetest.NewProxy(t, routetest.Behavior{})
		silent := routetest.NewProxy(t, routetest.Behavior{Blackhole: true})
		dead := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
		parsed, err := route.ParseList("test.txt", []byte(live.URL.String()+"\n"+silent.URL.String()+"\n"+dead.URL.String()))
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(engine.Config{Seed: 1, MaxRemovedShare: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		routes := make([]*route.Route, len(parsed))
		for i := range parsed {
			routes[i] = &parsed[i]
			if err := e.AddRoute(t0, parsed[i].Spec()); err != nil {
				t.Fatal(err)
			}
		}
		p := New(e, exitsOf(t, routes, route.Dialer{Timeouts: route.Timeouts{Dial: time.Second}}), Config{Now: func() time.Time { return t0 }, Timeout: time.Second})
		answer(t, p)
		for i, want := range []engine.State{engine.Healthy, engine.Cooling, engine.Cooling} {
			if got := state(e, routes[i].ID, ""); got != want {
				t.Errorf("%s: %v after its check, want %v", routes[i].Redacted(), got, want)
			}
		}
	})
}

func TestTargetProbes(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("User-Agent") != "switchyard-probe" {
				t.Errorf("probe User-Agent %q", r.Header.Get("User-Agent"))
			}
		}))
		defer ok.Close()
		banned := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
		}))
		defer banned.Close()
		proxy := routetest.NewProxy(t, routetest.Behavior{})
		socks := routetest.NewProxy(t, routetest.Behavior{Kind: routetest.SOCKS5Proxy})
		e, routes := setup(t, proxy.URL.String()+"\n"+socks.URL.String()+"\n")
		pages := map[string]string{"ok.test": ok.URL + "/", "banned.test": banned.URL + "/"}
		tests := []struct {
			route  *route.Route
			target string
			want   engine.State
		}{
			{routes[0], "ok.test", engine.Healthy},
			{routes[0], "banned.test", engine.Cooling},
			{routes[1], "ok.test", engine.Healthy},
			{routes[1], "banned.test", engine.Cooling},
		}
		var now time.Time
		for _, tt := range tests {
			now = later(now, halfOpen(t, e, tt.route.ID, tt.target))
		}
		p := New(e, exitsOf(t, routes, route.Dialer{}), Config{
			Now:       func() time.Time { return now },
			TargetURL: func(target string) string { return pages[target] },
		})
		answer(t, p)
		for _, tt := range tests {
			if got := state(e, tt.route.ID, tt.target); got != tt.want {
				t.Errorf("%s × %s: %v after probes, want %v", tt.route.Redacted(), tt.target, got, tt.want)
			}
		}
		if proxy.Requests() == 0 || socks.Requests() == 0 {
			t.Fatal("probes did not go through the routes")
		}
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func TestRunStopsWithItsContext(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		hang := routetest.NewProxy(t, routetest.Behavior{Blackhole: true})
		e, routes := setup(t, hang.URL.String()+"\n")
		until := halfOpen(t, e, routes[0].ID, "hang.test")
		p := New(e, exitsOf(t, routes, route.Dialer{}), Config{
			Now:       func() time.Time { return until },
			TargetURL: func(string) string { return "http://hang.test/" },
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.Run(ctx, time.Millisecond); close(done) }()
		// Wait (bounded) until the probe is in flight, then stop.
		deadline := time.Now().Add(5 * time.Second)
		for hang.Requests() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
		// The canceled probe is no evidence: the record stays half-open and
		// its job is issued again, so no job is lost.
		if s := state(e, routes[0].ID, "hang.test"); s != engine.HalfOpen {
			t.Fatalf("state %v, want half_open", s)
		}
		if jobs := e.ProbeJobs(nil); len(jobs) != 1 {
			t.Fatalf("jobs after a canceled probe: %+v", jobs)
		}
	})
}

func TestBadPagesAreNoEvidence(t *testing.T) {
	t.Parallel()
	e, routes := setup(t, "direct\n")
	x := exitsOf(t, routes, route.Dialer{})
	p := New(e, x, Config{})
	for _, page := range []string{"", "https://x.test/", "::", "ftp://x"} {
		if c, _ := p.fetch(context.Background(), x[routes[0].ID], page, routes[0].ID, ""); c != engine.Canceled {
			t.Errorf("page %q: %v, want canceled", page, c)
		}
	}
	if got := p.cfg.TargetURL("a.example"); got != "http://a.example/" {
		t.Errorf("default target page %q", got)
	}
}

func TestNeutralURLIsFetchedThroughTheRoute(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		hits := 0
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
		defer page.Close()
		locked := routetest.NewProxy(t, routetest.Behavior{Answer407: true})
		e, routes := setup(t, locked.URL.String()+"\n")
		now := halfOpen(t, e, routes[0].ID, "")
		p := New(e, exitsOf(t, routes, route.Dialer{}), Config{Now: func() time.Time { return now }, NeutralURL: page.URL + "/"})
		answer(t, p)
		// A TCP check would pass this proxy; fetching a page through it
		// finds the 407.
		if s := state(e, routes[0].ID, ""); s != engine.Cooling {
			t.Fatalf("407 proxy is %v after a neutral page probe, want cooling", s)
		}
		if hits != 0 || locked.Requests() == 0 {
			t.Fatalf("page hits %d, proxy requests %d", hits, locked.Requests())
		}
	})
}

// A target probe through an HTTP proxy is the request users' traffic
// makes: absolute-form, with the route's credentials.
func TestTargetProbeGoesAsUsersTraffic(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		seen := make(chan *http.Request, 1)
		proxyAddr := routetest.ServeTCP(t, func(c net.Conn) {
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			select {
			case seen <- req: // the first probe's request is the one checked
			default:
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		})
		e, routes := setup(t, "http://u:Sekr1t@"+proxyAddr+"\n")
		now := halfOpen(t, e, routes[0].ID, "site.test")
		p := New(e, exitsOf(t, routes, route.Dialer{}), Config{Now: func() time.Time { return now }})
		answer(t, p)
		var req *http.Request
		select {
		case req = <-seen:
		default:
			t.Fatal("the proxy saw no probe")
		}
		if req.Method != http.MethodGet || req.RequestURI != "http://site.test/" {
			t.Errorf("proxy got %s %s, want GET http://site.test/ in absolute form", req.Method, req.RequestURI)
		}
		if req.Header.Get("Proxy-Authorization") == "" {
			t.Error("the probe carried no Proxy-Authorization")
		}
		if s := state(e, routes[0].ID, "site.test"); s != engine.Healthy {
			t.Errorf("state %v after a 200 probe, want healthy", s)
		}
	})
}

// Probes meet the same admission as users' traffic on every route type:
// through a Direct route at connect time, through a proxy before the proxy
// is asked (Config.Admit). A refused page is no evidence and is never
// reached, nor asked of the proxy; an admitted one is fetched.
func TestProbesPassAdmission(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		tests := []struct {
			desc       string
			proxy      *routetest.Behavior // nil: Direct
			allow      []netip.Prefix
			allowHosts []string
			host       string
			want       engine.State
			reached    bool
		}{
			{desc: "direct, loopback refused at connect", host: "127.0.0.1", want: engine.HalfOpen},
			{desc: "direct, allow-listed name", allowHosts: []string{"localhost"}, host: "localhost", want: engine.Healthy, reached: true},
			{desc: "http proxy, loopback refused", proxy: &routetest.Behavior{}, host: "127.0.0.1", want: engine.HalfOpen},
			{desc: "socks5 proxy, loopback refused", proxy: &routetest.Behavior{Kind: routetest.SOCKS5Proxy}, host: "127.0.0.1", want: engine.HalfOpen},
			{desc: "http proxy, loopback allowed", proxy: &routetest.Behavior{}, allow: loopback, host: "127.0.0.1", want: engine.Healthy, reached: true},
			{desc: "socks5 proxy, loopback allowed", proxy: &routetest.Behavior{Kind: routetest.SOCKS5Proxy}, allow: loopback, host: "127.0.0.1", want: engine.Healthy, reached: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				var hits atomic.Int64
				page := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
				defer page.Close()
				_, port, _ := net.SplitHostPort(page.Listener.Addr().String())
				admission := admit.New(tc.allow, tc.allowHosts)
				cfg := Config{TargetURL: func(string) string { return "http://" + net.JoinHostPort(tc.host, port) + "/" }}
				line, asked := "direct", func() int { return 0 }
				if tc.proxy != nil {
					proxy := routetest.NewProxy(t, *tc.proxy)
					line, asked = proxy.URL.String(), proxy.Requests
					// The gateway's Admit, as far as the name goes.
					cfg.Admit = func(_ context.Context, authority string) (string, error) {
						host, _, _ := net.SplitHostPort(authority)
						return authority, admission.CheckHost(host)
					}
				}
				e, routes := setup(t, line+"\n")
				now := halfOpen(t, e, routes[0].ID, "site.test")
				cfg.Now = func() time.Time { return now }
				p := New(e, exitsOf(t, routes, route.Dialer{Control: admission.DialControl}), cfg)
				answer(t, p)
				if s := state(e, routes[0].ID, "site.test"); s != tc.want {
					t.Errorf("state %v after probes, want %v", s, tc.want)
				}
				if reached := hits.Load() > 0; reached != tc.reached {
					t.Errorf("page reached: %v, want %v", reached, tc.reached)
				}
				if n := asked(); !tc.reached && n > 0 {
					t.Errorf("the proxy was asked %d times for a refused page", n)
				}
			})
		}
	})
}

// probeLog is an Observer keeping what it was told.
type probeLog struct {
	mu  sync.Mutex
	got map[string]engine.Class
}

func (l *probeLog) ObserveProbe(route string, c engine.Class) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = make(map[string]engine.Class)
	}
	l.got[route] = c
}

func (l *probeLog) class(route string) (engine.Class, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.got[route]
	return c, ok
}

// Without a probe URL, the neutral probe of a proxy route is a CONNECT
// through it to a site users' traffic reached: a proxy that refuses the
// route's credentials keeps it cooling after its cooldown, where a TCP
// check let it back to fail users again. A tunnel the proxy refuses or
// cannot build still shows the credentials pass; the authority meets
// admission, and without one known or admitted the CONNECT names the
// reserved one, which admission never sees: a fresh start's candidate
// check catches a wrong password and a silent proxy too.
func TestNeutralProbeConnects(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		echo := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(c, c); c.Close() })
		wrong := func(p *routetest.Proxy) string {
			u := *p.URL
			u.User = url.UserPassword("u", "wrong")
			return u.String()
		}
		refuse := func(context.Context, string) (string, error) {
			return "", &admit.Error{Host: "x", Reason: "test"}
		}
		auth := routetest.Behavior{User: "u", Password: "right"}
		socks := routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: "u", Password: "right"}
		tests := []struct {
			desc      string
			proxy     routetest.Behavior
			line      func(p *routetest.Proxy) string // nil: the proxy's URL
			authority string                          // "-": none known
			admit     func(context.Context, string) (string, error)
			want      engine.State
			class     engine.Class
			asked     string // the authority each probe asked the proxy for; "" none
			checked   bool   // whether it asked for the reserved one instead
		}{
			{desc: "http, right password", proxy: auth, want: engine.Healthy, class: engine.OK, asked: echo},
			{desc: "http, wrong password", proxy: auth, line: wrong, want: engine.Cooling, class: engine.ProxyAuth, asked: echo},
			{desc: "http, every answer 407", proxy: routetest.Behavior{Answer407: true}, want: engine.Cooling, class: engine.ProxyAuth, asked: echo},
			{desc: "https, wrong password", proxy: routetest.Behavior{TLS: true, User: "u", Password: "right"}, line: wrong, want: engine.Cooling, class: engine.ProxyAuth, asked: echo},
			{desc: "socks5, wrong password", proxy: socks, line: wrong, want: engine.Cooling, class: engine.ProxyAuth},
			{desc: "socks5, right password", proxy: socks, want: engine.Healthy, class: engine.OK, asked: echo},
			{desc: "tunnel refused: the credentials passed", proxy: routetest.Behavior{HostStatus: map[string]int{"127.0.0.1": http.StatusBadGateway}}, want: engine.Healthy, class: engine.OK, asked: echo},
			{desc: "no authority known, right password", proxy: auth, authority: "-", want: engine.Healthy, class: engine.OK, checked: true},
			{desc: "no authority known, wrong password", proxy: auth, line: wrong, authority: "-", want: engine.Cooling, class: engine.ProxyAuth, checked: true},
			{desc: "no authority known, Squid's rules", proxy: routetest.Behavior{SSLPortsOnly: true, Answer407: true}, authority: "-", want: engine.Cooling, class: engine.ProxyAuth, checked: true},
			{desc: "no authority known, socks5, right password", proxy: socks, authority: "-", want: engine.Healthy, class: engine.OK, checked: true},
			{desc: "no authority known, socks5, wrong password", proxy: socks, line: wrong, authority: "-", want: engine.Cooling, class: engine.ProxyAuth},
			{desc: "no authority known, silent proxy", proxy: routetest.Behavior{Silent: true}, authority: "-", want: engine.Cooling, class: engine.ProxyTimeout, checked: true},
			{desc: "authority refused by admission", proxy: routetest.Behavior{Answer407: true}, admit: refuse, want: engine.Cooling, class: engine.ProxyAuth, checked: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				proxy := routetest.NewProxy(t, tc.proxy)
				line := proxy.URL.String()
				if tc.line != nil {
					line = tc.line(proxy)
				}
				e, routes := setup(t, line+"\n")
				now := halfOpen(t, e, routes[0].ID, "")
				authority := echo
				if tc.authority == "-" {
					authority = ""
				}
				admitted := []string{}
				var mu sync.Mutex
				admitFn := func(ctx context.Context, a string) (string, error) {
					mu.Lock()
					admitted = append(admitted, a)
					mu.Unlock()
					if tc.admit != nil {
						return tc.admit(ctx, a)
					}
					return a, nil
				}
				obs := &probeLog{}
				d := route.Dialer{Timeouts: route.Timeouts{Dial: time.Second}, TLS: &tls.Config{RootCAs: proxy.CertPool()}}
				p := New(e, exitsOf(t, routes, d), Config{
					Now: func() time.Time { return now }, NeutralAuthority: func() string { return authority },
					Admit: admitFn, Observer: obs, Timeout: time.Second,
				})
				answer(t, p)
				if s := state(e, routes[0].ID, ""); s != tc.want {
					t.Errorf("%v after the neutral probe, want %v", s, tc.want)
				}
				if c, ok := obs.class(routes[0].ID); !ok || c != tc.class {
					t.Errorf("observer told %v (%v), want %v", c, ok, tc.class)
				}
				if checked := proxy.Checks() > 0; checked != tc.checked {
					t.Errorf("proxy asked for the reserved authority: %v, want %v", checked, tc.checked)
				}
				asked := proxy.Asked()
				if tc.asked == "" && len(asked) > 0 || tc.asked != "" && (len(asked) == 0 || slices.ContainsFunc(asked, func(a string) bool { return a != tc.asked })) {
					t.Errorf("proxy asked for %v, want %q for each probe", asked, tc.asked)
				}
				mu.Lock()
				defer mu.Unlock()
				if authority != "" && (len(admitted) == 0 || slices.ContainsFunc(admitted, func(a string) bool { return a != echo })) {
					t.Errorf("admission saw %v, want %s for each probe", admitted, echo)
				}
				if authority == "" && len(admitted) > 0 {
					t.Errorf("admission saw %v, want nothing: the reserved authority reaches nothing", admitted)
				}
			})
		}
	})
}

// A target probe's answer is judged by Config.Judge, as users' answers
// are: a 200 it calls content_invalid keeps the pair out.
func TestTargetProbesAreJudged(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a captcha") }))
		defer page.Close()
		e, routes := setup(t, "direct\n")
		now := halfOpen(t, e, routes[0].ID, "shop.test")
		var judged []string
		p := New(e, exitsOf(t, routes, route.Dialer{}), Config{
			Now:       func() time.Time { return now },
			TargetURL: func(string) string { return page.URL + "/" },
			Judge: func(routeID, target string, resp *http.Response) (engine.Class, time.Duration) {
				body, _ := io.ReadAll(resp.Body)
				judged = append(judged, routeID+" "+target+" "+string(body))
				return engine.ContentInvalid, 0
			},
		})
		answer(t, p)
		if want := routes[0].ID + " shop.test a captcha"; len(judged) != 1 || judged[0] != want {
			t.Errorf("judged %q, want %q once", judged, want)
		}
		if s := state(e, routes[0].ID, "shop.test"); s != engine.Cooling {
			t.Errorf("shop.test: %v after a probe judged content_invalid, want cooling", s)
		}
	})
}

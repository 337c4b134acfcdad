package gateway

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// env is a gateway under test: the engine, the routes in list order, and
// the gateway served on 127.0.0.1.
type env struct {
	e      *engine.Engine
	g      *Gateway
	routes []*route.Route
	url    *url.URL // the gateway's address, as clients name their proxy
	events *engine.Subscription
}

// newEnv starts a gateway over the routes of lines (proxy-list syntax).
// Selection is round-robin in list order, so which route an attempt takes
// is known in advance.
func newEnv(t testing.TB, cfg Config, lines ...string) *env {
	t.Helper()
	return newEnvEngine(t, engine.Config{Picker: &engine.RoundRobin{}, Seed: 1, MaxRemovedShare: -1}, cfg, lines...)
}

// newEnvEngine is newEnv over an engine configured with ecfg.
func newEnvEngine(t testing.TB, ecfg engine.Config, cfg Config, lines ...string) *env {
	t.Helper()
	e, err := engine.New(ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{e: e, events: e.Subscribe(4096)}
	for _, line := range lines {
		v.addRoute(t, line)
	}
	if v.g, err = New(cfg, e, v.routes); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v.g)
	t.Cleanup(v.g.Close)
	t.Cleanup(srv.Close)
	v.url, _ = url.Parse(srv.URL)
	return v
}

// addRoute adds the route of a list line to the engine and, once the
// gateway runs, to the gateway.
func (v *env) addRoute(t testing.TB, line string) {
	t.Helper()
	list, err := route.ParseList("test", []byte(line))
	if err != nil || len(list) != 1 {
		t.Fatalf("route line %q: %v", line, err)
	}
	r := &list[0]
	if err := v.e.AddRoute(time.Now(), r.Spec()); err != nil {
		t.Fatal(err)
	}
	v.routes = append(v.routes, r)
	if v.g != nil {
		routes, _, err := v.g.Routes().Next(v.routes)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.g.Update(routes, v.g.cfg.Users, v.g.cfg.Targets); err != nil {
			t.Fatal(err)
		}
	}
}

// proxyLine is the list line of a fake proxy, with optional labels.
func proxyLine(p *routetest.Proxy, labels string) string {
	return strings.TrimSpace(p.URL.String() + " " + labels)
}

// client returns a client of the gateway; user, when set, is the proxy
// username (and "pw" the password).
func (v *env) client(t testing.TB, user string) *http.Client {
	t.Helper()
	u := *v.url
	if user != "" {
		u.User = url.UserPassword(user, "pw")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(&u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// id is the id of the i-th route.
func (v *env) id(i int) string { return v.routes[i].ID }

// deadline is the engine's deadline now for an attempt through route i
// to addr, a host:port.
func (v *env) deadline(i int, addr string) time.Duration {
	host, _, _ := net.SplitHostPort(addr)
	d, _ := v.e.Timing(time.Now(), engine.Lease{Route: v.id(i), Target: target.DefaultKey(host)}, v.g.cfg.AttemptTimeout)
	return d
}

// pair returns route i's record for target, if it has one.
func (v *env) pair(t *testing.T, i int, target string) (engine.PairStatus, bool) {
	t.Helper()
	st, ok := v.e.Route(v.id(i))
	if !ok {
		t.Fatalf("route %s unknown", v.id(i))
	}
	for _, p := range st.Targets {
		if p.Target == target {
			return p, true
		}
	}
	return engine.PairStatus{}, false
}

// waitOutcome waits (bounded) for an outcome event of class c on route i.
func (v *env) waitOutcome(t *testing.T, i int, c engine.Class) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := v.events.Next(ctx)
		if err != nil {
			t.Fatalf("no %v outcome on route %s: %v", c, v.id(i), err)
		}
		if ev.Kind == engine.EventOutcome && ev.Route == v.id(i) && ev.Class == c {
			return
		}
	}
}

// waitReported waits (bounded) for n outcome events of class c, on any
// route. A winner is reported once its body has been relayed, which the
// client may finish reading before the gateway gets there: a test that
// counts leases after a request waits for its report first.
func (v *env) waitReported(t *testing.T, c engine.Class, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for n > 0 {
		ev, err := v.events.Next(ctx)
		if err != nil {
			t.Fatalf("%d %v outcomes still to come: %v", n, c, err)
		}
		if ev.Kind == engine.EventOutcome && ev.Class == c {
			n--
		}
	}
}

// waitPairState waits (bounded) until route i's pair with target is in
// state st: already, or by a state event to come.
func (v *env) waitPairState(t *testing.T, i int, target string, st engine.State) {
	t.Helper()
	if p, ok := v.pair(t, i, target); ok && p.Health.State == st {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := v.events.Next(ctx)
		if err != nil {
			t.Fatalf("route %s at %s not %v: %v", v.id(i), target, st, err)
		}
		if ev.Kind == engine.EventState && ev.Route == v.id(i) && ev.Target == target && ev.To == st {
			return
		}
	}
}

// site is an HTTP server on 127.0.0.1 whose handler sees the hit number
// (1-based) of each request.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func newTarget(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *site {
	t.Helper()
	tg := &site{}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(int(tg.hits.Add(1)), w, r)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *site) Hits() int { return int(tg.hits.Load()) }

// raw sends a request as written to addr and reads the answer: for what
// Go's client will not send (origin-form to a proxy, absolute https://).
func raw(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	resp, _ := rawConn(t, addr, req)
	return resp
}

// rawConn is raw, with the rest of the connection: after a CONNECT
// answered 200, the tunnel.
func rawConn(t *testing.T, addr, req string) (*http.Response, *bufio.ReadWriter) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(req)[0]})
	if err != nil {
		t.Fatal(err)
	}
	return resp, bufio.NewReadWriter(br, bufio.NewWriter(c))
}

// health is route i's global record.
func (v *env) health(t *testing.T, i int) engine.Health {
	t.Helper()
	st, ok := v.e.Route(v.id(i))
	if !ok {
		t.Fatalf("route %s unknown", v.id(i))
	}
	return st.Health
}

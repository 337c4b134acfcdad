package route_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// sharedGet GETs http://target/path through x, its body read to the end,
// and returns the body.
func sharedGet(t *testing.T, x *route.Exit, target, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+path, nil)
	resp, err := x.RoundTrip(req, new(route.Progress))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// sharedExit is the exit of the route on line, dialling through u.
func sharedExit(t *testing.T, line string, u *route.Upstream, roots *tls.Config) *route.Exit {
	t.Helper()
	list, err := route.ParseList("shared", []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	x, err := route.NewExit(&list[0], route.Dialer{Upstream: u, TLS: roots})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// Routes naming the same proxy with the same credentials share its
// connections through an Upstream; other credentials, another scheme (TLS
// to an HTTPS proxy) or another proxy get connections of their own.
func TestUpstreamSharesPerProxyAndCredentials(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		target := pageTarget(t)
		plain := routetest.NewProxy(t, routetest.Behavior{KeepAlive: true})
		secure := routetest.NewProxy(t, routetest.Behavior{KeepAlive: true, TLS: true})
		roots := &tls.Config{RootCAs: secure.CertPool()}
		u := route.NewUpstream(0, 0)
		defer u.CloseIdleConnections()
		host, sHost := plain.URL.Host, secure.URL.Host
		steps := []struct {
			line string
			open int64 // connections open once the request is done
		}{
			{"http://alice:pw@" + host + " id=a", 1},
			{"http://alice:pw@" + host + " id=b region=eu", 1}, // same proxy, same credentials: shared
			{"http://alice:pw@" + host + " id=a2", 1},
			{"http://bob:pw@" + host + " id=c", 2}, // other credentials
			{"https://alice:pw@" + sHost + " id=d", 3},
			{"https://alice:pw@" + sHost + " id=e", 3},
			{"direct id=f", 4},
			{"direct id=g", 4}, // the gateway's own connection to the target, either way
		}
		for _, s := range steps {
			x := sharedExit(t, s.line, u, roots)
			if got := sharedGet(t, x, target, "/x"); got != "hello /x" {
				t.Fatalf("%s: body %q", s.line, got)
			}
			if got := u.Open(); got != s.open {
				t.Errorf("after %s: %d shared connections open, want %d", s.line, got, s.open)
			}
		}
		if n := plain.Requests(); n != 4 {
			t.Errorf("the HTTP proxy carried %d requests, want 4", n)
		}
		u.CloseIdleConnections()
		if got := u.Open(); got != 0 {
			t.Errorf("%d shared connections open once idle ones are closed, want 0", got)
		}
	})
}

// An Upstream keeps at most its cap of connections idle across all
// routes, closing the least recently used: a pool of many routes holds
// the cap's worth of descriptors, not one set per route.
func TestUpstreamCapsIdleAcrossRoutes(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const routes, capacity = 6, 2
		target := pageTarget(t)
		u := route.NewUpstream(capacity, 0)
		defer u.CloseIdleConnections()
		exits := make([]*route.Exit, routes)
		for i := range exits {
			exits[i] = sharedExit(t, routetest.NewProxy(t, routetest.Behavior{KeepAlive: true}).URL.String(), u, nil)
		}
		for round := range 2 {
			for i, x := range exits {
				sharedGet(t, x, target, fmt.Sprintf("/%d/%d", round, i))
				if got, want := u.Open(), min(int64(i+1), capacity); round == 0 && got != want {
					t.Errorf("after route %d: %d connections open, want %d", i, got, want)
				}
			}
		}
		if got := u.Open(); got != capacity {
			t.Errorf("%d connections open at rest, want the cap, %d", got, capacity)
		}
	})
}

// The streams SOCKS5 routes keep to their targets are kept in the same
// pool as every other connection, under the same cap: a pool of many
// SOCKS5 routes holds the cap's worth of descriptors too, and they are
// counted in Open.
func TestUpstreamBoundsSOCKS5Routes(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const routes, capacity = 6, 2
		target := pageTarget(t)
		u := route.NewUpstream(capacity, 0)
		defer u.CloseIdleConnections()
		proxies := make([]*routetest.Proxy, routes)
		exits := make([]*route.Exit, routes)
		for i := range exits {
			proxies[i] = routetest.NewProxy(t, routetest.Behavior{Kind: routetest.SOCKS5Proxy})
			exits[i] = sharedExit(t, proxies[i].URL.String(), u, nil)
		}
		for i, x := range exits {
			sharedGet(t, x, target, fmt.Sprintf("/%d", i))
			if got, want := u.Open(), min(int64(i+1), capacity); got != want {
				t.Errorf("after route %d: %d connections open, want %d", i, got, want)
			}
		}
		sharedGet(t, exits[routes-1], target, "/again") // its kept stream
		if got := u.Open(); got != capacity {
			t.Errorf("%d connections open after a kept stream's request, want %d", got, capacity)
		}
		if n := proxies[routes-1].Requests(); n != 1 {
			t.Errorf("the last route's proxy opened %d sessions for two requests, want 1, kept", n)
		}
	})
}

// However routes share the Upstream, a request leaves through its own
// route: a Direct request never rides a proxy's connection, a proxied one
// never the gateway's own, and a SOCKS5 route's streams are its own.
func TestUpstreamKeepsRoutesApart(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		target := pageTarget(t)
		p := routetest.NewProxy(t, routetest.Behavior{KeepAlive: true})
		socks := routetest.NewProxy(t, routetest.Behavior{Kind: routetest.SOCKS5Proxy})
		u := route.NewUpstream(0, 0)
		defer u.CloseIdleConnections()
		direct := sharedExit(t, "direct", u, nil)
		proxied := sharedExit(t, p.URL.String(), u, nil)
		viaSocks := sharedExit(t, socks.URL.String(), u, nil)
		for i := range 3 {
			sharedGet(t, direct, target, "/d")
			sharedGet(t, proxied, target, "/p")
			sharedGet(t, viaSocks, target, "/s")
			if n := p.Requests(); n != i+1 {
				t.Fatalf("round %d: the HTTP proxy saw %d requests, want %d", i, n, i+1)
			}
			if n := socks.Requests(); n != 1 {
				t.Fatalf("round %d: the SOCKS5 proxy opened %d sessions, want 1, kept alive", i, n)
			}
		}
		if got := u.Open(); got != 3 {
			t.Errorf("%d connections open, want 3: the proxy's, the direct one and the SOCKS5 route's own", got)
		}
	})
}

// The cap on open upstream connections counts tunnels and pooled
// connections alike, refuses past it as the gateway's own limit (Local
// "upstream_cap", no dial made), and frees a slot as a connection closes.
func TestUpstreamCapsOpenConnections(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		target := pageTarget(t)
		proxy := routetest.NewProxy(t, routetest.Behavior{KeepAlive: true})
		u := route.NewUpstream(0, 2)
		defer u.CloseIdleConnections()
		x := sharedExit(t, proxy.URL.String(), u, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		tunnel, err := x.DialTarget(ctx, target, new(route.Progress))
		if err != nil {
			t.Fatal(err)
		}
		if got := sharedGet(t, x, target, "/a"); got != "hello /a" { // a pooled connection, kept idle
			t.Fatalf("GET through the exit: %q", got)
		}
		if n := u.Open(); n != 2 {
			t.Fatalf("Open() = %d with a tunnel and an idle connection, want 2", n)
		}
		dials := proxy.Requests()
		_, err = x.DialTarget(ctx, target, new(route.Progress))
		var re *route.Error
		if !errors.As(err, &re) || re.Local != "upstream_cap" || !errors.Is(err, route.ErrUpstreamCap) || route.LocalReason(err) != "upstream_cap" {
			t.Fatalf("a third connection: %v, want the cap's local error", err)
		}
		if got := proxy.Requests(); got != dials {
			t.Errorf("the refused connection reached the proxy: %d requests, want %d", got, dials)
		}
		tunnel.Close()
		tunnel, err = x.DialTarget(ctx, target, new(route.Progress))
		if err != nil {
			t.Fatalf("after a tunnel closed: %v", err)
		}
		tunnel.Close()
		if n := u.Open(); n != 1 {
			t.Errorf("Open() = %d once the tunnels closed, want 1 (the idle one)", n)
		}
	})
}

// A pool carrying many requests at once keeps a connection for each of
// them, within the Upstream's cap: one busy route (a provider's gateway)
// does not close what a per-pool bound would refuse after every answer
// and dial it again for the next request. A SOCKS5 route's streams to one
// target alike.
func TestUpstreamKeepsABusyPoolsConnections(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind routetest.Kind
	}{{"http", routetest.HTTPProxy}, {"socks5", routetest.SOCKS5Proxy}} {
		t.Run(tc.name, func(t *testing.T) { keepsABusyPoolsConnections(t, tc.kind) })
	}
}

func keepsABusyPoolsConnections(t *testing.T, kind routetest.Kind) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const parallel = 24 // more than a route's own transport keeps
		site := newAtOnce(t, parallel, 2)
		proxy := routetest.NewProxy(t, routetest.Behavior{Kind: kind, KeepAlive: true})
		u := route.NewUpstream(0, 0)
		defer u.CloseIdleConnections()
		x := sharedExit(t, proxy.URL.String(), u, nil)
		for round := range 2 {
			site.round(t, x, round)
			if got := u.Open(); got != parallel {
				t.Errorf("round %d: %d connections open at rest after %d requests at once, want %d", round, got, parallel, parallel)
			}
		}
	})
}

// atOnce is a site that answers the requests of a round only once all n
// are in, so that they are in flight together.
type atOnce struct {
	n       int
	addr    string
	arrived sync.WaitGroup
	rounds  []chan struct{} // closed as each round's requests are all in
}

func newAtOnce(t *testing.T, n, rounds int) *atOnce {
	a := &atOnce{n: n, rounds: make([]chan struct{}, rounds)}
	for i := range a.rounds {
		a.rounds[i] = make(chan struct{})
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.arrived.Done()
		select {
		case <-a.rounds[r.URL.Path[1]-'0']:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(ts.Close)
	a.addr = ts.Listener.Addr().String()
	return a
}

// round sends the n requests of round r through x at once, and returns
// once all are answered.
func (a *atOnce) round(t *testing.T, x *route.Exit, r int) {
	t.Helper()
	a.arrived.Add(a.n)
	var done sync.WaitGroup
	for i := range a.n {
		done.Go(func() {
			if got := sharedGet(t, x, a.addr, fmt.Sprintf("/%d/%d", r, i)); got != "ok" {
				t.Errorf("body %q", got)
			}
		})
	}
	a.arrived.Wait()
	close(a.rounds[r])
	done.Wait()
}

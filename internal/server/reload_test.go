package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// configOf is the default configuration over a list of route lines.
func configOf(t testing.TB, lines string) *config.Config {
	t.Helper()
	routes, err := route.ParseList("test", []byte(lines))
	if err != nil {
		t.Fatal(err)
	}
	return config.WithRoutes(routes)
}

// A reload keeps the evidence of routes whose id is unchanged, drains the
// removed ones (their requests in flight finish), adds new ones, and swaps
// users; a route listed again comes back.
func TestReload(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		release := make(chan struct{})
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
			io.WriteString(w, "ok")
		}))
		defer site.Close()
		pa, pb, pc := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		before := pa.URL.String() + " id=a region=us\n" + pb.URL.String() + " id=b region=eu\n"
		after := pa.URL.String() + " id=a region=eu max_inflight=5\n" + pc.URL.String() + " id=c region=eu\n"

		proxy := listen(t)
		first := configOf(t, before)
		first.Engine.MaxRemovedShare = -1 // let one of two routes cool
		s, err := New(first, Listeners{Proxy: proxy}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, 5*time.Second) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.Addr().String()})}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		get := func(path, labels string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", site.URL+path, nil)
			req.Header.Set("X-Switchyard-Labels", labels)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}

		// Evidence on a: it cools.
		e := s.Engine()
		waitChecked(t, e)
		now := time.Now()
		for range 2 {
			l, err := e.Acquire(now, engine.Request{Target: "example.com", Labels: engine.Labels{{Key: "region", Value: "us"}}})
			if err != nil || l.Route != "a" {
				t.Fatalf("lease %+v, %v", l, err)
			}
			e.Report(now, l, engine.Outcome{Class: engine.ProxyConnectFailed})
		}
		cooled, _ := e.Route("a")
		if cooled.Health.State != engine.Cooling {
			t.Fatalf("a is %v after two refusals", cooled.Health.State)
		}

		// A request in flight through b while b is removed.
		inFlight := make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequest("GET", site.URL+"/slow", nil)
			req.Header.Set("X-Switchyard-Labels", "region=eu")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
			}
			inFlight <- resp
		}()
		waitFor(t, func() bool { st, _ := e.Route("b"); return st.Inflight == 1 })

		next := configOf(t, after)
		next.Engine = first.Engine
		next.Users = []config.User{{Name: "alice", Password: config.LiteralSecret("pw")}}
		if err := s.Reload(next); err != nil {
			t.Fatal(err)
		}
		a, _ := e.Route("a")
		if a.Health.State != engine.Cooling || a.Health.Samples != cooled.Health.Samples || a.Labels.String() != "region=eu" {
			t.Errorf("a after reload: %v, %d samples, labels %v; want cooling, %d samples, region=eu", a.Health.State, a.Health.Samples, a.Labels, cooled.Health.Samples)
		}
		if spec, _ := e.RouteSpec("a"); spec.MaxInflight != 5 {
			t.Errorf("a's max_inflight %d, want 5", spec.MaxInflight)
		}
		if b, _ := e.Route("b"); b.Health.State != engine.Draining {
			t.Errorf("b after its removal: %v, want draining", b.Health.State)
		}
		if resp := get("/", "region=eu"); resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("no credentials after users were added: %d, want 407", resp.StatusCode)
		}
		close(release)
		if resp := <-inFlight; resp == nil || resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Route") != "b" {
			t.Errorf("the request in flight through b: %+v", resp)
		} else {
			resp.Body.Close()
		}

		// Without users again, requests go to c: a cools, b drains.
		next.Users = nil
		if err := s.Reload(next); err != nil {
			t.Fatal(err)
		}
		// c takes traffic once its first check passed; before that the
		// region has no judged usable route and panics across a and c.
		waitChecked(t, e)
		for range 5 {
			if resp := get("/", "region=eu"); resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Route") != "c" {
				t.Fatalf("after the reload: %d via %q, want 200 via c", resp.StatusCode, resp.Header.Get("X-Switchyard-Route"))
			}
		}
		if pb.Requests() != 1 {
			t.Errorf("b carried %d requests, want only the one in flight", pb.Requests())
		}

		// b listed again comes back; c removed drains.
		if err := s.Reload(first); err != nil {
			t.Fatal(err)
		}
		if b, _ := e.Route("b"); b.Health.State == engine.Draining {
			t.Error("b still draining after it was listed again")
		}
		if c, _ := e.Route("c"); c.Health.State != engine.Draining {
			t.Errorf("c after its removal: %v", c.Health.State)
		}
	})
}

// waitChecked waits until every route of e has had the check a new route
// gets before users' traffic.
func waitChecked(t *testing.T, e *engine.Engine) {
	t.Helper()
	waitFor(t, func() bool {
		for _, st := range e.Routes() {
			if st.Health.State == engine.Candidate {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every reload that leaves a restart-only section different from the
// running process says so, in the log, in /readyz and in the metrics,
// until a reload puts the section back.
func TestReloadSaysRestartRequiredEveryTime(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		out := &logtest.Buffer{}
		g := runServer(t, configOf(t, "direct\n"), slog.New(slog.NewTextHandler(out, nil)))
		steps := []struct {
			desc   string
			change func(*config.Config)
			want   []string // sections still to apply
		}{
			{"a restart-only change", func(c *config.Config) { c.Retry.MaxAttempts = 5 }, []string{"retry"}},
			{"the same file again", func(c *config.Config) { c.Retry.MaxAttempts = 5 }, []string{"retry"}},
			{"another section too", func(c *config.Config) { c.Retry.MaxAttempts, c.Server.IdleTimeout = 5, time.Minute }, []string{"server", "retry"}},
			{"put back, users added", func(c *config.Config) {
				c.Users = []config.User{{Name: "alice", Password: config.LiteralSecret("pw")}}
			}, nil},
		}
		for _, step := range steps {
			next := configOf(t, "direct\n")
			step.change(next)
			out.Take()
			if err := g.s.Reload(next); err != nil {
				t.Fatal(err)
			}
			var warned []string
			for line := range strings.Lines(out.Take()) {
				if _, section, ok := strings.Cut(line, "needs a restart"); ok {
					_, section, _ = strings.Cut(section, "section=")
					warned = append(warned, strings.TrimSpace(section))
				}
			}
			if !slices.Equal(warned, step.want) {
				t.Errorf("%s: warned of %q, want %q", step.desc, warned, step.want)
			}
			wantReady, wantGauge := "ready", 0.0
			if len(step.want) > 0 {
				wantReady, wantGauge = "ready; restart required to apply: "+strings.Join(step.want, ", "), 1
			}
			if got := readyz(t, g.admin); got != wantReady {
				t.Errorf("%s: /readyz %q, want %q", step.desc, got, wantReady)
			}
			if got := g.metric(t, "switchyard_config_restart_required"); got != wantGauge {
				t.Errorf("%s: switchyard_config_restart_required %v, want %v", step.desc, got, wantGauge)
			}
		}
	})
}

// A route whose proxy refuses its credentials raises the alarm: a warning
// once, /readyz and switchyard_routes_proxy_auth_failing; a reload with
// the same credentials warns again at the next refusal, and one with new
// credentials clears it.
func TestProxyAuthAlarmFollowsReloads(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		echo := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(c, c); c.Close() })
		proxy := routetest.NewProxy(t, routetest.Behavior{User: "u", Password: "right"})
		line := func(password string) string {
			u := *proxy.URL
			u.User = url.UserPassword("u", password)
			return u.String() + "\n"
		}
		out := &logtest.Buffer{}
		g := runServer(t, configOf(t, line("wrong")), slog.New(slog.NewTextHandler(out, nil)))
		id := g.s.Engine().Routes()[0].ID
		connect := func() int {
			t.Helper()
			c, br := dialProxy(t, g)
			io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			return resp.StatusCode
		}
		warnings := func() int { return strings.Count(out.Take(), "refuses its credentials") }
		alarm := "ready; 1 route(s) refused by their proxy (407: check their credentials): " + id

		for range 2 {
			if status := connect(); status != http.StatusBadGateway {
				t.Fatalf("CONNECT through a wrong password: %d, want 502", status)
			}
		}
		g.waitMetric(t, "switchyard_routes_proxy_auth_failing", 1)
		if got := readyz(t, g.admin); got != alarm {
			t.Errorf("/readyz %q, want %q", got, alarm)
		}
		if n := warnings(); n != 1 {
			t.Errorf("%d warnings after two refusals, want 1", n)
		}

		// The same credentials again: still failing, warned again.
		if err := g.s.Reload(configOf(t, line("wrong"))); err != nil {
			t.Fatal(err)
		}
		if got := readyz(t, g.admin); got != alarm {
			t.Errorf("after a reload with the same credentials: /readyz %q, want %q", got, alarm)
		}
		connect()
		if n := warnings(); n != 1 {
			t.Errorf("%d warnings after a reload and a refusal, want 1", n)
		}

		// Mended: the alarm is cleared, and the route carries tunnels.
		if err := g.s.Reload(configOf(t, line("right"))); err != nil {
			t.Fatal(err)
		}
		g.waitMetric(t, "switchyard_routes_proxy_auth_failing", 0)
		if got := readyz(t, g.admin); got != "ready" {
			t.Errorf("after the credentials were mended: /readyz %q, want ready", got)
		}
		if status := connect(); status != http.StatusOK {
			t.Errorf("CONNECT after the credentials were mended: %d, want 200", status)
		}
	})
}

// readyz is what admin's /readyz answers, trimmed.
func readyz(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body))
}

// Under metrics.per_route = "auto" the series labelled by route follow
// reloads: there with one route, gone once a reload grows the pool past
// admin.PerRouteAutoMax, while the pool's series count every route.
func TestMetricsPerRouteFollowReloads(t *testing.T) {
	lines := func(n int) string {
		var b strings.Builder
		b.WriteString("direct\n")
		for i := range n {
			fmt.Fprintf(&b, "http://127.0.0.1:1 id=r%d\n", i)
		}
		return b.String()
	}
	configured := func(n int) *config.Config {
		c := configOf(t, lines(n))
		c.Engine.UncheckedCandidates = true // no probes of the unreachable proxies
		return c
	}
	g := runServer(t, configured(0), nil)
	if body := g.metrics(t); !strings.Contains(body, `switchyard_route_score{route="direct"}`) {
		t.Fatalf("no per-route series with one route:\n%s", body)
	}
	if err := g.s.Reload(configured(admin.PerRouteAutoMax)); err != nil {
		t.Fatal(err)
	}
	body := g.metrics(t)
	if strings.Contains(body, `route="`) {
		t.Errorf("series labelled by route at %d routes", admin.PerRouteAutoMax+1)
	}
	if want := fmt.Sprintf(`switchyard_routes{state="candidate"} %d`, admin.PerRouteAutoMax+1); !strings.Contains(body, want) {
		t.Errorf("no %s", want)
	}
}

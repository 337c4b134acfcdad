package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

func TestParseControl(t *testing.T) {
	t.Parallel()
	basic := func(user string) string {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.SetBasicAuth(user, "pw")
		return r.Header.Get("Authorization")
	}
	tests := []struct {
		desc        string
		header      http.Header
		wantSession string
		wantLabels  string
		wantStrict  bool
		wantErr     string
	}{
		{desc: "nothing", header: http.Header{}},
		{desc: "headers", header: http.Header{headerSession: {"abc"}, headerLabels: {"region=us,provider=x"}},
			wantSession: "abc", wantLabels: "provider=x region=us"},
		{desc: "username", header: http.Header{"Proxy-Authorization": {basic("acct-session-abc123-region-us-provider-acme")}},
			wantSession: "abc123", wantLabels: "provider=acme region=us"},
		{desc: "plain username", header: http.Header{"Proxy-Authorization": {basic("alice")}}},
		{desc: "username and header agree", header: http.Header{"Proxy-Authorization": {basic("a-session-s1")}, headerSession: {"s1"}, headerLabels: {"region=us"}},
			wantSession: "s1", wantLabels: "region=us"},
		{desc: "odd parameters", header: http.Header{"Proxy-Authorization": {basic("a-session")}}, wantErr: "key-value pairs"},
		{desc: "two sessions", header: http.Header{"Proxy-Authorization": {basic("a-session-s1")}, headerSession: {"s2"}}, wantErr: "session given twice"},
		{desc: "label twice, differently", header: http.Header{"Proxy-Authorization": {basic("a-region-us")}, headerLabels: {"region=eu"}}, wantErr: "label region given twice, differently, in X-Switchyard-Labels and the proxy username"},
		{desc: "label twice, alike: as a session", header: http.Header{"Proxy-Authorization": {basic("a-region-us-provider-acme")}, headerLabels: {"region=us,tier=1"}},
			wantLabels: "provider=acme region=us tier=1"},
		{desc: "label twice in the header", header: http.Header{headerLabels: {"region=us", "region=us"}}, wantErr: "duplicate"},
		{desc: "label twice in the username", header: http.Header{"Proxy-Authorization": {basic("a-region-us-region-us")}}, wantErr: "duplicate"},
		{desc: "bad label", header: http.Header{headerLabels: {"Region=us"}}, wantErr: "bad labels"},
		{desc: "bad session", header: http.Header{headerSession: {"a/b"}}, wantErr: "session id"},
		{desc: "not basic", header: http.Header{"Proxy-Authorization": {"Bearer x"}}, wantErr: "Basic"},
		{desc: "not base64", header: http.Header{"Proxy-Authorization": {"Basic !!"}}, wantErr: "malformed"},
		{desc: "strict in the username", header: http.Header{"Proxy-Authorization": {basic("a-session-s1-strict-1")}}, wantSession: "s1", wantStrict: true},
		{desc: "strict header", header: http.Header{headerSession: {"s1"}, headerStrict: {"true"}}, wantSession: "s1", wantStrict: true},
		{desc: "strict off", header: http.Header{headerStrict: {"0"}}},
		{desc: "bad strict", header: http.Header{headerStrict: {"yes"}}, wantErr: "X-Switchyard-Strict: want 1 or 0"},
		{desc: "bad strict in the username", header: http.Header{"Proxy-Authorization": {basic("a-strict-2")}}, wantErr: "strict: want 1 or 0"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := parseControl(tc.header)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _ := engine.ParseLabels(tc.wantLabels)
			if c.session != tc.wantSession || fmt.Sprint(c.labels) != fmt.Sprint(want) || c.strict != tc.wantStrict {
				t.Errorf("got session %q labels %v strict %v, want %q %v %v", c.session, c.labels, c.strict, tc.wantSession, want, tc.wantStrict)
			}
		})
	}
}

// What the client sends for the gateway, and what travels for one hop
// only, never reaches the target; what the target sends for one hop, or
// passing for the gateway, never reaches the client.
func TestHeaderHygiene(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		seen := make(chan http.Header, 1)
		tg := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Clone()
			w.Header().Set("Connection", "X-Hop")
			w.Header().Set("X-Hop", "1")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set(headerRoute, "spoofed")
			w.Header().Set("X-Kept", "yes")
		})
		// SOCKS5 tunnels bytes as they are: the target sees what the
		// gateway sent.
		p := routetest.NewProxy(t, routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: "u", Password: "s3cret"})
		v := newEnv(t, Config{}, proxyLine(p, ""))
		req, _ := http.NewRequest("GET", tg.URL, nil)
		req.Header.Set(headerSession, "s1")
		req.Header.Set(headerLabels, "")
		req.Header.Set("X-Switchyard-Other", "x")
		req.Header.Set("Connection", "X-Private")
		req.Header.Set("X-Private", "1")
		req.Header.Set("Proxy-Connection", "keep-alive")
		req.Header.Set("Keep-Alive", "timeout=5")
		req.Header.Set("X-End-To-End", "kept")
		resp, err := v.client(t, "acct").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := <-seen
		for _, h := range []string{headerSession, headerLabels, "X-Switchyard-Other", "Proxy-Authorization", "Connection", "X-Private", "Proxy-Connection", "Keep-Alive"} {
			if v, ok := got[h]; ok {
				t.Errorf("target saw %s: %q", h, v)
			}
		}
		if got.Get("X-End-To-End") != "kept" {
			t.Error("an end-to-end header was dropped")
		}
		for _, h := range []string{"X-Hop", "Keep-Alive"} {
			if v, ok := resp.Header[h]; ok {
				t.Errorf("client saw %s: %q", h, v)
			}
		}
		if resp.Header.Get("X-Kept") != "yes" || resp.Header.Get(headerRoute) != v.id(0) {
			t.Errorf("client headers %v: want X-Kept and the real route id", resp.Header)
		}
		if strings.Contains(fmt.Sprint(resp.Header)+string(body), "s3cret") {
			t.Error("the route's password reached the client")
		}
	})
}

// Sessions stick to their route, labels constrain the choice, and bad
// control is refused before any route is used.
func TestControlRequests(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc       string
			user       string // proxy username
			header     http.Header
			wantStatus int
			wantError  string
			wantRoute  int // -1: any, but the same for every request
		}{
			{desc: "header session sticks", header: http.Header{headerSession: {"s1"}}, wantStatus: 200, wantRoute: -1},
			{desc: "username session sticks", user: "acct-session-s2", wantStatus: 200, wantRoute: -1},
			{desc: "header labels", header: http.Header{headerLabels: {"region=eu,provider=acme"}}, wantStatus: 200, wantRoute: 2},
			{desc: "username labels", user: "acct-region-us", wantStatus: 200, wantRoute: 0},
			{desc: "session with labels", user: "acct-session-s3-region-eu", wantStatus: 200, wantRoute: -1},
			{desc: "no matching route", header: http.Header{headerLabels: {"region=mars"}}, wantStatus: 503, wantError: "no_matching_route"},
			{desc: "bad labels", header: http.Header{headerLabels: {"region"}}, wantStatus: 400, wantError: "bad_request"},
			{desc: "malformed username", user: "acct-region", wantStatus: 400, wantError: "bad_request"},
			{desc: "label in username and header alike", user: "acct-region-us", header: http.Header{headerLabels: {"region=us"}}, wantStatus: 200, wantRoute: 0},
			{desc: "label in username and header differently", user: "acct-region-us", header: http.Header{headerLabels: {"region=eu"}}, wantStatus: 400, wantError: "bad_request"},
			{desc: "session in username and header differently", user: "acct-session-s4", header: http.Header{headerSession: {"s5"}}, wantStatus: 400, wantError: "bad_request"},
			{desc: "a cost tier asked for", header: http.Header{headerLabels: {"tier=1"}}, wantStatus: 200, wantRoute: 2},
			{desc: "a cost tier in the username", user: "acct-tier-1", wantStatus: 200, wantRoute: 2},
			{desc: "a tier above every route's", header: http.Header{headerLabels: {"tier=2"}}, wantStatus: 503, wantError: "no_matching_route"},
			{desc: "a tier that is no tier", header: http.Header{headerLabels: {"tier=residential"}}, wantStatus: 400, wantError: "bad_request"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				p0, p1, p2 := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
				v := newEnv(t, Config{}, proxyLine(p0, "region=us"), proxyLine(p1, "region=eu"), proxyLine(p2, "region=eu provider=acme tier=1"))
				c := v.client(t, tc.user)
				var first string
				for i := range 4 {
					req, _ := http.NewRequest("GET", tg.URL, nil)
					for k, vs := range tc.header {
						req.Header[k] = vs
					}
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tc.wantStatus || resp.Header.Get(headerError) != tc.wantError {
						t.Fatalf("request %d: %d %q (%s), want %d %q", i, resp.StatusCode, resp.Header.Get(headerError), body, tc.wantStatus, tc.wantError)
					}
					if tc.wantStatus != 200 {
						if tg.Hits() != 0 || !strings.HasSuffix(string(body), "\n") || strings.Count(string(body), "\n") != 1 {
							t.Fatalf("refused request reached the target (%d) or body %q is not one line", tg.Hits(), body)
						}
						return
					}
					got := resp.Header.Get(headerRoute)
					if i == 0 {
						first = got
					}
					if got != first || tc.wantRoute >= 0 && got != v.id(tc.wantRoute) {
						t.Fatalf("request %d went through %q (first %q, want route %d)", i, got, first, tc.wantRoute)
					}
				}
			})
		}
	})
}

// A session whose route became unusable is told to restart, not moved to
// another exit; with no usable route at all nothing leaves the gateway.
func TestNoSilentSwitch(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		p0, p1 := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(p0, ""), proxyLine(p1, ""))
		c := v.client(t, "acct-session-s1")
		get := func() *http.Response {
			resp, err := c.Get(tg.URL)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		bound := get().Header.Get(headerRoute)
		if err := v.e.Drain(time.Now(), bound); err != nil {
			t.Fatal(err)
		}
		if resp := get(); resp.StatusCode != 503 || resp.Header.Get(headerError) != "session_restart_required" {
			t.Fatalf("got %d %q, want 503 session_restart_required", resp.StatusCode, resp.Header.Get(headerError))
		}
		for i := range v.routes {
			v.e.Drain(time.Now(), v.id(i))
		}
		c = v.client(t, "")
		if resp := get(); resp.StatusCode != 503 || resp.Header.Get(headerError) != "no_route" {
			t.Fatalf("got %d %q, want 503 no_route", resp.StatusCode, resp.Header.Get(headerError))
		}
		if tg.Hits() != 1 || p0.Requests()+p1.Requests() != 1 {
			t.Errorf("target reached %d times, proxies %d: only the first request may leave", tg.Hits(), p0.Requests()+p1.Requests())
		}
	})
}

// A session's first request whose exit fails is retried on another route,
// like any request, and the session binds to the route that answered: it
// is not bound to the failed exit and refused ever after.
func TestSessionFirstExitFails(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			connect bool
			failing routetest.Behavior
		}{
			{desc: "forward, exit refuses", failing: routetest.Behavior{Refuse: true}},
			{desc: "forward, exit hangs up", failing: routetest.Behavior{Hangup: true}},
			{desc: "CONNECT, exit refuses", connect: true, failing: routetest.Behavior{Refuse: true}},
			{desc: "CONNECT, exit answers 407", connect: true, failing: routetest.Behavior{Answer407: true}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				bad, good := routetest.NewProxy(t, tc.failing), routetest.NewProxy(t, routetest.Behavior{})
				// Round-robin in list order: the first attempt takes the bad exit.
				v := newEnv(t, Config{}, proxyLine(bad, ""), proxyLine(good, ""))
				addr := strings.TrimPrefix(tg.URL, "http://")
				auth := "Proxy-Authorization: " + basic("acct-session-s1", "pw") + "\r\n"
				do := func() *http.Response {
					var req string
					if tc.connect {
						req = "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n" + auth + "\r\n"
					} else {
						req = "GET " + tg.URL + "/ HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n" + auth + "\r\n"
					}
					resp := raw(t, v.url.Host, req)
					if !tc.connect {
						io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
					return resp
				}
				for i := range 4 {
					resp := do()
					if resp.StatusCode != 200 || resp.Header.Get(headerRoute) != v.id(1) {
						t.Fatalf("request %d: %d %q via %q, want 200 via %s", i, resp.StatusCode, resp.Header.Get(headerError), resp.Header.Get(headerRoute), v.id(1))
					}
					if want := map[bool]string{true: "2", false: "1"}[i == 0]; resp.Header.Get(headerAttempts) != want {
						t.Errorf("request %d: %s attempts, want %s", i, resp.Header.Get(headerAttempts), want)
					}
				}
				// Bound now: its exit gone, the session fails loudly.
				if err := v.e.Drain(time.Now(), v.id(1)); err != nil {
					t.Fatal(err)
				}
				if resp := do(); resp.StatusCode != 503 || resp.Header.Get(headerError) != "session_restart_required" {
					t.Fatalf("bound session after its exit left: %d %q, want 503 session_restart_required", resp.StatusCode, resp.Header.Get(headerError))
				}
			})
		}
	})
}

// Requests a forward proxy cannot serve are refused with a reason.
func TestBadRequests(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(p, ""))
		tests := []struct{ desc, req, want string }{
			{"origin-form", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "send absolute-form requests or CONNECT"},
			{"absolute https", "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "use CONNECT"},
			{"other scheme", "GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "unsupported scheme"},
			{"CONNECT without port", "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", "host:port"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				resp := raw(t, v.url.Host, tc.req)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 || !strings.Contains(string(body), tc.want) {
					t.Errorf("got %d %q, want 400 saying %q", resp.StatusCode, body, tc.want)
				}
			})
		}
		if p.Requests() != 0 {
			t.Errorf("%d requests left through the route", p.Requests())
		}
	})
}

// A client that gives up mid-request releases the lease as Canceled: no
// evidence against the route.
func TestClientCancel(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		arrived := make(chan struct{})
		tg := newTarget(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
			close(arrived)
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		v := newEnv(t, Config{}, "direct id=d")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", tg.URL, nil)
		c := v.client(t, "")
		done := make(chan error, 1)
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("the request never reached the target")
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("canceled request succeeded")
		}
		v.waitOutcome(t, 0, engine.Canceled)
		if st, _ := v.e.Route("d"); st.Inflight != 0 || st.Health.ConsecFail != 0 {
			t.Errorf("after cancel: %d in flight, %d failures; want 0 and 0", st.Inflight, st.Health.ConsecFail)
		}
	})
}

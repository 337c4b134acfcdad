package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// paceAll paces every target with l.
func paceAll(l pacing.Limits) *target.Rules {
	return target.New([]target.Rule{{Hosts: []string{"*"}, Policy: target.Policy{Pace: l}}})
}

// Paced requests get 429 with Retry-After and leave no evidence: nothing
// is leased for them, and a route at its politeness rate is passed over.
func TestPacing(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc       string
			limits     pacing.Limits
			routes     int
			requests   int
			wantStatus []int
			wantReason string
			wantRoutes []string // X-Switchyard-Route of the 200s, in order
		}{
			{desc: "rate", limits: pacing.Limits{Rate: 0.5, Burst: 1}, routes: 1, requests: 2,
				wantStatus: []int{200, 429}, wantReason: "(rate); retry after 2s"},
			{desc: "burst", limits: pacing.Limits{Rate: 0.1, Burst: 3}, routes: 1, requests: 4,
				wantStatus: []int{200, 200, 200, 429}, wantReason: "(rate)"},
			{desc: "politeness moves on to another route", limits: pacing.Limits{PairRate: 0.1}, routes: 2, requests: 3,
				wantStatus: []int{200, 200, 429}, wantReason: "(politeness)"},
			{desc: "unpaced", limits: pacing.Limits{}, routes: 1, requests: 5,
				wantStatus: []int{200, 200, 200, 200, 200}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				var lines []string
				var proxies []*routetest.Proxy
				for range tc.routes {
					p := routetest.NewProxy(t, routetest.Behavior{})
					proxies = append(proxies, p)
					lines = append(lines, proxyLine(p, ""))
				}
				v := newEnv(t, Config{Targets: paceAll(tc.limits)}, lines...)
				client := v.client(t, "")
				carried := 0
				for i, want := range tc.wantStatus {
					resp, err := client.Get(tg.URL + "/")
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != want {
						t.Fatalf("request %d: %d %s, want %d", i+1, resp.StatusCode, body, want)
					}
					if want == 200 {
						carried++
						continue
					}
					if resp.Header.Get("Retry-After") == "" || resp.Header.Get(headerError) != "paced" || !strings.Contains(string(body), tc.wantReason) {
						t.Errorf("request %d: Retry-After %q, error %q, body %q; want a wait, paced, %q", i+1, resp.Header.Get("Retry-After"), resp.Header.Get(headerError), body, tc.wantReason)
					}
				}
				if tg.Hits() != carried {
					t.Errorf("the site saw %d requests, want %d", tg.Hits(), carried)
				}
				v.waitReported(t, engine.OK, carried)
				for _, st := range v.e.Routes() {
					if st.Health.ConsecFail != 0 || st.Inflight != 0 {
						t.Errorf("route %s: %d failures, %d in flight: pacing left evidence or a lease", st.ID, st.Health.ConsecFail, st.Inflight)
					}
				}
				total := 0
				for _, p := range proxies {
					total += p.Requests()
				}
				if total != carried {
					t.Errorf("proxies carried %d requests, want %d", total, carried)
				}
			})
		}
	})
}

// Concurrency: a request over the bound waits up to MaxWait for a slot,
// then is refused; a CONNECT tunnel holds its slot while it lives.
func TestPacingConcurrency(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{}, 4)
		tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				entered <- struct{}{}
				<-release
			}
		})
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{Targets: paceAll(pacing.Limits{MaxConcurrent: 1, MaxWait: 100 * time.Millisecond})}, proxyLine(p, ""))
		client := v.client(t, "")
		slow := make(chan int, 1)
		go func() {
			resp, err := client.Get(tg.URL + "/slow")
			if err != nil {
				t.Error(err)
				slow <- 0
				return
			}
			resp.Body.Close()
			slow <- resp.StatusCode
		}()
		<-entered
		resp, err := client.Get(tg.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("over the bound: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		close(release)
		if code := <-slow; code != 200 {
			t.Errorf("the request holding the slot: %d", code)
		}
		resp, err = client.Get(tg.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("after the slot was freed: %d", resp.StatusCode)
		}

		// A tunnel holds the slot until it ends.
		addr := tg.Listener.Addr().String()
		tunnel := raw(t, v.url.Host, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if tunnel.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", tunnel.StatusCode)
		}
		second := raw(t, v.url.Host, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if second.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a second tunnel while the first lives: %d, want 429", second.StatusCode)
		}
	})
}

// What a client is told when no route can take its request now.
func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
	}{
		{engine.ErrNoRoute, 503, "no_route", ""},
		{engine.ErrBusy, 503, "busy", ""},
		{&unavailableError{err: engine.ErrNoRoute, retryAfter: 2100 * time.Millisecond}, 503, "no_route", "3"},
		{&unavailableError{err: engine.ErrBusy, retryAfter: 80 * time.Millisecond}, 503, "busy", "1"},
		{&unavailableError{err: engine.ErrNoRoute}, 503, "no_route", "1"},
		{engine.ErrNoMatch, 503, "no_matching_route", ""},
		{engine.ErrSessionRestartRequired, 503, "session_restart_required", ""},
		{engine.ErrPaced, 429, "paced", "1"},
		{&engine.PacedError{RetryAfter: 2300 * time.Millisecond}, 429, "paced", "3"},
		{&pacing.Error{Target: "s.com", Reason: "rate", RetryAfter: 2500 * time.Millisecond}, 429, "paced", "3"},
	}
	for _, tc := range tests {
		w := httptest.NewRecorder()
		acquireError(w, nil, tc.err)
		if w.Code != tc.wantStatus || w.Header().Get(headerError) != tc.wantCode || w.Header().Get("Retry-After") != tc.wantRetry {
			t.Errorf("%v: %d %q Retry-After %q; want %d %q %q", tc.err, w.Code, w.Header().Get(headerError), w.Header().Get("Retry-After"), tc.wantStatus, tc.wantCode, tc.wantRetry)
		}
	}
}

// A request whose target has every route at its learned rate waits for the
// first to be ready when that is within LearnedMaxWait, and is told to
// come back when it is not.
func TestLearnedPacingWait(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc       string
			paceStart  float64 // the rate a 429 teaches: the wait for the next token
			wait       time.Duration
			wantStatus int
		}{
			{"a token within the wait: the request waits for it", 2, 10 * time.Second, http.StatusOK},
			{"a token beyond the wait: 429 at once", 0.1, time.Second, http.StatusTooManyRequests},
			{"no wait: 429 at once", 0.1, 0, http.StatusTooManyRequests},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				p := routetest.NewProxy(t, routetest.Behavior{})
				v := newEnvEngine(t, engine.Config{Seed: 1, MaxRemovedShare: -1, PaceStart: tc.paceStart},
					Config{LearnedMaxWait: tc.wait}, proxyLine(p, ""))
				client := v.client(t, "")
				get := func() (*http.Response, string) {
					t.Helper()
					resp, err := client.Get(tg.URL + "/")
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					return resp, string(body)
				}
				if resp, body := get(); resp.StatusCode != http.StatusOK {
					t.Fatalf("first request: %d %s", resp.StatusCode, body)
				}
				// The site's 429 to the route, as the engine hears of it:
				// a rate of paceStart, its token spent.
				site := target.DefaultKey(tg.URL[len("http://"):strings.LastIndexByte(tg.URL, ':')])
				fed := time.Now()
				if err := v.e.Feedback(fed, v.e.Routes()[0].ID, site, engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Nanosecond}); err != nil {
					t.Fatal(err)
				}
				resp, body := get()
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("paced request: %d %s, want %d", resp.StatusCode, body, tc.wantStatus)
				}
				if tc.wantStatus == http.StatusOK {
					// The next token is 1/paceStart after the 429.
					if waited, ready := time.Since(fed), time.Duration(float64(time.Second)/tc.paceStart); waited < ready*4/5 || tg.Hits() != 2 {
						t.Errorf("answered %v after the 429 (token at %v), site hits %d: want it to wait for the token, 2 hits", waited, ready, tg.Hits())
					}
				}
				if tc.wantStatus == http.StatusTooManyRequests {
					if resp.Header.Get(headerError) != "paced" || resp.Header.Get("Retry-After") == "" || tg.Hits() != 1 {
						t.Errorf("refused with %q, Retry-After %q, site hits %d: want paced, a wait, 1", resp.Header.Get(headerError), resp.Header.Get("Retry-After"), tg.Hits())
					}
				}
			})
		}
	})
}

// The request log line of a 429 paced says which pacing held the request
// back and the wait: the engine's, learned from the site's own 429s, or
// the operator's [[targets]] limits, with their reason.
func TestPacedIsLoggedWithItsReason(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			learned bool
			limits  pacing.Limits
			connect bool
			want    []string // in the paced request's line
		}{
			{desc: "operator rate", limits: pacing.Limits{Rate: 0.5, Burst: 1}, want: []string{"status=429", "pacing=operator", "paced=rate", "retry_after_ms=1"}},
			{desc: "operator rate, CONNECT", limits: pacing.Limits{Rate: 0.5, Burst: 1}, connect: true, want: []string{"status=429", "pacing=operator", "paced=rate", "retry_after_ms=1"}},
			{desc: "operator politeness", limits: pacing.Limits{PairRate: 0.1}, want: []string{"status=429", "pacing=operator", "paced=politeness", "retry_after_ms="}},
			{desc: "learned from the site's 429s", learned: true, want: []string{"status=429", "pacing=learned", "paced=learned", "retry_after_ms="}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				var out logtest.Buffer
				cfg := Config{Log: slog.New(slog.NewTextHandler(&out, nil))}
				ecfg := engine.Config{Seed: 1, MaxRemovedShare: -1}
				if tc.learned {
					ecfg.PaceStart = 0.1
				} else {
					cfg.Targets = paceAll(tc.limits)
				}
				v := newEnvEngine(t, ecfg, cfg, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
				addr := strings.TrimPrefix(tg.URL, "http://")
				do := func() int {
					t.Helper()
					if tc.connect {
						c, _, resp := connect(t, v, addr)
						c.Close()
						return resp.StatusCode
					}
					resp, err := v.client(t, "").Get(tg.URL + "/")
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					return resp.StatusCode
				}
				if status := do(); status != http.StatusOK {
					t.Fatalf("first request: %d", status)
				}
				if tc.learned {
					site := target.DefaultKey(addr[:strings.LastIndexByte(addr, ':')])
					if err := v.e.Feedback(time.Now(), v.id(0), site, engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Nanosecond}); err != nil {
						t.Fatal(err)
					}
				}
				out.Take()
				if status := do(); status != http.StatusTooManyRequests {
					t.Fatalf("second request: %d, want 429", status)
				}
				line := requestLine(t, &out)
				for _, w := range tc.want {
					if !strings.Contains(line, w) {
						t.Errorf("line %q lacks %q", line, w)
					}
				}
			})
		}
	})
}

// requestLine waits (bounded) for the request's log line, which is
// written as the handler returns, after the client has its answer.
func requestLine(t *testing.T, out *logtest.Buffer) string {
	t.Helper()
	var line string
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(line, "msg=request"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no request line")
		}
		line += out.Take()
	}
	return line
}

// A request's first attempt whose lease reserved a fast route's next
// token (engine.Lease.Delay), the only route ready being far slower, is
// sent through the fast route when the token comes; the wait is told to
// the Observer and written in the request's log line.
func TestReservedTokenIsWaitedFor(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		fast, slow := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		obs := &recorder{}
		var out logtest.Buffer
		v := newEnvEngine(t, engine.Config{Seed: 1, MaxRemovedShare: -1, PanicThreshold: -1, PaceStart: 0.5},
			Config{Observer: obs, Log: slog.New(slog.NewTextHandler(&out, nil))}, proxyLine(fast, ""), proxyLine(slow, ""))
		site := target.DefaultKey(tg.URL[len("http://"):strings.LastIndexByte(tg.URL, ':')])
		routes := v.e.Routes()
		// What the engine knows: the fast route answers in 2 s, the slow
		// one in 20 (only ratios matter), and the fast one had a 429 1.5 s
		// ago, which holds it to a token every 2 s: its next in 0.5 s.
		now := time.Now()
		for i, lat := range []time.Duration{2 * time.Second, 20 * time.Second} {
			for range 5 {
				if err := v.e.Feedback(now, routes[i].ID, site, engine.Outcome{Class: engine.OK, Latency: lat}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := v.e.Feedback(now.Add(-1500*time.Millisecond), routes[0].ID, site, engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Nanosecond}); err != nil {
			t.Fatal(err)
		}
		resp, err := v.client(t, "").Get(tg.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(now)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Switchyard-Route") != routes[0].ID || took < 400*time.Millisecond {
			t.Fatalf("%d %s through %q after %v; want 200 through the fast route %s once its token came, 0.5 s on",
				resp.StatusCode, body, resp.Header.Get("X-Switchyard-Route"), took, routes[0].ID)
		}
		// The wait is counted, and the request's log line says it.
		obs.mu.Lock()
		reserved := slices.Clone(obs.reserved)
		obs.mu.Unlock()
		if len(reserved) != 1 || reserved[0] < 400*time.Millisecond || reserved[0] > 500*time.Millisecond {
			t.Errorf("reserved waits observed %v, want one of 0.4–0.5 s", reserved)
		}
		line := requestLine(t, &out)
		if !regexp.MustCompile(`reserved_wait_ms=(4\d\d|500)\b`).MatchString(line) {
			t.Errorf("request line %q does not say the 0.4–0.5 s wait (reserved_wait_ms)", line)
		}
	})
}

package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/lookalike"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// TestForward runs one absolute-form request through two routes, chosen
// in order, and checks what the client got, how many attempts it took and
// how often the target was reached.
func TestForward(t *testing.T) {
	healthy := routetest.Behavior{}
	refused := routetest.Behavior{Refuse: true}
	socks := routetest.Behavior{Kind: routetest.SOCKS5Proxy}
	ok := func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") }
	// firstThen answers the first hit with status (and body), later ones 200.
	firstThen := func(status int, header, body string) func(int, http.ResponseWriter, *http.Request) {
		return func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				if k, v, ok := strings.Cut(header, ": "); ok {
					w.Header().Set(k, v)
				}
				w.WriteHeader(status)
			}
			io.WriteString(w, body)
		}
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc         string
			routes       [2]routetest.Behavior
			method, body string
			handler      func(n int, w http.ResponseWriter, r *http.Request)
			signatures   []string
			wantStatus   int
			wantAttempts int
			wantRoute    int    // index of the route that answered
			wantHits     int    // requests the target received
			wantBody     string // prefix of the body the client got
			wantError    string // X-Switchyard-Error
			wantFirst    engine.Class
		}{
			{desc: "dead proxy routed around", routes: [2]routetest.Behavior{refused, healthy},
				method: "GET", handler: ok, wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 1, wantBody: "fine", wantFirst: engine.ProxyConnectFailed},
			{desc: "407 proxy routed around", routes: [2]routetest.Behavior{{Answer407: true, User: "u", Password: "s3cret"}, healthy},
				method: "GET", handler: ok, wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 1, wantBody: "fine", wantFirst: engine.ProxyAuth},
			{desc: "socks5 proxy carries requests", routes: [2]routetest.Behavior{socks, healthy},
				method: "GET", handler: ok, wantStatus: 200, wantAttempts: 1, wantRoute: 0, wantHits: 1, wantBody: "fine", wantFirst: engine.OK},
			{desc: "https proxy carries requests", routes: [2]routetest.Behavior{{TLS: true}, healthy},
				method: "GET", handler: ok, wantStatus: 200, wantAttempts: 1, wantRoute: 0, wantHits: 1, wantBody: "fine", wantFirst: engine.OK},
			{desc: "403 retried elsewhere", routes: [2]routetest.Behavior{healthy, healthy},
				method: "GET", handler: firstThen(403, "", "page"), wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 2, wantBody: "page", wantFirst: engine.Blocked},
			{desc: "block signature is content_invalid", routes: [2]routetest.Behavior{healthy, healthy}, signatures: []string{"captcha"},
				method: "GET", handler: func(n int, w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/html")
					if n == 1 {
						io.WriteString(w, "<p>solve this captcha</p>")
						return
					}
					io.WriteString(w, "<p>the page</p>")
				}, wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "GET retried after a 502", routes: [2]routetest.Behavior{healthy, healthy},
				method: "GET", handler: firstThen(502, "", "x"), wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 2, wantFirst: engine.Target5xx},
			{desc: "POST that reached the target is not re-sent", routes: [2]routetest.Behavior{healthy, healthy},
				method: "POST", body: "order=1", handler: firstThen(502, "", "upstream failed"), wantStatus: 502, wantAttempts: 1, wantRoute: 0, wantHits: 1, wantBody: "upstream failed", wantFirst: engine.Target5xx},
			{desc: "POST retried after a connect failure", routes: [2]routetest.Behavior{refused, healthy},
				method: "POST", body: "order=1", handler: func(_ int, w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					w.Write(b)
				}, wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 1, wantBody: "order=1", wantFirst: engine.ProxyConnectFailed},
			{desc: "PUT body resent on retry", routes: [2]routetest.Behavior{healthy, healthy},
				method: "PUT", body: strings.Repeat("b", 100_000), handler: func(n int, w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					if n == 1 {
						w.WriteHeader(503)
					}
					fmt.Fprintf(w, "got %d", len(b))
				}, wantStatus: 200, wantAttempts: 2, wantRoute: 1, wantHits: 2, wantBody: "got 100000", wantFirst: engine.Target5xx},
			{desc: "404 is the client's: passed on, not retried", routes: [2]routetest.Behavior{healthy, healthy},
				method: "GET", handler: func(_ int, w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
				wantStatus: 404, wantAttempts: 1, wantRoute: 0, wantHits: 1, wantFirst: engine.ClientError},
			{desc: "a site's 407 is passed on, not the route's fault", routes: [2]routetest.Behavior{healthy, healthy},
				method: "POST", body: "order=1", handler: firstThen(407, `Proxy-Authenticate: Basic realm="site"`, "log in"),
				wantStatus: 407, wantAttempts: 1, wantRoute: 0, wantHits: 1, wantBody: "log in", wantFirst: engine.ClientError},
			{desc: "last failure's page is passed on", routes: [2]routetest.Behavior{healthy, healthy},
				method: "GET", handler: func(_ int, w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(403)
					io.WriteString(w, "banned")
				}, wantStatus: 403, wantAttempts: 2, wantRoute: 1, wantHits: 2, wantBody: "banned", wantFirst: engine.Blocked},
			{desc: "no answer at all is a 502 naming the class", routes: [2]routetest.Behavior{refused, refused},
				method: "GET", handler: ok, wantStatus: 502, wantAttempts: 2, wantRoute: 1, wantHits: 0, wantError: "proxy_connect_failed", wantFirst: engine.ProxyConnectFailed},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, tc.handler)
				p0, p1 := routetest.NewProxy(t, tc.routes[0]), routetest.NewProxy(t, tc.routes[1])
				cfg := Config{Targets: target.New([]target.Rule{{Hosts: []string{"*"}, Policy: target.Policy{BlockSignatures: tc.signatures}}})}
				if pool := p0.CertPool(); pool != nil {
					cfg.ProxyTLS = &tls.Config{RootCAs: pool}
				}
				v := newEnv(t, cfg, proxyLine(p0, ""), proxyLine(p1, ""))
				req, _ := http.NewRequest(tc.method, tg.URL+"/x", strings.NewReader(tc.body))
				resp, err := v.client(t, "").Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Errorf("status %d, want %d (%s)", resp.StatusCode, tc.wantStatus, body)
				}
				if got := resp.Header.Get(headerAttempts); got != fmt.Sprint(tc.wantAttempts) {
					t.Errorf("attempts %q, want %d", got, tc.wantAttempts)
				}
				if got := resp.Header.Get(headerRoute); got != v.id(tc.wantRoute) {
					t.Errorf("route %q, want %q", got, v.id(tc.wantRoute))
				}
				if got := resp.Header.Get(headerError); got != tc.wantError {
					t.Errorf("error header %q, want %q", got, tc.wantError)
				}
				if !strings.HasPrefix(string(body), tc.wantBody) {
					t.Errorf("body %q, want prefix %q", body, tc.wantBody)
				}
				if tg.Hits() != tc.wantHits {
					t.Errorf("target reached %d times, want %d", tg.Hits(), tc.wantHits)
				}
				if strings.Contains(fmt.Sprint(resp.Header)+string(body), "s3cret") {
					t.Error("a route's password reached the client")
				}
				v.waitOutcome(t, 0, tc.wantFirst)
				if tc.wantStatus == http.StatusOK && tc.wantRoute != 0 {
					v.waitOutcome(t, tc.wantRoute, engine.OK) // reported once relayed: maybe after the client read it
				}
				for i := range v.routes {
					if st, _ := v.e.Route(v.id(i)); st.Inflight != 0 {
						t.Errorf("route %s: %d leases in flight after the request", v.id(i), st.Inflight)
					}
				}
			})
		}
	})
}

// A 429 with Retry-After cools the route for that target only: the pair
// record waits out the delay, the route's own record is untouched.
func TestRateLimitCoolsPairOnly(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tg := newTarget(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Retry-After", "120")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		p0, p1 := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(p0, ""), proxyLine(p1, ""))
		before := time.Now()
		resp, err := v.client(t, "").Get(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(headerRoute) != v.id(1) {
			t.Fatalf("got %d through %q, want 200 through the second route", resp.StatusCode, resp.Header.Get(headerRoute))
		}
		pair, ok := v.pair(t, 0, "127.0.0.1")
		if !ok || pair.Health.State != engine.Cooling {
			t.Fatalf("pair record %+v, want cooling", pair.Health)
		}
		if until := pair.Health.UntilTime(); until.Before(before.Add(110*time.Second)) || until.After(time.Now().Add(121*time.Second)) {
			t.Errorf("cooling until %v, want Retry-After's 120s from %v", until, before)
		}
		if st, _ := v.e.Route(v.id(0)); !st.Health.State.Usable() {
			t.Errorf("route's own record is %v: a 429 must not touch it", st.Health.State)
		}
	})
}

// A proxy that refuses one site keeps carrying the others: the block is
// counted against the route×site pair, not the route.
func TestBlockIsPerTarget(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		ok := func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") }
		a, b := newTarget(t, ok), newTarget(t, ok)
		blocker := routetest.NewProxy(t, routetest.Behavior{BlockHosts: []string{"localhost"}})
		other := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(blocker, ""), proxyLine(other, ""))
		c := v.client(t, "")

		urlA := strings.Replace(a.URL, "127.0.0.1", "localhost", 1)
		resp, err := c.Get(urlA) // blocker first, then the other route
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(headerAttempts) != "2" {
			t.Fatalf("site A: %d after %s attempts, want 200 after 2", resp.StatusCode, resp.Header.Get(headerAttempts))
		}
		resp, err = c.Get(b.URL) // round robin is back at the blocker
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(headerRoute) != v.id(0) || resp.Header.Get(headerAttempts) != "1" {
			t.Fatalf("site B: %d through %q after %s attempts, want 200 through the blocker at once",
				resp.StatusCode, resp.Header.Get(headerRoute), resp.Header.Get(headerAttempts))
		}
		if pair, ok := v.pair(t, 0, "localhost"); !ok || pair.Health.ConsecFail == 0 {
			t.Errorf("blocker×localhost record %+v, want a failure counted", pair.Health)
		}
		if st, _ := v.e.Route(v.id(0)); st.Health.ConsecFail != 0 {
			t.Errorf("blocker's own record counts %d failures, want none", st.Health.ConsecFail)
		}
	})
}

// An attempt ends at AttemptTimeout if the answer's headers have not come
// (a timeout, retried on the next route) or when the client goes away
// (canceled); a body that streams on past AttemptTimeout is not cut.
func TestAttemptEnds(t *testing.T) {
	const timeout = 100 * time.Millisecond
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc         string
			first        routetest.Behavior // the first route; the second is healthy
			slowBody     bool               // the target sends its body's end after 3 × AttemptTimeout
			clientLeaves bool               // the client gives up once its request is out
			wantStatus   int                // 0: the client got no answer
			wantAttempts string
			wantFirst    engine.Class
		}{
			{desc: "silent exit times out", first: routetest.Behavior{Silent: true}, wantStatus: 200, wantAttempts: "2", wantFirst: engine.ProxyTimeout},
			{desc: "client leaves", first: routetest.Behavior{Silent: true}, clientLeaves: true, wantFirst: engine.Canceled},
			{desc: "slow body is not cut", slowBody: true, wantStatus: 200, wantAttempts: "1", wantFirst: engine.OK},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "start ")
					if tc.slowBody {
						http.NewResponseController(w).Flush()
						wait := time.NewTimer(3 * timeout)
						defer wait.Stop()
						select {
						case <-wait.C:
						case <-r.Context().Done():
							return
						}
					}
					io.WriteString(w, "end")
				})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.clientLeaves {
					// The client leaves once the silent exit has the
					// request: the attempt is surely under way, however
					// slowly a loaded machine gets the gateway there.
					tc.first.Received = cancel
				}
				p0, p1 := routetest.NewProxy(t, tc.first), routetest.NewProxy(t, routetest.Behavior{})
				attemptTimeout := timeout
				if tc.clientLeaves {
					// Long past the wait for the outcome: only the client's
					// leaving can end the attempt, and it leaves before any
					// deadline, however slowly a loaded machine tells the
					// gateway (a cancel after the deadline is a timeout).
					attemptTimeout = time.Minute
				}
				v := newEnv(t, Config{AttemptTimeout: attemptTimeout}, proxyLine(p0, ""), proxyLine(p1, ""))
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tg.URL, nil)
				resp, err := v.client(t, "").Do(req)
				switch {
				case tc.wantStatus == 0 && err == nil:
					resp.Body.Close()
					t.Fatalf("got %s, want the client's request canceled", resp.Status)
				case tc.wantStatus != 0 && err != nil:
					t.Fatal(err)
				case tc.wantStatus != 0:
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != tc.wantStatus || string(body) != "start end" {
						t.Errorf("got %d %q, %v; want %d with the whole body", resp.StatusCode, body, err, tc.wantStatus)
					}
					if got := resp.Header.Get(headerAttempts); got != tc.wantAttempts {
						t.Errorf("attempts %s, want %s", got, tc.wantAttempts)
					}
				}
				v.waitOutcome(t, 0, tc.wantFirst)
			})
		}
	})
}

// Routes share one transport whose idle connections are capped across
// all of them (MaxIdleUpstreamConns): a pool of many routes, each used
// once, holds the cap's worth of connections at rest, not one per route.
func TestIdleUpstreamConnsCapped(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const routes, capacity = 8, 3
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		lines := make([]string, routes)
		for i := range lines {
			lines[i] = proxyLine(routetest.NewProxy(t, routetest.Behavior{KeepAlive: true}), "")
		}
		v := newEnv(t, Config{MaxIdleUpstreamConns: capacity}, lines...)
		c := v.client(t, "")
		for i := range routes {
			resp, err := c.Get(site.URL)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Header.Get(headerRoute) != v.id(i) {
				t.Fatalf("request %d went through %s, want %s", i, resp.Header.Get(headerRoute), v.id(i))
			}
		}
		if n := v.g.UpstreamConns(); n != capacity {
			t.Errorf("%d upstream connections at rest after %d routes were used, want the cap, %d", n, routes, capacity)
		}
	})
}

// TestReadPrefix: the judge's read of an answer's start gives what
// io.ReadAll of the body limited to the window would, in a buffer of the
// size read.
func TestReadPrefix(t *testing.T) {
	broken := errors.New("connection reset")
	long := strings.Repeat("x", 2*signatureWindow)
	window, short := long[:signatureWindow], long[:100]
	for _, tc := range []struct {
		desc    string
		r       io.Reader
		size    int64 // the body's length, -1 unknown
		want    string
		wantErr error
	}{
		{desc: "known length under the window", r: strings.NewReader(short), size: 100, want: short},
		{desc: "known length over the window", r: strings.NewReader(long), size: int64(len(long)), want: window},
		{desc: "unknown length, a short body", r: strings.NewReader(short), size: -1, want: short},
		{desc: "unknown length, a long body", r: strings.NewReader(long), size: -1, want: window},
		{desc: "read a byte at a time", r: iotest.OneByteReader(strings.NewReader(long)), size: -1, want: window},
		{desc: "empty", r: strings.NewReader(""), size: 0, want: ""},
		{desc: "empty, unknown length", r: strings.NewReader(""), size: -1, want: ""},
		{desc: "a body shorter than its length", r: strings.NewReader(short), size: 500, want: short},
		{desc: "cut short under its length", r: io.MultiReader(strings.NewReader(short), iotest.ErrReader(io.ErrUnexpectedEOF)), size: 500, want: short, wantErr: io.ErrUnexpectedEOF},
		{desc: "broken off", r: io.MultiReader(strings.NewReader(short), iotest.ErrReader(broken)), size: -1, want: short, wantErr: broken},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := readPrefix(tc.r, tc.size)
			if string(got) != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("readPrefix = %d bytes, %v; want %d, %v", len(got), err, len(tc.want), tc.wantErr)
			}
			if len(got) < signatureWindow && cap(got) >= signatureWindow {
				t.Errorf("a whole window kept for %d bytes read", len(got))
			}
		})
	}
	// A HEAD's answer says the GET's length and has no body: nothing is
	// allocated for it.
	if got, err := readPrefix(http.NoBody, 4096); len(got) != 0 || cap(got) != 0 || err != nil {
		t.Errorf("a HEAD's answer: %d bytes in a buffer of %d, %v; want none", len(got), cap(got), err)
	}
	// The pooled window is copied out, never handed over: a second read
	// does not change what the first returned.
	first, _ := readPrefix(strings.NewReader(short), -1)
	readPrefix(strings.NewReader(strings.Repeat("y", 100)), -1)
	if string(first) != short {
		t.Error("a read of unknown length shares its buffer with the next")
	}
}

// BenchmarkJudge is the gateway's look at one ok answer, a 4 KiB shop
// page with its length, as forward makes it: on a goroutine of its own
// (the attempt's), the page read, searched for the built-in marks and
// judged by the lookalike detector among 16 routes' answers.
func BenchmarkJudge(b *testing.B) {
	var page strings.Builder
	for i := 0; page.Len() < 4<<10; i++ {
		fmt.Fprintf(&page, `<div class="item"><a href="/p/%d">Item %d</a><span class="price">EUR %d.99</span></div>`+"\n", i, i, 20+i)
	}
	body := page.String()
	d := lookalike.New(lookalike.Config{Now: time.Now})
	routes := make([]string, 16)
	for i := range routes {
		routes[i] = fmt.Sprint("r", i)
	}
	done := make(chan error)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := &job{target: "shop.example", builtin: true, lookalike: d, url: url.URL{Path: fmt.Sprint("/p/", i)}}
		resp := &http.Response{
			StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}},
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body)),
		}
		go func() {
			class := engine.OK
			err := j.judge(resp, routes[i%len(routes)], &class)
			if err == nil && class != engine.OK {
				err = fmt.Errorf("an ordinary page judged %v", class)
			}
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

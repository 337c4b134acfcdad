package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// timedEngine is the test engine with a deadline floor short enough for
// tests and no candidate checks (no prober runs here).
func timedEngine() engine.Config {
	return engine.Config{
		Picker: &engine.RoundRobin{}, Seed: 1, MaxRemovedShare: -1,
		UncheckedCandidates: true, DeadlineFloor: 300 * time.Millisecond,
	}
}

// noHedges is a budget with hedging off.
var noHedges = engine.BudgetConfig{BudgetRatio: 0.2, HedgeRatio: 0}

// warm sends n GETs to site through v, so that the engine knows the
// site's times to an answer and gives leases deadlines and hedge delays.
func (v *env) warm(t *testing.T, site *site, n int) {
	t.Helper()
	c := v.client(t, "")
	for range n {
		resp, err := c.Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// silentBehindFast is a site, a fast route (0) that has carried warm GETs
// to it, so that leases get deadlines and hedge delays, and a silent route
// (1) added after: it reads each request and never answers.
func silentBehindFast(t *testing.T, cfg Config, warm int) (*env, *site, *routetest.Proxy) {
	t.Helper()
	site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
	fast := routetest.NewProxy(t, routetest.Behavior{})
	silent := routetest.NewProxy(t, routetest.Behavior{Silent: true})
	v := newEnvEngine(t, timedEngine(), cfg, proxyLine(fast, ""))
	v.warm(t, site, warm)
	v.addRoute(t, proxyLine(silent, ""))
	return v, site, silent
}

// viaSilent sends method requests to site until one is first picked onto
// the silent route, and returns its response (body read), how long it took
// and how many times the site saw it. The round-robin picker alternates,
// so a few requests suffice.
func (v *env) viaSilent(t *testing.T, site *site, silent *routetest.Proxy, method string) (resp *http.Response, took time.Duration, hits int) {
	t.Helper()
	c := v.client(t, "")
	for range 4 {
		before, start := site.Hits(), time.Now()
		req, _ := http.NewRequest(method, site.URL, strings.NewReader("x"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if silent.Requests() > 0 {
			return resp, time.Since(start), site.Hits() - before
		}
	}
	t.Fatal("the silent route was never picked first")
	return nil, 0, 0
}

// A silent exit is cut at its lease's deadline, a timeout with evidence,
// and an idempotent request moves to another route long before the
// attempt timeout; a POST that may have reached the target does not, and
// is never sent twice.
func TestDeadlineCutsSilence(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			method       string
			wantStatus   int
			wantAttempts string
			wantHits     int // at the site, for the request picked onto the silent exit
		}{
			{http.MethodGet, http.StatusOK, "2", 1},
			{http.MethodPost, http.StatusBadGateway, "1", 0},
		}
		for _, tc := range tests {
			t.Run(tc.method, func(t *testing.T) {
				t.Parallel()
				const attemptTimeout = 1500 * time.Millisecond
				v, site, silent := silentBehindFast(t, Config{Budget: noHedges, AttemptTimeout: attemptTimeout}, 5)
				resp, took, hits := v.viaSilent(t, site, silent, tc.method)
				if resp.StatusCode != tc.wantStatus || resp.Header.Get(headerAttempts) != tc.wantAttempts {
					t.Errorf("status %d after %s attempts, want %d after %s", resp.StatusCode, resp.Header.Get(headerAttempts), tc.wantStatus, tc.wantAttempts)
				}
				if hits != tc.wantHits {
					t.Errorf("the site saw the request %d times, want %d", hits, tc.wantHits)
				}
				if tc.method == http.MethodGet && took >= attemptTimeout {
					t.Errorf("took %v: the silence was not cut before the attempt timeout", took)
				}
				v.waitOutcome(t, 1, engine.ProxyTimeout)
			})
		}
	})
}

// A client that gives up is evidence only once the attempt ran past its
// deadline.
func TestLateCancelIsEvidence(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc          string
			clientTimeout time.Duration
			want          engine.Class
		}{
			{"before the deadline", 50 * time.Millisecond, engine.Canceled},
			{"after the deadline", time.Second, engine.ProxyTimeout},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				v, site, _ := silentBehindFast(t, Config{Budget: noHedges, MaxAttempts: 1}, 5)
				if err := v.e.Drain(time.Now(), v.id(0)); err != nil {
					t.Fatal(err)
				}
				c := v.client(t, "")
				c.Timeout = tc.clientTimeout
				if _, err := c.Get(site.URL); err == nil {
					t.Fatal("an answer through a silent exit")
				}
				v.waitOutcome(t, 1, tc.want)
			})
		}
	})
}

// A GET still waiting by its hedge delay gets a second attempt on another
// route, whose answer wins; the silent first runs on to its deadline and
// reports the timeout. A POST is never hedged.
func TestHedge(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			method     string
			wantHedges int
		}{
			{http.MethodGet, 1},
			{http.MethodPost, 0},
		}
		for _, tc := range tests {
			t.Run(tc.method, func(t *testing.T) {
				t.Parallel()
				rec := &recorder{}
				// Hedges have no floor: 5% of 20 requests is one.
				v, site, silent := silentBehindFast(t, Config{Observer: rec, AttemptTimeout: time.Second}, 20)
				resp, _, hits := v.viaSilent(t, site, silent, tc.method)
				rec.waitFor(t, "the hedge", func() bool { return rec.hedges >= tc.wantHedges })
				rec.mu.Lock()
				hedges := rec.hedges
				rec.mu.Unlock()
				if hedges != tc.wantHedges {
					t.Errorf("%d hedges, want %d", hedges, tc.wantHedges)
				}
				if tc.method == http.MethodPost {
					if hits != 0 {
						t.Error("the POST reached the site through another route")
					}
					return
				}
				if resp.StatusCode != http.StatusOK || resp.Header.Get(headerRoute) != v.id(0) {
					t.Errorf("status %d from %s, want 200 from the hedge on %s", resp.StatusCode, resp.Header.Get(headerRoute), v.id(0))
				}
				v.waitOutcome(t, 1, engine.ProxyTimeout)
			})
		}
	})
}

// Hedges stay within their share of requests, however many requests wait
// on a slow exit.
func TestHedgeBudget(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		var slowFor atomic.Int64 // how long a slow answer takes, ns
		site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Slow") != "" {
				time.Sleep(time.Duration(slowFor.Load()))
			}
			io.WriteString(w, "fine")
		})
		a := routetest.NewProxy(t, routetest.Behavior{})
		b := routetest.NewProxy(t, routetest.Behavior{})
		rec := &recorder{}
		const ratio = 0.1
		v := newEnvEngine(t, timedEngine(), Config{Observer: rec, Budget: engine.BudgetConfig{BudgetRatio: 0.2, HedgeRatio: ratio}},
			proxyLine(a, ""), proxyLine(b, ""))
		v.warm(t, site, 10)
		// Slow answers come well past the hedge delay the warm-up taught,
		// however long a loaded machine made its answers take.
		u, _ := url.Parse(site.URL)
		l, err := v.e.Acquire(time.Now(), engine.Request{Target: target.DefaultKey(u.Hostname()), Timeout: v.g.cfg.AttemptTimeout})
		if err != nil || l.HedgeAfter <= 0 {
			t.Fatalf("after the warm-up: lease %+v, %v; want a hedge delay", l, err)
		}
		v.e.Report(time.Now(), l, engine.Outcome{Class: engine.Canceled})
		slowFor.Store(int64(max(50*time.Millisecond, 3*l.HedgeAfter)))
		c := v.client(t, "")
		const slow = 60
		for range slow {
			req, _ := http.NewRequest(http.MethodGet, site.URL, nil)
			req.Header.Set("X-Slow", "1") // every attempt waits past the hedge delay
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		requests := len(rec.requests)
		if limit := int(ratio * float64(requests)); rec.hedges == 0 || rec.hedges > limit {
			t.Errorf("%d hedges over %d requests, want between 1 and %d", rec.hedges, requests, limit)
		}
	})
}

// The connect of a tunnel is hedged too, and only one tunnel survives: the
// first to be built carries the client; the other, built late or cut at
// its deadline, is closed and reported.
func TestConnectHedge(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		echo := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(c, c); c.Close() })
		rec := &recorder{}
		// The site is the same target, 127.0.0.1; 5% of 20 requests is one hedge.
		v, _, silent := silentBehindFast(t, Config{Observer: rec, AttemptTimeout: 2 * time.Second}, 20)
		for range 4 {
			c, br, resp := connect(t, v, echo)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(headerRoute) != v.id(0) {
				t.Fatalf("CONNECT: %d through %s, want 200 through %s", resp.StatusCode, resp.Header.Get(headerRoute), v.id(0))
			}
			io.WriteString(c, "ping")
			got := make([]byte, 4)
			if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
				t.Fatalf("echo %q, %v", got, err)
			}
			c.Close()
			if silent.Requests() > 0 {
				break
			}
		}
		if silent.Requests() == 0 {
			t.Fatal("the silent route was never tried")
		}
		rec.mu.Lock()
		hedges := rec.hedges
		rec.mu.Unlock()
		if hedges != 1 {
			t.Errorf("%d hedges, want 1", hedges)
		}
		v.waitOutcome(t, 1, engine.ProxyTimeout)
	})
}

// A tunnel where the client spoke and the server said nothing by the
// lease's deadline is evidence against the pair, though the tunnel lives
// on for the client to end.
func TestTunnelSilenceIsEvidence(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		mute := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
		v := newEnvEngine(t, timedEngine(), Config{Budget: noHedges}, "direct")
		v.warm(t, site, 5)
		c, _, resp := connect(t, v, mute)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		io.WriteString(c, "hello?")
		v.waitOutcome(t, 0, engine.TargetTimeout)
		c.Close()
	})
}

// connect opens a CONNECT tunnel to addr through v and returns the
// connection, its reader and the gateway's answer.
func connect(t *testing.T, v *env, addr string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return c, br, resp
}

// On a cold start nothing is known of answer times, so the first leases
// carry the whole attempt timeout. An attempt on a silent exit still gets
// its deadline once the pool has answered, counted from its start, and the
// request moves on well before the attempt timeout.
func TestProvisionalDeadline(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		silent := routetest.NewProxy(t, routetest.Behavior{Silent: true})
		fast := routetest.NewProxy(t, routetest.Behavior{})
		const attemptTimeout = 10 * time.Second
		v := newEnvEngine(t, timedEngine(), Config{Budget: noHedges, AttemptTimeout: attemptTimeout}, proxyLine(silent, ""), proxyLine(fast, ""))
		if err := v.e.Drain(time.Now(), v.id(1)); err != nil {
			t.Fatal(err)
		}
		type answer struct {
			resp *http.Response
			took time.Duration
			err  error
		}
		first := make(chan answer, 1)
		go func() {
			start := time.Now()
			resp, err := v.client(t, "").Get(site.URL)
			if err == nil {
				resp.Body.Close()
			}
			first <- answer{resp, time.Since(start), err}
		}()
		for deadline := time.Now().Add(5 * time.Second); silent.Requests() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first request never reached the silent exit")
			}
		}
		// The fast exit only, from now on: the pool answers through it.
		if err := v.e.Restore(time.Now(), v.id(1)); err != nil {
			t.Fatal(err)
		}
		if err := v.e.Drain(time.Now(), v.id(0)); err != nil {
			t.Fatal(err)
		}
		v.warm(t, site, 1)
		a := <-first
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.resp.StatusCode != http.StatusOK || a.resp.Header.Get(headerAttempts) != "2" || a.took >= attemptTimeout/2 {
			t.Errorf("status %d after %s attempts in %v, want 200 after 2 well within %v",
				a.resp.StatusCode, a.resp.Header.Get(headerAttempts), a.took, attemptTimeout)
		}
		v.waitOutcome(t, 0, engine.ProxyTimeout)
	})
}

// retry.request_timeout bounds all of a request's attempts together: past
// it the client gets 504 request_timeout, long before the attempt timeout,
// and the attempt in flight ends as a client's cancel ends it (no evidence
// before its deadline).
func TestRequestTimeout(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const requestTimeout, attemptTimeout = 400 * time.Millisecond, 20 * time.Second
		tests := []struct {
			desc         string
			connect      bool
			refusedFirst bool // a route that refuses is tried first: the deadline covers both attempts
		}{
			{desc: "forward, one silent exit"},
			{desc: "forward, refused then silent", refusedFirst: true},
			{desc: "CONNECT, one silent exit", connect: true},
			{desc: "CONNECT, refused then silent", connect: true, refusedFirst: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
				silent := routetest.NewProxy(t, routetest.Behavior{Silent: true})
				lines := []string{proxyLine(silent, "")}
				if tc.refusedFirst {
					lines = append([]string{proxyLine(routetest.NewProxy(t, routetest.Behavior{Refuse: true}), "")}, lines...)
				}
				v := newEnvEngine(t, timedEngine(), Config{Budget: noHedges, AttemptTimeout: attemptTimeout, RequestTimeout: requestTimeout}, lines...)
				start := time.Now()
				var resp *http.Response
				if tc.connect {
					_, _, resp = connect(t, v, strings.TrimPrefix(site.URL, "http://"))
				} else {
					var err error
					if resp, err = v.client(t, "").Get(site.URL); err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				took := time.Since(start)
				wantAttempts := map[bool]string{false: "1", true: "2"}[tc.refusedFirst]
				if resp == nil {
					t.Fatal("no answer")
				}
				if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(headerError) != "request_timeout" || resp.Header.Get(headerAttempts) != wantAttempts {
					t.Fatalf("got %d %q after %s attempt(s), want 504 request_timeout after %s", resp.StatusCode, resp.Header.Get(headerError), resp.Header.Get(headerAttempts), wantAttempts)
				}
				if took < requestTimeout || took > attemptTimeout/2 {
					t.Errorf("answered after %v, want past the request timeout %v and well before the attempt timeout %v", took, requestTimeout, attemptTimeout)
				}
				// The silent attempt ended with the request, as a cancel
				// before its deadline: no evidence, its lease given back.
				v.waitOutcome(t, len(lines)-1, engine.Canceled)
				if st, _ := v.e.Route(v.id(len(lines) - 1)); st.Inflight != 0 || st.Health.ConsecFail != 0 {
					t.Errorf("silent route after the deadline: %d in flight, %d failures; want 0 and 0", st.Inflight, st.Health.ConsecFail)
				}
			})
		}
	})
}

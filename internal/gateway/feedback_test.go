package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// TestFeedback gives a relayed answer a late verdict through the proxy:
// the token of its attempt, sent back on a later request, is evidence
// against that route×target alone; what is no token is refused, and a
// token that does not open is ignored.
func TestFeedback(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "a page") })
		v := newEnv(t, Config{}, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""), proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
		c := v.client(t, "")
		// The verdicts ride on requests to another target (localhost),
		// whose successes leave the judged pair alone.
		carrier := strings.Replace(site.URL, "127.0.0.1", "localhost", 1)
		get := func(feedback ...string) *http.Response {
			t.Helper()
			u := site.URL
			if len(feedback) > 0 {
				u = carrier
			}
			req, _ := http.NewRequest(http.MethodGet, u+"/", nil)
			for _, f := range feedback {
				req.Header.Add(headerFeedback, f)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		first := get()
		token := first.Header.Get(headerAttempt)
		if token == "" || first.Header.Get(headerRoute) != v.id(0) {
			t.Fatalf("answer headers %v: want route 0's attempt token", first.Header)
		}

		tests := []struct {
			desc, feedback string
			status         int
			said           string
			wantFail       uint16 // route 0's consecutive failures at the site after
		}{
			{"a verdict", token, http.StatusOK, "applied", 1},
			{"blocked", token + "; class=blocked", http.StatusOK, "applied", 2},
			{"not a token", "garbage!", http.StatusBadRequest, "", 2},
			{"unknown class", token + "; class=ok", http.StatusBadRequest, "", 2},
			{"altered", altered(token), http.StatusOK, "expired", 2},
		}
		for _, tc := range tests {
			resp := get(tc.feedback)
			if resp.StatusCode != tc.status || resp.Header.Get(headerFeedback) != tc.said {
				t.Errorf("%s: %d, %s: %q; want %d, %q", tc.desc, resp.StatusCode, headerFeedback, resp.Header.Get(headerFeedback), tc.status, tc.said)
			}
			p, _ := v.pair(t, 0, "127.0.0.1")
			if p.Health.ConsecFail != tc.wantFail {
				t.Errorf("%s: route 0 × site has %d failures in a row, want %d", tc.desc, p.Health.ConsecFail, tc.wantFail)
			}
		}
		if st, _ := v.e.Route(v.id(0)); st.Health.ConsecFail != 0 || !st.Health.State.Usable() {
			t.Errorf("route 0 globally: %+v; a verdict on a page is the pair's alone", st.Health)
		}
	})
}

// TestTunnelFeedback gives a blind tunnel a late verdict: the CONNECT's
// answer carries its attempt's token, which a client that finds a ban in
// the pages inside (where the gateway cannot look) sends back on a later
// request, against the tunnel's route×target.
func TestTunnelFeedback(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "a captcha") }))
		t.Cleanup(site.Close)
		v := newEnv(t, Config{}, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
		tr := site.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(v.url)
		var token string
		tr.OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			token = resp.Header.Get(headerAttempt)
			return nil
		}
		t.Cleanup(tr.CloseIdleConnections)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if token == "" {
			t.Fatal("the CONNECT's answer carries no attempt token")
		}
		v.waitOutcome(t, 0, engine.OK)

		// The verdict rides on a request to another target (localhost).
		carrier := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "a page") })
		req, _ := http.NewRequest(http.MethodGet, strings.Replace(carrier.URL, "127.0.0.1", "localhost", 1)+"/", nil)
		req.Header.Set(headerFeedback, token)
		fb, err := v.client(t, "").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, fb.Body)
		fb.Body.Close()
		if said := fb.Header.Get(headerFeedback); said != "applied" {
			t.Fatalf("%s: %q, want applied", headerFeedback, said)
		}
		if p, _ := v.pair(t, 0, "127.0.0.1"); p.Health.ConsecFail != 1 {
			t.Errorf("the tunnel's route × site has %d failures in a row, want the verdict's 1", p.Health.ConsecFail)
		}
	})
}

// altered is token with one of its middle characters changed. Its last
// ones will not do: the final base64 character carries unused bits, which
// decoding ignores, and a replacement may be what was there.
func altered(token string) string {
	b := []byte(token)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestTokensConcurrent seals tokens from many goroutines at once, as
// relayed answers do: each opens for its own user to its own attempt, and
// for no other user, however the sealer's reused buffers interleave.
func TestTokensConcurrent(t *testing.T) {
	g := &Gateway{cfg: Config{FeedbackTTL: time.Hour}, tokens: newSealer()}
	now := time.Now()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				l := engine.Lease{Route: fmt.Sprintf("http://10.0.%d.%d:3128", w, i), Target: fmt.Sprintf("site%d.test", i), Gens: engine.Generations{Route: uint32(i), Pair: uint32(w)}}
				user := fmt.Sprintf("user%d", w)
				token := g.attemptToken(l, SubExit{}, user, now)
				a, err := g.openToken(token, user, now)
				if err != nil || a.route != l.Route || a.target != l.Target || a.gens != l.Gens {
					t.Errorf("token of %s × %s opened to %+v, %v", l.Route, l.Target, a, err)
					return
				}
				if _, err := g.openToken(token, user+"x", now); err != errFeedbackExpired {
					t.Errorf("another user's token opened: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkAttemptToken is the sealing of the token every relayed answer
// carries (X-Switchyard-Attempt).
func BenchmarkAttemptToken(b *testing.B) {
	g := &Gateway{tokens: newSealer()}
	l := engine.Lease{Route: "http://10.0.0.1:3128", Target: "example.com"}
	at := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		g.attemptToken(l, SubExit{}, "", at)
	}
}

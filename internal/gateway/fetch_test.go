package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// captchaFirst answers its first hit with a captcha page, later ones with
// the page asked for.
func captchaFirst(n int, w http.ResponseWriter, _ *http.Request) {
	if n == 1 {
		io.WriteString(w, "<html>please solve this captcha</html>")
		return
	}
	io.WriteString(w, "<html>the price is 42</html>")
}

// TestFetchValidators runs fetches through two routes taken in order and
// checks the answer, every attempt of the trace, and the evidence left.
func TestFetchValidators(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc       string
			handler    func(int, http.ResponseWriter, *http.Request)
			v          Validators
			wantStatus int
			wantBody   string
			wantCode   string // the FetchError's; "" for none
			wantTrace  []engine.Class
			wantDetail string // the first attempt's
		}{
			{desc: "captcha via the first route, the answer via the second", handler: captchaFirst,
				v: Validators{MustNotMatch: regexp.MustCompile(`captcha`)}, wantStatus: 200, wantBody: "the price is 42",
				wantTrace: []engine.Class{engine.ContentInvalid, engine.OK}, wantDetail: "body matches must_not_match"},
			{desc: "must_match missing", handler: captchaFirst,
				v: Validators{MustMatch: regexp.MustCompile(`price is \d+`)}, wantStatus: 200, wantBody: "the price is 42",
				wantTrace: []engine.Class{engine.ContentInvalid, engine.OK}, wantDetail: "body does not match must_match"},
			{desc: "a 404 accepted is an answer", handler: func(_ int, w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) },
				v: Validators{AcceptStatus: []int{404}}, wantStatus: 404, wantBody: "404",
				wantTrace: []engine.Class{engine.OK}},
			{desc: "a 200 not accepted is retried", handler: func(n int, w http.ResponseWriter, _ *http.Request) {
				if n > 1 {
					w.WriteHeader(http.StatusCreated)
				}
			}, v: Validators{AcceptStatus: []int{201}}, wantStatus: 201,
				wantTrace: []engine.Class{engine.ContentInvalid, engine.OK}, wantDetail: "status 200 not accepted"},
			{desc: "required header missing everywhere", handler: func(int, http.ResponseWriter, *http.Request) {},
				v: Validators{RequireHeader: "X-Price"}, wantStatus: 200, wantCode: "content_invalid",
				wantTrace: []engine.Class{engine.ContentInvalid, engine.ContentInvalid}, wantDetail: "header X-Price missing"},
			{desc: "body under the minimum", handler: func(n int, w http.ResponseWriter, _ *http.Request) {
				io.WriteString(w, strings.Repeat("x", n*10))
			}, v: Validators{MinBodyBytes: 15}, wantStatus: 200, wantBody: strings.Repeat("x", 20),
				wantTrace: []engine.Class{engine.ContentInvalid, engine.OK}, wantDetail: "body of 10 bytes, under min_body_bytes 15"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				site := newTarget(t, tc.handler)
				a, b := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
				v := newEnv(t, Config{}, proxyLine(a, ""), proxyLine(b, ""))
				res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL + "/item", Validators: tc.v})
				var fe *FetchError
				switch {
				case tc.wantCode == "" && err != nil:
					t.Fatalf("Fetch: %v", err)
				case tc.wantCode != "" && (!errors.As(err, &fe) || fe.Code != tc.wantCode):
					t.Fatalf("Fetch error %v, want code %s", err, tc.wantCode)
				}
				if res.Status != tc.wantStatus || !strings.Contains(string(res.Body), tc.wantBody) {
					t.Errorf("answer %d %q, want %d with %q", res.Status, res.Body, tc.wantStatus, tc.wantBody)
				}
				if len(res.Attempts) != len(tc.wantTrace) {
					t.Fatalf("trace %+v, want %d attempts", res.Attempts, len(tc.wantTrace))
				}
				for i, at := range res.Attempts {
					if at.Class != tc.wantTrace[i] || at.Running || at.Route != v.id(i) || at.Hedge {
						t.Errorf("attempt %d: %+v, want %v through %s", i, at, tc.wantTrace[i], v.id(i))
					}
					if want := res.RequestID + "." + string(rune('1'+i)); at.ID != want {
						t.Errorf("attempt %d id %q, want %q", i, at.ID, want)
					}
				}
				if got := res.Attempts[0].Detail; got != tc.wantDetail {
					t.Errorf("first attempt's detail %q, want %q", got, tc.wantDetail)
				}
				if tc.wantTrace[0] == engine.ContentInvalid {
					if p, ok := v.pair(t, 0, "127.0.0.1"); !ok || p.Health.State != engine.Cooling {
						t.Errorf("route 0's pair with the site: %+v, want cooling after content_invalid", p)
					}
				}
			})
		}
	})
}

// TestFetchStrict cools both routes' pairs with the site, then fetches
// strictly (a typed error, the site never reached) and not (the least-bad
// route is tried).
func TestFetchStrict(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "captcha") })
		a, b := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(a, ""), proxyLine(b, ""))
		bad := Validators{MustNotMatch: regexp.MustCompile("captcha")}
		for range 2 {
			if _, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, Validators: bad, MaxAttempts: 1}); err == nil {
				t.Fatal("a captcha passed the validator")
			}
		}
		hits := site.Hits()
		_, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, Strict: true})
		if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Code != "no_eligible_route" {
			t.Fatalf("strict fetch with every pair cooling: %v, want no_eligible_route", err)
		}
		if site.Hits() != hits {
			t.Errorf("a strict fetch reached the site")
		}
		res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL})
		if err != nil || res.Status != 200 || site.Hits() != hits+1 {
			t.Errorf("a fetch that is not strict: %v, status %d, hits %d; want the least-bad route tried", err, res.Status, site.Hits()-hits)
		}
	})
}

// TestFetchRefusals checks the fetches refused before any route is
// leased: each with its code and nothing reaching the site.
func TestFetchRefusals(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		p := routetest.NewProxy(t, routetest.Behavior{})
		// Admission lets 127.0.0.1 through (the site) and no other
		// internal address.
		site127 := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		v := newEnv(t, Config{Admission: admit.New(site127, nil), MaxBodyBytes: 16}, proxyLine(p, "region=eu"))
		tests := []struct {
			desc string
			req  FetchRequest
			code string
		}{
			{"metadata address", FetchRequest{URL: "http://169.254.169.254/latest/"}, "blocked_destination"},
			{"private network", FetchRequest{URL: "http://10.1.2.3/"}, "blocked_destination"},
			{"relative url", FetchRequest{URL: "/path"}, "bad_request"},
			{"ftp url", FetchRequest{URL: "ftp://example.com/"}, "bad_request"},
			{"credentials in the url", FetchRequest{URL: "http://u:p@example.com/"}, "bad_request"},
			{"bad method", FetchRequest{Method: "GE T", URL: site.URL}, "bad_request"},
			{"connect", FetchRequest{Method: "CONNECT", URL: site.URL}, "bad_request"},
			{"body over retry.max_body_bytes", FetchRequest{Method: "POST", URL: site.URL, Body: make([]byte, 17)}, "body_too_large"},
			{"bad session", FetchRequest{URL: site.URL, Session: "a b"}, "bad_request"},
			{"bad target override", FetchRequest{URL: site.URL, Target: "a/b"}, "bad_request"},
			{"no route with the labels", FetchRequest{URL: site.URL, Labels: engine.Labels{{Key: "region", Value: "us"}}}, "no_matching_route"},
			{"label against the user's", FetchRequest{URL: site.URL, User: "alice", UserLabels: engine.Labels{{Key: "region", Value: "eu"}},
				Labels: engine.Labels{{Key: "region", Value: "us"}}}, "label_conflict"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				res, err := v.g.Fetch(context.Background(), tc.req)
				if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Code != tc.code {
					t.Errorf("Fetch: %v, want code %s", err, tc.code)
				}
				if len(res.Attempts) != 0 || res.RequestID == "" {
					t.Errorf("trace %+v, want a request id and no attempt", res)
				}
			})
		}
		if site.Hits() != 0 {
			t.Errorf("the site was reached %d times", site.Hits())
		}
	})
}

// TestFetchCaps checks the per-request caps: attempts, and a body longer
// than MaxFetchBody cut and marked.
func TestFetchCaps(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n < 3 {
				w.WriteHeader(http.StatusBadGateway)
			}
			io.WriteString(w, "0123456789")
		})
		lines := make([]string, 3)
		for i := range lines {
			lines[i] = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
		}
		v := newEnv(t, Config{MaxFetchBody: 4}, lines...)
		res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, MaxAttempts: 1})
		if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Code != "target_5xx" || len(res.Attempts) != 1 || res.Status != 502 {
			t.Errorf("one attempt allowed: %v, %+v; want target_5xx after 1 attempt, the 502 passed on", err, res)
		}
		res, err = v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, Timeout: 5 * time.Second})
		if err != nil || len(res.Attempts) != 2 || string(res.Body) != "0123" || !res.Truncated {
			t.Errorf("fetch: %v, %d attempts, body %q truncated %t; want 2 attempts and the body cut at 4", err, len(res.Attempts), res.Body, res.Truncated)
		}
	})
}

// TestFetchHedgeTraced fetches until a fetch's first attempt lands on a
// silent route: the hedge beside it answers (or, on a loaded machine, the
// retry after its deadline), and the trace shows both, a hedge marked and
// the silent one still running or cut.
func TestFetchHedgeTraced(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v, site, _ := silentBehindFast(t, Config{AttemptTimeout: time.Second}, 20)
		for range 8 {
			res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL})
			// The case is a fetch whose first attempt went to the silent
			// route. Under load the fast route's own answer may come late
			// enough for a hedge to go to the silent one instead: that
			// fetch is not the case.
			if err == nil && (len(res.Attempts) == 0 || res.Attempts[0].Route != v.id(1)) {
				continue
			}
			if err != nil || len(res.Attempts) != 2 {
				t.Fatalf("fetch: %v, trace %+v", err, res.Attempts)
			}
			first, second := res.Attempts[0], res.Attempts[1]
			if first.Hedge || !(first.Running || first.Class == engine.ProxyTimeout) {
				t.Errorf("first attempt %+v, want the silent route, running or cut", first)
			}
			if second.Route != v.id(0) || second.Class != engine.OK || second.Start <= 0 {
				t.Errorf("second attempt %+v, want the fast route, answering", second)
			}
			// A hedge, marked, beside a first attempt still running; or,
			// when the machine is slow enough that the site's hedge delay
			// comes after the silent route's deadline (its floor), a retry,
			// unmarked, after the first was cut there.
			if !second.Hedge && (first.Running || first.Class != engine.ProxyTimeout) {
				t.Errorf("second attempt %+v after %+v: a retry must follow a cut attempt, else it is a hedge", second, first)
			}
			v.waitOutcome(t, 1, engine.ProxyTimeout)
			return
		}
		t.Fatal("the silent route was never picked first")
	})
}

// TestFetchSession keeps a session's fetches on the route its first one
// bound, where round-robin alone would alternate.
func TestFetchSession(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		a, b := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(a, ""), proxyLine(b, ""))
		var routes []string
		for range 3 {
			res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, Session: "s-1"})
			if err != nil || len(res.Attempts) != 1 {
				t.Fatalf("fetch: %v, %+v", err, res.Attempts)
			}
			routes = append(routes, res.Attempts[0].Route)
		}
		if routes[0] != routes[1] || routes[1] != routes[2] {
			t.Errorf("a session's fetches went through %v, want one route", routes)
		}
	})
}

// TestFetchHTTPS fetches an https:// site through an HTTP proxy, a SOCKS5
// proxy and the direct route: trusted, it answers; untrusted, each
// attempt is tls_failed for its route×target, never the route's failure,
// and the request is tried on the other routes.
func TestFetchHTTPS(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "secure "+r.Header.Get("X-Who"))
		}))
		defer site.Close()
		roots := x509.NewCertPool()
		roots.AddCert(site.Certificate())
		lines := []string{
			proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""),
			proxyLine(routetest.NewProxy(t, routetest.Behavior{Kind: routetest.SOCKS5Proxy}), ""),
			"direct",
		}
		tests := []struct {
			desc      string
			roots     *x509.CertPool
			wantCode  string
			wantTrace []engine.Class
		}{
			{"trusted", roots, "", []engine.Class{engine.OK}},
			{"untrusted", nil, "tls_failed", []engine.Class{engine.TLSFailed, engine.TLSFailed, engine.TLSFailed}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				v := newEnv(t, Config{TargetTLS: &tls.Config{RootCAs: tc.roots}}, lines...)
				for i := range 3 { // round-robin: each route first once
					res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL + "/x", Header: http.Header{"X-Who": {"me"}}})
					fe, _ := errors.AsType[*FetchError](err)
					switch {
					case tc.wantCode == "" && (err != nil || string(res.Body) != "secure me"):
						t.Errorf("fetch %d: %v, %q", i, err, res.Body)
					case tc.wantCode != "" && (fe == nil || fe.Code != tc.wantCode):
						t.Errorf("fetch %d: %v, want %s", i, err, tc.wantCode)
					}
					var got []engine.Class
					for _, a := range res.Attempts {
						got = append(got, a.Class)
					}
					if !slices.Equal(got, tc.wantTrace) {
						t.Errorf("fetch %d: trace %v, want %v", i, got, tc.wantTrace)
					}
				}
				for i := range lines {
					if st, _ := v.e.Route(v.id(i)); !st.Health.State.Usable() {
						t.Errorf("route %d is %v: a site's certificate is not the route's fault", i, st.Health.State)
					}
				}
			})
		}
	})
}

// TestFetchLogLine checks a fetch's request log line: as the proxy's, the
// URL without its query (crawlers put tokens there), the route, class and
// attempts, the user and the session.
func TestFetchLogLine(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		p := routetest.NewProxy(t, routetest.Behavior{})
		var buf logtest.Buffer
		v := newEnv(t, Config{Log: slog.New(slog.NewJSONHandler(&buf, nil))}, proxyLine(p, ""))
		if _, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL + "/p?token=s3cret", Session: "s-9", User: "alice"}); err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(buf.String())), &line); err != nil {
			t.Fatalf("log %q: %v", buf.String(), err)
		}
		want := map[string]any{"method": "GET", "url": site.URL + "/p", "status": 200.0, "attempts": 1.0, "route": v.id(0), "class": "ok", "session": "s-9", "user": "alice"}
		for k, w := range want {
			if line[k] != w {
				t.Errorf("log field %s = %v, want %v", k, line[k], w)
			}
		}
		if strings.Contains(buf.String(), "s3cret") {
			t.Errorf("the query reached the log: %s", buf.String())
		}
	})
}

// TestFetchHTTPSSilentSite fetches from an https:// site that completes
// TLS and then never answers: the attempt's timeout is the site's
// (target_timeout, route×target), not the proxy's, which the handshake
// showed alive.
func TestFetchHTTPSSilentSite(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		release := make(chan struct{})
		site := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		defer site.Close()
		defer close(release)
		roots := x509.NewCertPool()
		roots.AddCert(site.Certificate())
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{TargetTLS: &tls.Config{RootCAs: roots}, AttemptTimeout: 300 * time.Millisecond}, proxyLine(p, ""))
		res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL, MaxAttempts: 1})
		if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Code != "target_timeout" || len(res.Attempts) != 1 || res.Attempts[0].Class != engine.TargetTimeout {
			t.Errorf("a silent site after TLS: %v, %+v; want target_timeout", err, res.Attempts)
		}
	})
}

// TestFetchPaced checks that a fetch meets its target's pacing as the
// proxy's requests do: past the rate it is refused paced, with the wait,
// and nothing reaches the site.
func TestFetchPaced(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{Targets: paceAll(pacing.Limits{Rate: 0.5, Burst: 1})}, proxyLine(p, ""))
		if _, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL}); err != nil {
			t.Fatalf("the first fetch: %v", err)
		}
		res, err := v.g.Fetch(context.Background(), FetchRequest{URL: site.URL})
		if fe, ok := errors.AsType[*FetchError](err); !ok || fe.Code != "paced" || fe.RetryAfter <= 0 || len(res.Attempts) != 0 {
			t.Errorf("past the rate: %v, %+v; want paced with a wait and no attempt", err, res.Attempts)
		}
		if site.Hits() != 1 {
			t.Errorf("the site saw %d requests, want 1", site.Hits())
		}
	})
}

package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// TestSoftBans: with no configuration, a challenge or block page in place
// of the page (compressed as every crawler asks for, or marked by a
// vendor's header, whatever its status) is content_invalid against the
// first route, and the page comes through the second; an ordinary page is
// not mistaken for one.
func TestSoftBans(t *testing.T) {
	challenge := "<html><head><title>Just a moment...</title></head><body>checking your browser</body></html>"
	// first answers the first hit with status, header and body, as encoded;
	// later hits get the page.
	first := func(status int, header, encoding, body string) func(int, http.ResponseWriter, *http.Request) {
		return func(n int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			if n > 1 {
				io.WriteString(w, "<p>the page</p>")
				return
			}
			if k, v, ok := strings.Cut(header, ": "); ok {
				w.Header().Set(k, v)
			}
			b := []byte(body)
			if encoding != "" {
				w.Header().Set("Content-Encoding", encoding)
				b = encode(t, encoding, b)
			}
			w.WriteHeader(status)
			w.Write(b)
		}
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc         string
			handler      func(int, http.ResponseWriter, *http.Request)
			policy       target.Policy
			wantAttempts int
			wantBody     string
			wantFirst    engine.Class
		}{
			{desc: "gzip challenge page", handler: first(200, "", "gzip", challenge),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "deflate challenge page", handler: first(200, "", "deflate", challenge),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "br challenge page", handler: first(200, "", "br", challenge),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "zstd challenge page", handler: first(200, "", "zstd", challenge),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "a challenge's 503 is not the site down", handler: first(503, "", "", challenge),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "Cloudflare's header on a 200", handler: first(200, "Cf-Mitigated: challenge", "", "<p>x</p>"),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "AWS WAF's 405 CAPTCHA is not the client's mistake", handler: first(405, "X-Amzn-Waf-Action: captcha", "", "<p>x</p>"),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "DataDome's block page", handler: first(200, "", "gzip", `<iframe src="https://geo.captcha-delivery.com/captcha/?initialCid=x"></iframe>`),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "a target's own signature, gzipped", handler: first(200, "", "gzip", "<p>verify you are human</p>"),
				policy:       target.Policy{BlockSignatures: []string{"verify you are human"}},
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.ContentInvalid},
			{desc: "a vendor's error page on a 503 is the site's error", handler: first(503, "", "", "<p>Request unsuccessful. Incapsula incident ID: 1</p>"),
				wantAttempts: 2, wantBody: "<p>the page", wantFirst: engine.Target5xx},
			{desc: "a 404 page is the site's, whatever it says", handler: first(404, "", "", challenge),
				wantAttempts: 1, wantBody: "<html>", wantFirst: engine.ClientError},
			{desc: "a page with a reCAPTCHA form is a page", handler: first(200, "", "gzip", `<form><div class="g-recaptcha" data-sitekey="k"></div></form>`),
				wantAttempts: 1, wantFirst: engine.OK},
			{desc: "built-in signatures turned off", handler: first(200, "", "", challenge),
				policy:       target.Policy{NoBuiltinSignatures: true},
				wantAttempts: 1, wantBody: "<html><head><title>Just a moment", wantFirst: engine.OK},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, tc.handler)
				p0, p1 := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
				cfg := Config{Targets: target.New([]target.Rule{{Hosts: []string{"*"}, Policy: tc.policy}})}
				v := newEnv(t, cfg, proxyLine(p0, ""), proxyLine(p1, ""))
				req, _ := http.NewRequest("GET", tg.URL+"/x", nil)
				req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd") // the client decodes nothing itself
				resp, err := v.client(t, "").Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got := resp.Header.Get(headerAttempts); got != fmt.Sprint(tc.wantAttempts) {
					t.Errorf("attempts %q, want %d", got, tc.wantAttempts)
				}
				want := tc.wantFirst.String() // the first answer is passed on, or the second, the page
				if tc.wantAttempts == 2 {
					want = engine.OK.String()
				}
				if got := resp.Header.Get(headerClass); got != want {
					t.Errorf("class header %q, want %q", got, want)
				}
				if !strings.HasPrefix(string(body), tc.wantBody) {
					t.Errorf("body %.60q, want prefix %q", body, tc.wantBody)
				}
				v.waitOutcome(t, 0, tc.wantFirst)
			})
		}
	})
}

// A relayed answer says which class the gateway gave it, and a site's own
// X-Switchyard-* headers do not pass for the gateway's.
func TestRelayedAnswerCarriesItsClass(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(headerRoute, "spoofed")
			w.Header().Set(headerClass, "ok")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "banned")
		})
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(p, ""))
		resp, err := v.client(t, "").Get(tg.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get(headerClass); got != engine.Blocked.String() {
			t.Errorf("class %q, want %q", got, engine.Blocked)
		}
		if got := resp.Header.Get(headerRoute); got != v.id(0) {
			t.Errorf("route %q, want %q", got, v.id(0))
		}
		v.waitOutcome(t, 0, engine.Blocked)
	})
}

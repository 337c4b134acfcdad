package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/target"
)

// captchaExit is an exit a site has soft-banned: whatever is asked through
// it, it answers one page, status 200, that no signature knows.
func captchaExit(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><body><h1>Are you a robot?</h1><p>Solve the puzzle to continue.</p></body></html>")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestLookalike: with no signature configured, an exit answering one page
// for every URL while the other exits get each URL's own page is found out
// by the lookalike detector once it has seen enough (cold start: its first
// pages pass), and from then on every time: its answer is content_invalid
// and the client's request is retried onto a good exit. A site whose every URL is the same JSON for
// everyone, or a target that turns the detector off, sees no
// content_invalid.
func TestLookalike(t *testing.T) {
	pages := func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body><h1>%s</h1>%s</body></html>", r.URL.Path, strings.Repeat("<p>"+r.URL.Path+"</p>", 20))
	}
	sameJSON := func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`)
	}
	const requests = 48
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, tc := range []struct {
			desc       string
			site       func(int, http.ResponseWriter, *http.Request)
			captcha    bool // the first route is a captchaExit
			policy     target.Policy
			wantCaught bool // the captcha route's page is caught, and retried
		}{
			{desc: "one page for every URL through one exit", site: pages, captcha: true, wantCaught: true},
			{desc: "the same JSON for every URL, through every exit", site: sameJSON},
			{desc: "every exit gets each URL's own page", site: pages},
			{desc: "turned off for the target", site: pages, captcha: true, policy: target.Policy{NoLookalike: true}},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, tc.site)
				lines := make([]string, 4)
				for i := range lines {
					lines[i] = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
				}
				if tc.captcha {
					lines[0] = captchaExit(t)
				}
				// Unhedged, so that a second attempt is a retry.
				policy := tc.policy
				policy.NoHedge = true
				cfg := Config{Targets: target.New([]target.Rule{{Hosts: []string{"*"}, Policy: policy}})}
				v := newEnv(t, cfg, lines...)
				c := v.client(t, "")
				caught, relayed := 0, 0 // captcha answers retried elsewhere; relayed as pages
				for i := range requests {
					// Named in letters: pages that differ only in their
					// digits are one page to the detector (BodyDigest).
					path := fmt.Sprintf("/item/%c%c", 'a'+i%26, 'a'+i/26)
					resp, err := c.Get(tg.URL + path)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					class, route := resp.Header.Get(headerClass), resp.Header.Get(headerRoute)
					if class != engine.OK.String() {
						t.Fatalf("request %d: class %q through %s, want ok", i, class, route)
					}
					switch {
					case strings.Contains(string(body), "robot"):
						relayed++
						if route != v.id(0) {
							t.Fatalf("request %d: the captcha page through %s", i, route)
						}
						if caught > 0 {
							t.Fatalf("request %d: the captcha page relayed after %d caught", i, caught)
						}
					case resp.Header.Get(headerAttempts) != "1":
						caught++
						if !tc.wantCaught {
							t.Fatalf("request %d: %s attempts, a false content_invalid", i, resp.Header.Get(headerAttempts))
						}
						if !strings.Contains(string(body), path) {
							t.Fatalf("request %d: retried to %.40q, want the page %s", i, body, path)
						}
					}
				}
				if tc.wantCaught {
					if caught == 0 {
						t.Fatalf("no captcha page caught in %d requests (%d relayed)", requests, relayed)
					}
					t.Logf("%d captcha pages caught and retried, %d relayed before", caught, relayed)
					v.waitOutcome(t, 0, engine.ContentInvalid)
					return
				}
				if tc.captcha && relayed != requests/4 {
					t.Errorf("%d captcha pages relayed, want all %d with the detector off", relayed, requests/4)
				}
			})
		}
	})
}

package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

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
			{"altered", token[:len(token)-2] + "AA", http.StatusOK, "expired", 2},
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

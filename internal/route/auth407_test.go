package route_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A 407 the target sends, even one dressed as a proxy's challenge, is the
// target's answer on every route type: passed back as an answer (a
// client_error), never a proxy_auth that would cool the exit, and never
// "nothing left" that would let a POST be sent again.
func TestTargetAnswers407(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, challenge := range []string{"", `Basic realm="site"`} {
			for _, s := range anyRoute {
				for _, sslOnly := range []bool{false, true} {
					if sslOnly && s != route.HTTP && s != route.HTTPS {
						continue
					}
					t.Run(fmt.Sprintf("%s/challenge=%s/connect to 443 only %v", s, challenge, sslOnly), func(t *testing.T) {
						t.Parallel()
						site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
							if challenge != "" {
								w.Header().Set("Proxy-Authenticate", challenge)
							}
							w.WriteHeader(http.StatusProxyAuthRequired)
							io.WriteString(w, "the site's own 407")
						}))
						defer site.Close()
						target := func(testing.TB) string { return strings.TrimPrefix(site.URL, "http://") }
						d := through(routetest.Behavior{User: user, Password: password, SSLPortsOnly: sslOnly}, target)(t, s)
						x := newExit(t, d, route.Dialer{TLS: d.tlsConfig})
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, site.URL+"/order", strings.NewReader("n=1"))
						resp, err := x.RoundTrip(req, new(route.Progress))
						if err != nil {
							t.Fatalf("RoundTrip: %v, want the site's answer", err)
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusProxyAuthRequired || string(body) != "the site's own 407" {
							t.Errorf("got %d %q, want the site's 407", resp.StatusCode, body)
						}
						if c, _ := route.ClassifyStatus(resp.StatusCode, resp.Header, time.Now()); c != engine.ClientError {
							t.Errorf("class %v, want client_error", c)
						}
					})
				}
			}
		}
	})
}

package gateway

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// Past server.max_upstream_conns (a tunnel holds the only one) a request
// is the gateway's own failure: 503 local_resources after one attempt, no
// evidence against the route, counted as upstream_cap. (That a closed
// connection frees its slot is route's TestUpstreamCapsOpenConnections.)
func TestUpstreamCapIsLocal(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		siteAddr := strings.TrimPrefix(site.URL, "http://")
		rec := &recorder{}
		logs := &logtest.Buffer{}
		v := newEnv(t, Config{Observer: rec, MaxUpstreamConns: 1, Log: slog.New(slog.NewTextHandler(logs, nil))},
			proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
		before := v.health(t, 0)

		c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "CONNECT "+siteAddr+" HTTP/1.1\r\nHost: "+siteAddr+"\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}

		resp, err := v.client(t, "").Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(headerError) != "local_resources" || resp.Header.Get(headerAttempts) != "1" {
			t.Fatalf("with the cap held: %d %s=%q after %s attempts, want 503 local_resources after 1",
				resp.StatusCode, headerError, resp.Header.Get(headerError), resp.Header.Get(headerAttempts))
		}
		rec.waitFor(t, "the local error", func() bool { return len(rec.local) == 1 })
		rec.mu.Lock()
		local := slices.Clone(rec.local)
		rec.mu.Unlock()
		if !slices.Equal(local, []string{"upstream_cap"}) {
			t.Errorf("local errors %v, want [upstream_cap]", local)
		}
		if !strings.Contains(logs.String(), "raise server.max_upstream_conns") {
			t.Errorf("the log does not say which cap to raise:\n%s", logs.String())
		}
		if h := v.health(t, 0); h.Samples != before.Samples || h.ConsecFail != 0 || h.State != before.State {
			t.Errorf("route after the refusal: %v, %d samples, %d failures in a row; want no evidence (%v, %d samples)",
				h.State, h.Samples, h.ConsecFail, before.State, before.Samples)
		}

	})
}

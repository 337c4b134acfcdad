package gateway

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A request no route can take now is told when to come back: 503 no_route
// with Retry-After, the engine's estimate of when a route could take it
// (here: its one route is at max_inflight, and requests take 2.5 s), in
// whole seconds rounded up.
func TestUnavailableRetryAfter(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		release := make(chan struct{})
		held := make(chan struct{}, 1)
		tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				held <- struct{}{}
				<-release
			}
			io.WriteString(w, "ok")
		})
		p := routetest.NewProxy(t, routetest.Behavior{})
		v := newEnv(t, Config{}, proxyLine(p, "max_inflight=1"))
		if err := v.e.Feedback(time.Now(), v.id(0), "", engine.Outcome{Class: engine.OK, Latency: 2500 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		c := v.client(t, "")
		first := make(chan int, 1)
		go func() {
			resp, err := c.Get(tg.URL)
			if err != nil {
				first <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		select {
		case <-held: // the first request holds the route's one slot
		case <-time.After(10 * time.Second):
			t.Fatal("the first request never reached the site")
		}
		resp, err := c.Get(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		close(release)
		if code := <-first; code != http.StatusOK {
			t.Errorf("the first request got %d, want 200", code)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(headerError) != "no_route" || resp.Header.Get("Retry-After") != "3" {
			t.Errorf("got %d %q Retry-After %q, want 503 no_route Retry-After 3", resp.StatusCode, resp.Header.Get(headerError), resp.Header.Get("Retry-After"))
		}
	})
}

package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// TestRunShowsFaults runs the demo until the engine has cooled the refused
// and 407 routes and banned the blocker for localhost only, checks the
// admin listener agrees, then stops it and checks nothing is left running.
func TestRunShowsFaults(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		engines := make(chan *engine.Engine, 1)
		engineHook = func(e *engine.Engine) { engines <- e }
		t.Cleanup(func() { engineHook = nil })

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &logtest.Buffer{}
		done := make(chan error, 1)
		go func() { done <- Run(ctx, out, Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0"}) }()
		var e *engine.Engine
		select {
		case e = <-engines:
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not start")
		}

		shown := func() (ok bool, why string) {
			for _, id := range []string{"refused", "auth-407"} {
				st, _ := e.Route(id)
				if s := st.Health.State; s == engine.Healthy || s == engine.Candidate {
					return false, id + " is " + s.String()
				}
			}
			st, _ := e.Route("blocker")
			if !st.Health.State.Usable() {
				return false, "blocker is " + st.Health.State.String() + " globally"
			}
			for _, p := range st.Targets {
				if p.Target == BlockedHost && !p.Health.State.Usable() {
					return true, ""
				}
			}
			return false, "blocker has no unusable record for " + BlockedHost
		}
		// The demo runs on the real clock at its own request rate: a
		// loaded machine sends fewer requests a second, and the blocker is
		// drawn less once it has failed, so the bound is generous.
		const bound = 30 * time.Second
		deadline := time.Now().Add(bound)
		for {
			ok, why := shown()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("after %v: %s\n%s", bound, why, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}

		// The banner names the admin listener; it serves the same picture.
		m := regexp.MustCompile(`routes\s+curl (http://\S+/api/routes)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no admin URL in the output:\n%s", out.String())
		}
		for _, want := range []string{"curl -x http://127.0.0.1:", "/api/events", "/metrics"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		var routes []struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Targets []struct {
				Target string `json:"target"`
				State  string `json:"state"`
			} `json:"targets"`
		}
		err = json.NewDecoder(resp.Body).Decode(&routes)
		resp.Body.Close()
		client.CloseIdleConnections()
		if err != nil || len(routes) != len(fleet) {
			t.Fatalf("/api/routes: %d routes, %v", len(routes), err)
		}

		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}

func TestStatusLine(t *testing.T) {
	st := engine.RouteStatus{ID: "blocker", Health: engine.Health{State: engine.Healthy}, Score: 0.9,
		Targets: []engine.PairStatus{
			{Target: "localhost", Health: engine.Health{State: engine.Cooling}},
			{Target: "127.0.0.1", Health: engine.Health{State: engine.Healthy}},
		}}
	got := StatusLine(st)
	if !strings.Contains(got, "blocker") || !strings.Contains(got, "healthy") || !strings.Contains(got, "0.90") ||
		!strings.Contains(got, "localhost=cooling") || strings.Contains(got, "127.0.0.1") {
		t.Fatalf("StatusLine = %q", got)
	}
}

package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// recorder is an Observer that remembers what it was told.
type recorder struct {
	mu       sync.Mutex
	attempts []engine.Class
	requests []int           // retries per request
	took     []time.Duration // latency per request
	hedges   int
	refused  []string
	local    []string
	subExits []string        // "class retired spared" per sub-exit failure
	spend    map[int]float64 // by tier
	// stallChecks are the classes of the stall watch's checks; cut the
	// tunnels it cut, by reason.
	stallChecks []engine.Class
	cut         map[string]int
	reserved    []time.Duration // the waits for reserved tokens
	changed     chan struct{}   // closed at the next observation, for waitFor
}

// noteLocked wakes waitFor. Caller holds mu.
func (r *recorder) noteLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// waitFor waits (bounded) until cond, called with mu held, holds. A
// request is observed once its answer's body has been relayed, which the
// client may finish reading first.
func (r *recorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		if cond() {
			r.mu.Unlock()
			return
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("not observed within 5s: %s", what)
		}
	}
}

func (r *recorder) ObserveAttempt(_ string, c engine.Class, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, c)
	r.noteLocked()
}

func (r *recorder) ObserveRequest(_ string, _ engine.Class, retries, hedges int, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, retries)
	r.took = append(r.took, latency)
	r.hedges += hedges
	r.noteLocked()
}

func (r *recorder) ObserveLocalError(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.local = append(r.local, reason)
	r.noteLocked()
}

func (r *recorder) ObserveSubExit(c engine.Class, retired, spared bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subExits = append(r.subExits, fmt.Sprint(c, " ", retired, " ", spared))
	r.noteLocked()
}

func (r *recorder) ObserveStallCheck(c engine.Class) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stallChecks = append(r.stallChecks, c)
	r.noteLocked()
}

func (r *recorder) ObserveTunnelsCut(reason string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut == nil {
		r.cut = make(map[string]int)
	}
	r.cut[reason] += n
	r.noteLocked()
}

func (r *recorder) ObserveReservedWait(wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reserved = append(r.reserved, wait)
	r.noteLocked()
}

func (r *recorder) ObserveSpend(tier int, amount float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spend == nil {
		r.spend = make(map[int]float64)
	}
	r.spend[tier] += amount
	r.noteLocked()
}

func (r *recorder) ObserveAuthRefusal(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, reason)
	r.noteLocked()
}

// Every client refused at authentication is told, with why: wrong
// passwords are denied until the address is over its failures, then
// throttled.
func TestObserverSeesAuthRefusals(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		rec := &recorder{}
		v := newEnv(t, Config{Observer: rec, Users: map[string]User{"alice": {Password: "right"}}}, "direct")
		for range failureBurst + 2 {
			resp, err := v.client(t, "alice").Get(site.URL) // password "pw"
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		want := append(slices.Repeat([]string{authDenied}, failureBurst), authThrottled, authThrottled)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if !slices.Equal(rec.refused, want) {
			t.Errorf("refusals %v, want %v", rec.refused, want)
		}
		if site.Hits() != 0 {
			t.Errorf("the site was reached %d times by refused clients", site.Hits())
		}
	})
}

func TestObserverSeesAttemptsAndRequests(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		dead := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
		live := routetest.NewProxy(t, routetest.Behavior{})
		rec := &recorder{}
		v := newEnv(t, Config{Observer: rec}, proxyLine(dead, ""), proxyLine(live, ""))
		resp, err := v.client(t, "").Get(site.URL) // the dead route first, then the live one
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rec.waitFor(t, "both attempts", func() bool { return len(rec.attempts) == 2 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.attempts) != 2 || rec.attempts[0] != engine.ProxyConnectFailed || rec.attempts[1] != engine.OK {
			t.Errorf("attempts %v, want [proxy_connect_failed ok]", rec.attempts)
		}
		if len(rec.requests) != 1 || rec.requests[0] != 1 {
			t.Errorf("requests %v, want one with one retry", rec.requests)
		}
		if len(rec.took) != 1 || rec.took[0] <= 0 {
			t.Errorf("request latencies %v, want one, positive", rec.took)
		}
	})
}

func TestProbeURLFollowsTraffic(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
		v := newEnv(t, Config{}, "direct")
		if got := v.g.Targets().ProbeURL("example.org"); got != "http://example.org/" {
			t.Fatalf("unseen target: %q", got)
		}
		resp, err := v.client(t, "").Get(site.URL + "/some/page?q=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := v.g.Targets().ProbeURL("127.0.0.1"), site.URL+"/"; got != want {
			t.Fatalf("probe page %q, want %q", got, want)
		}
	})
}

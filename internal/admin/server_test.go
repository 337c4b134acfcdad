package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route"
)

// The proxy credentials of testList; no response may contain any of them.
var credentials = []string{"alice-Kx7", "s3cr3t-Pa55", "bob-Kx7", "pw-bob-77", "carol-Kx7", "pw-carol-9"}

// testList is listed out of id order, so that sorting is tested.
const testList = `# test pool
socks5://bob-Kx7:pw-bob-77@10.0.0.2:1080 region=eu
http://alice-Kx7:s3cr3t-Pa55@10.0.0.1:8080 region=us plan=gold
direct
10.0.0.3:3128:carol-Kx7:pw-carol-9 tier=1
`

const (
	alice  = "http://10.0.0.1:8080~a90abad5"
	bob    = "socks5://10.0.0.2:1080~270d51bb"
	carol  = "http://10.0.0.3:3128~19657c8b"
	direct = "direct"
	token  = "tok-123"
)

// TestMain fails the package if any goroutine outlives its tests (an event
// collector of a Server never closed, say).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a server over an engine driven into known states:
// alice cooling (proxy timeouts), bob healthy with its pair for
// shop.example cooling (blocked), an incident on down.example from direct
// and carol, which stay candidates.
type fixture struct {
	e   *engine.Engine
	m   *Metrics
	srv *Server
	hs  *httptest.Server
	// transitions are the state and incident events the drive made,
	// oldest first.
	transitions []engine.Event
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	list, err := route.ParseList("test", []byte(testList))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Seed: 1, MaxRemovedShare: -1, PanicThreshold: -1, IncidentRoutes: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Outcomes happen in the past, so that actions at time.Now follow them.
	t0 := time.Now().Add(-2 * time.Minute)
	routes := make([]*route.Route, len(list))
	for i := range list {
		routes[i] = &list[i]
		if err := e.AddRoute(t0, list[i].Spec()); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{e: e, m: NewMetrics(e, nil)}
	f.srv = NewServer(e, fixedRoutes(t, routes), f.m, opts)
	t.Cleanup(f.srv.Close)
	f.hs = httptest.NewServer(f.srv.Handler())
	t.Cleanup(f.hs.Close)

	// A second subscription counts what the collector should keep.
	sub := e.Subscribe(4096)
	defer sub.Close()
	feedback := func(at time.Time, id, target string, c engine.Class, n int) {
		t.Helper()
		for range n {
			if err := e.Feedback(at, id, target, engine.Outcome{Class: c, Latency: 200 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
	}
	feedback(t0, alice, "", engine.ProxyTimeout, 4)
	feedback(t0, bob, "a.example", engine.OK, 3)
	feedback(t0, bob, "shop.example", engine.Blocked, 2)
	// The incident guard judges after half a window of evidence.
	for i := range 40 {
		id := direct
		if i%2 == 1 {
			id = carol
		}
		feedback(t0.Add(time.Duration(i)*time.Second), id, "down.example", engine.Target5xx, 1)
	}
	for _, ev := range sub.Poll(nil) {
		if ev.Kind == engine.EventState || ev.Kind == engine.EventIncident {
			f.transitions = append(f.transitions, ev)
		}
	}
	f.waitEvents(t, min(len(f.transitions), f.srv.events.capacity()))
	return f
}

// waitEvents waits, boundedly, until the collector holds n events.
func (f *fixture) waitEvents(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.srv.events.newest(n)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("collector holds %d events, want %d", len(f.srv.events.newest(n)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// do sends a request and returns the status, headers and body.
func (f *fixture) do(t *testing.T, method, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func (f *fixture) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	status, h, body := f.do(t, http.MethodGet, path, "")
	if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %q %s", path, status, h.Get("Content-Type"), body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func actionPath(id, action string) string {
	return "/api/routes/" + url.PathEscape(id) + "/" + action
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got []routeJSON
	f.getJSON(t, "/api/routes", &got)
	var ids []string
	byID := make(map[string]routeJSON)
	for _, r := range got {
		ids = append(ids, r.ID)
		byID[r.ID] = r
	}
	if want := []string{direct, alice, carol, bob}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("ids %v, want sorted %v", ids, want)
	}
	tests := []struct {
		desc  string
		id    string
		check func(t *testing.T, r routeJSON)
	}{
		{"cooling route shows its cooldown and cause", alice, func(t *testing.T, r routeJSON) {
			if r.URL != "http://***:***@10.0.0.1:8080" || r.Scheme != "http" {
				t.Errorf("url %q scheme %q", r.URL, r.Scheme)
			}
			if r.Labels["region"] != "us" || r.Labels["plan"] != "gold" || len(r.Labels) != 2 {
				t.Errorf("labels %v", r.Labels)
			}
			if r.State != "cooling" || r.Cause != "proxy_timeout" || r.Weight != 0 {
				t.Errorf("state %q cause %q weight %v", r.State, r.Cause, r.Weight)
			}
			if r.Samples != 4 || r.ConsecutiveFailures != 4 || r.SuccessEWMA != 0 {
				t.Errorf("samples %d consecutive failures %d success %v", r.Samples, r.ConsecutiveFailures, r.SuccessEWMA)
			}
			mustTime(t, "cooldown_until", r.CooldownUntil)
			mustTime(t, "last_failure", r.LastFailure)
			if r.LastSuccess != "" {
				t.Errorf("last_success %q for a route that never succeeded", r.LastSuccess)
			}
			if len(r.Targets) != 0 {
				t.Errorf("targets %+v", r.Targets)
			}
		}},
		{"healthy route with a cooling pair", bob, func(t *testing.T, r routeJSON) {
			if r.URL != "socks5://***:***@10.0.0.2:1080" || r.Scheme != "socks5" {
				t.Errorf("url %q scheme %q", r.URL, r.Scheme)
			}
			if r.State != "healthy" || r.Cause != "" || r.CooldownUntil != "" {
				t.Errorf("state %q cause %q cooldown %q", r.State, r.Cause, r.CooldownUntil)
			}
			if r.Samples != 3 || r.SuccessEWMA != 1 || r.LatencyMSEWMA != 200 || r.Score <= 0 || r.Weight <= 0 {
				t.Errorf("evidence %+v", r)
			}
			mustTime(t, "last_success", r.LastSuccess)
			if len(r.Targets) != 1 {
				t.Fatalf("targets %+v", r.Targets)
			}
			p := r.Targets[0]
			if p.Target != "shop.example" || p.State != "cooling" || p.Cause != "blocked" || p.Samples != 2 {
				t.Errorf("pair %+v", p)
			}
			mustTime(t, "pair cooldown_until", p.CooldownUntil)
		}},
		{"direct route has no credentials to show", direct, func(t *testing.T, r routeJSON) {
			if r.URL != "direct" || r.Scheme != "direct" || r.State != "candidate" || len(r.Labels) != 0 {
				t.Errorf("route %+v", r)
			}
			if len(r.Targets) != 1 || r.Targets[0].Target != "down.example" || r.Targets[0].Cause != "target_5xx" {
				t.Errorf("targets %+v", r.Targets)
			}
		}},
		{"colon form is redacted too", carol, func(t *testing.T, r routeJSON) {
			if r.URL != "http://***:***@10.0.0.3:3128" {
				t.Errorf("url %q", r.URL)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tc.check(t, byID[tc.id])
		})
	}
}

func mustTime(t *testing.T, field, s string) {
	t.Helper()
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		t.Errorf("%s %q: %v", field, s, err)
	}
}

func TestRoutesOmitsAbsentFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	_, _, body := f.do(t, http.MethodGet, "/api/routes", "")
	var raw []map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, r := range raw {
		if r["id"] != direct {
			continue
		}
		for _, k := range []string{"last_success", "last_failure", "cooldown_until", "cause"} {
			if _, ok := r[k]; ok {
				t.Errorf("direct has %s: %v", k, r[k])
			}
		}
		if _, ok := r["labels"].(map[string]any); !ok {
			t.Errorf("labels %v, want an object", r["labels"])
		}
	}
}

func TestTargets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got struct {
		Incidents []incidentJSON `json:"incidents"`
	}
	f.getJSON(t, "/api/targets", &got)
	want := []incidentJSON{{Target: "down.example", Class: "target_5xx"}}
	if fmt.Sprint(got.Incidents) != fmt.Sprint(want) {
		t.Errorf("incidents %+v, want %+v", got.Incidents, want)
	}
}

func TestTargetPace(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64 // Unix ns
	clock.Store(time.Now().UnixNano())
	f := newFixture(t, Options{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	// A 429 teaches bob a rate at shop.example.
	at := time.Now().Add(-time.Minute)
	if err := f.e.Feedback(at, bob, "shop.example", engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	var got paceJSON
	f.getJSON(t, "/api/targets/shop.example/pace", &got)
	if got.Target != "shop.example" || got.Gateways != 1 || len(got.Pairs) != 1 {
		t.Fatalf("pace %+v, want bob's pair at shop.example, one gateway", got)
	}
	if p := got.Pairs[0]; p.Route != bob || p.Rate <= 0 || p.Own != p.Rate || p.Guess || got.Frozen != 0 {
		t.Errorf("pace %+v, want bob held to the rate its 429 taught, all of it here, the site not frozen", got)
	}
	// A second exit's 429 freezes the site: a new exit starts held.
	if err := f.e.Feedback(at, carol, "shop.example", engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	f.getJSON(t, "/api/targets/shop.example/pace", &got)
	if got.Frozen <= 0 || len(got.Pairs) != 2 {
		t.Errorf("pace %+v after two exits' 429s, want the site frozen", got)
	}
	var rows []targetRow
	f.getJSON(t, "/api/dash/targets", &rows)
	i := slices.IndexFunc(rows, func(r targetRow) bool { return r.Target == "shop.example" })
	if i < 0 || rows[i].Paced != 2 || rows[i].Frozen != round3(got.Frozen) {
		t.Errorf("dashboard rows %+v, want shop.example's with both routes paced and the freeze's rate %v", rows, got.Frozen)
	}
	// A site's first 429, its count young, brakes it for a second from
	// when it came.
	later := at.Add(30 * time.Second)
	if err := f.e.Feedback(later, bob, "news.example", engine.Outcome{Class: engine.RateLimited, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Store(later.Add(500 * time.Millisecond).UnixNano())
	f.getJSON(t, "/api/targets/news.example/pace", &got)
	f.getJSON(t, "/api/dash/targets", &rows)
	i = slices.IndexFunc(rows, func(r targetRow) bool { return r.Target == "news.example" })
	if got.Braked <= 0 || got.Frozen != 0 || i < 0 || rows[i].Braked != round3(got.Braked) {
		t.Errorf("pace %+v, dashboard rows %+v after news.example's first 429; want it braked", got, rows)
	}
	if status, _, body := f.do(t, http.MethodGet, "/api/targets/never.example/pace", ""); status != http.StatusNotFound {
		t.Errorf("unpaced target: %d %s, want 404", status, body)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc       string
		query      string
		wantStatus int
		wantLen    int // -1: all
	}{
		{"all by default", "", http.StatusOK, -1},
		{"limit", "?limit=3", http.StatusOK, 3},
		{"limit above what is kept", "?limit=100000", http.StatusOK, -1},
		{"zero limit", "?limit=0", http.StatusBadRequest, 0},
		{"not a number", "?limit=ten", http.StatusBadRequest, 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body := f.do(t, http.MethodGet, "/api/events"+tc.query, "")
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			if status != http.StatusOK {
				return
			}
			var got []engine.Event
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(f.transitions)
			slices.Reverse(want)
			if tc.wantLen >= 0 {
				want = want[:tc.wantLen]
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("events, newest first:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	t.Run("incident and reasons are kept", func(t *testing.T) {
		t.Parallel()
		var got []engine.Event
		f.getJSON(t, "/api/events", &got)
		var incident, cooled bool
		for _, ev := range got {
			incident = incident || ev.Kind == engine.EventIncident && ev.Open && ev.Target == "down.example"
			cooled = cooled || ev.Route == alice && ev.To == engine.Cooling && ev.Reason != ""
		}
		if !incident || !cooled {
			t.Errorf("incident opened %v, alice cooled with a reason %v", incident, cooled)
		}
	})
}

func TestEventsAreBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Events: 2})
	var got []engine.Event
	f.getJSON(t, "/api/events", &got)
	n := len(f.transitions)
	if want := []engine.Event{f.transitions[n-1], f.transitions[n-2]}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %+v, want the newest two of %d: %+v", got, n, want)
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	down := func() error { return errors.New("redis at 127.0.0.1:6379 unreachable") }
	tests := []struct {
		desc            string
		ready, degraded func() error
		path            string
		wantStatus      int
		wantBody        string
	}{
		{"alive", nil, nil, "/healthz", http.StatusOK, "ok\n"},
		{"alive while not ready", func() error { return errors.New("routes not loaded") }, nil, "/healthz", http.StatusOK, "ok\n"},
		{"ready without a check", nil, nil, "/readyz", http.StatusOK, "ready\n"},
		{"ready", func() error { return nil }, func() error { return nil }, "/readyz", http.StatusOK, "ready\n"},
		{"not ready", func() error { return errors.New("routes not loaded") }, nil, "/readyz", http.StatusServiceUnavailable, "routes not loaded\n"},
		{"degraded serves on", nil, down, "/readyz", http.StatusOK, "degraded: redis at 127.0.0.1:6379 unreachable\n"},
		{"not ready wins over degraded", func() error { return errors.New("routes not loaded") }, down, "/readyz", http.StatusServiceUnavailable, "routes not loaded\n"},
		{"restart required", nil, nil, "/readyz", http.StatusOK, "ready; restart required to apply: server, engine\n"},
		{"degraded and restart required", nil, down, "/readyz", http.StatusOK, "degraded: redis at 127.0.0.1:6379 unreachable; restart required to apply: server, engine\n"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			opts := Options{Ready: tc.ready, Degraded: tc.degraded}
			if strings.Contains(tc.desc, "restart") {
				opts.RestartRequired = func() []string { return []string{"server", "engine"} }
			}
			f := newFixture(t, opts)
			status, _, body := f.do(t, http.MethodGet, tc.path, "")
			if status != tc.wantStatus || string(body) != tc.wantBody {
				t.Errorf("GET %s: %d %q, want %d %q", tc.path, status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	bearer := "Bearer " + token
	tests := []struct {
		desc       string
		token      string // configured
		method     string
		path       string
		auth       string
		wantStatus int
		id         string       // route whose state is checked
		wantState  engine.State // after the request
	}{
		{"drain", token, http.MethodPost, actionPath(bob, "drain"), bearer, http.StatusNoContent, bob, engine.Draining},
		{"eject", token, http.MethodPost, actionPath(direct, "eject"), bearer, http.StatusNoContent, direct, engine.Ejected},
		{"restore a cooling route", token, http.MethodPost, actionPath(alice, "restore"), bearer, http.StatusNoContent, alice, engine.Healthy},
		{"scheme is case-insensitive", token, http.MethodPost, actionPath(bob, "drain"), "bearer " + token, http.StatusNoContent, bob, engine.Draining},
		{"missing token", token, http.MethodPost, actionPath(bob, "drain"), "", http.StatusUnauthorized, bob, engine.Healthy},
		{"wrong token", token, http.MethodPost, actionPath(bob, "drain"), "Bearer tok-124", http.StatusUnauthorized, bob, engine.Healthy},
		{"token prefix", token, http.MethodPost, actionPath(bob, "drain"), "Bearer tok", http.StatusUnauthorized, bob, engine.Healthy},
		{"basic auth", token, http.MethodPost, actionPath(bob, "drain"), "Basic " + token, http.StatusUnauthorized, bob, engine.Healthy},
		{"read-only server", "", http.MethodPost, actionPath(bob, "drain"), bearer, http.StatusForbidden, bob, engine.Healthy},
		{"GET is not an action", token, http.MethodGet, actionPath(bob, "drain"), bearer, http.StatusMethodNotAllowed, bob, engine.Healthy},
		{"unknown route", token, http.MethodPost, actionPath("http://10.9.9.9:80", "drain"), bearer, http.StatusNotFound, bob, engine.Healthy},
		{"unknown action", token, http.MethodPost, actionPath(bob, "reboot"), bearer, http.StatusNotFound, bob, engine.Healthy},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{Token: tc.token})
			status, h, body := f.do(t, tc.method, tc.path, tc.auth)
			if status != tc.wantStatus {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, status, body, tc.wantStatus)
			}
			if status != http.StatusNoContent {
				var e struct{ Error string }
				if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
					t.Errorf("error body %q", body)
				}
			}
			if status == http.StatusForbidden && !strings.Contains(string(body), "admin.token") {
				t.Errorf("403 body %q does not say how to enable actions", body)
			}
			if status == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", h.Get("WWW-Authenticate"))
			}
			if status == http.StatusMethodNotAllowed && h.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q", h.Get("Allow"))
			}
			st, ok := f.e.Route(tc.id)
			if !ok || st.Health.State != tc.wantState {
				t.Errorf("%s is %v, want %v", tc.id, st.Health.State, tc.wantState)
			}
		})
	}
}

func TestActionEventsAreRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Token: token})
	if status, _, body := f.do(t, http.MethodPost, actionPath(bob, "drain"), "Bearer "+token); status != http.StatusNoContent {
		t.Fatalf("drain: %d %s", status, body)
	}
	f.waitEvents(t, len(f.transitions)+1)
	var got []engine.Event
	f.getJSON(t, "/api/events?limit=1", &got)
	if len(got) != 1 || got[0].Route != bob || got[0].To != engine.Draining || got[0].Reason == "" {
		t.Errorf("newest event %+v, want bob draining", got)
	}
}

// Every action and every refused one is logged with the action, the
// client's address and the route when it is one; never a token, nor an
// id no route has (it may be a route typed with its password).
func TestActionLogs(t *testing.T) {
	t.Parallel()
	typedWithPassword := "http://alice:s3cr3t-Pa55@10.0.0.1:8080"
	tests := []struct {
		desc      string
		token     string // configured
		path      string
		auth      string
		wantMsg   string
		wantLevel string
		wantRoute string // "" for none
	}{
		{"drain", token, actionPath(bob, "drain"), "Bearer " + token, "admin action", "INFO", bob},
		{"restore", token, actionPath(alice, "restore"), "Bearer " + token, "admin action", "INFO", alice},
		{"wrong token", token, actionPath(bob, "eject"), "Bearer tok-124", "admin action refused: missing or wrong bearer token", "WARN", bob},
		{"missing token", token, actionPath(bob, "eject"), "", "admin action refused: missing or wrong bearer token", "WARN", bob},
		{"read-only", "", actionPath(bob, "drain"), "Bearer " + token, "admin action refused: the admin API is read-only", "WARN", bob},
		{"unknown route typed with a password", token, actionPath(typedWithPassword, "drain"), "Bearer " + token, "admin action refused: unknown route", "WARN", ""},
		{"wrong token, unknown route", token, actionPath(typedWithPassword, "drain"), "Bearer tok-124", "admin action refused: missing or wrong bearer token", "WARN", ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			out := &logtest.Buffer{}
			f := newFixture(t, Options{Token: tc.token, Log: slog.New(slog.NewJSONHandler(out, nil))})
			f.do(t, http.MethodPost, tc.path, tc.auth)
			text := out.String()
			var line struct{ Level, Msg, Action, Remote, Route string }
			if strings.Count(text, "\n") != 1 || json.Unmarshal([]byte(text), &line) != nil {
				t.Fatalf("want one JSON line, got %q", text)
			}
			action := tc.path[strings.LastIndexByte(tc.path, '/')+1:]
			if line.Msg != tc.wantMsg || line.Level != tc.wantLevel || line.Action != action || line.Route != tc.wantRoute || !strings.HasPrefix(line.Remote, "127.0.0.1:") {
				t.Errorf("logged %+v, want %s %q action %s route %q from 127.0.0.1", line, tc.wantLevel, tc.wantMsg, action, tc.wantRoute)
			}
			for _, secret := range append([]string{token, "tok-124"}, credentials...) {
				if strings.Contains(text, secret) {
					t.Errorf("the log holds %q: %s", secret, text)
				}
			}
		})
	}
}

func TestUnknownPaths(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Token: token})
	tests := []struct {
		desc       string
		method     string
		path       string
		wantStatus int
	}{
		{"beside the dashboard", http.MethodGet, "/index.html", http.StatusNotFound},
		{"the dashboard's folder", http.MethodGet, "/ui/", http.StatusNotFound},
		{"unknown api", http.MethodGet, "/api/clusters", http.StatusNotFound},
		{"unknown route", http.MethodGet, "/api/routes/" + url.PathEscape("http://alice-Kx7:s3cr3t-Pa55@10.0.0.1:8080"), http.StatusNotFound},
		{"trailing segment", http.MethodPost, actionPath(bob, "drain") + "/now", http.StatusNotFound},
		{"POST to a read endpoint", http.MethodPost, "/api/routes", http.StatusMethodNotAllowed},
		{"DELETE metrics", http.MethodDelete, "/metrics", http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, h, body := f.do(t, tc.method, tc.path, "")
			if status != tc.wantStatus {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, status, tc.wantStatus)
			}
			var e struct{ Error string }
			if h.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e.Error == "" {
				t.Errorf("body %q (%s), want a JSON error", body, h.Get("Content-Type"))
			}
		})
	}
}

// TestNoCredentialsInAnyResponse requests every endpoint, including errors
// and ids typed with their credentials, and searches every body and header
// for a proxy's user name or password.
func TestNoCredentialsInAnyResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Token: token, Ready: func() error { return errors.New("warming up") }})
	f.m.ObserveRequest(http.MethodGet, engine.OK, 1, 0, time.Millisecond)
	f.m.ObserveAttempt(alice, engine.ProxyTimeout, time.Second)
	typedWithPassword := "http://alice-Kx7:s3cr3t-Pa55@10.0.0.1:8080"
	typedWithUser := "http://alice-Kx7@10.0.0.1:8080"
	requests := []struct{ method, path, auth string }{
		{http.MethodGet, "/healthz", ""},
		{http.MethodGet, "/readyz", ""},
		{http.MethodGet, "/metrics", ""},
		{http.MethodGet, "/api/routes", ""},
		{http.MethodGet, "/api/targets", ""},
		{http.MethodGet, "/api/targets/a.example/pace", ""},
		{http.MethodGet, "/api/events", ""},
		{http.MethodGet, "/api/events?limit=bad", ""},
		{http.MethodGet, "/nowhere/" + url.PathEscape(typedWithPassword), ""},
		{http.MethodPost, actionPath(typedWithPassword, "drain"), "Bearer " + token},
		{http.MethodPost, actionPath(typedWithPassword, "drain"), ""},
		{http.MethodGet, actionPath(typedWithPassword, "drain"), ""},
		{http.MethodPost, actionPath(typedWithUser, "drain"), "Bearer " + token},
		{http.MethodPost, actionPath(alice, "eject"), "Bearer " + token},
		{http.MethodGet, "/api/routes", ""}, // again, with alice ejected
		{http.MethodGet, "/api/events", ""},
		{http.MethodGet, "/api/routes/" + url.PathEscape(alice), ""},
		{http.MethodGet, "/api/routes/" + url.PathEscape(typedWithPassword), ""},
		{http.MethodGet, "/api/dash/overview", ""},
		{http.MethodGet, "/api/dash/routes", ""},
		{http.MethodGet, "/api/dash/heatmap", ""},
		{http.MethodGet, "/api/dash/targets", ""},
		{http.MethodGet, "/api/events?route=" + url.QueryEscape(typedWithPassword), ""},
	}
	for _, r := range requests {
		status, h, body := f.do(t, r.method, r.path, r.auth)
		text := fmt.Sprint(h) + string(body)
		for _, c := range credentials {
			if strings.Contains(text, c) || strings.Contains(text, url.QueryEscape(c)) {
				t.Errorf("%s %s (%d) shows a credential: %s", r.method, r.path, status, text)
			}
		}
	}
}

func TestCloseStopsCollector(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Token: token})
	f.srv.Close()
	select {
	case <-f.srv.done:
	case <-time.After(5 * time.Second):
		t.Fatal("collector still running after Close")
	}
	f.srv.Close() // idempotent
	// The engine publishes on without the closed subscription, and the
	// API keeps serving what was collected.
	if err := f.e.Drain(time.Now(), bob); err != nil {
		t.Fatal(err)
	}
	var got []engine.Event
	f.getJSON(t, "/api/events", &got)
	if len(got) != len(f.transitions) {
		t.Errorf("%d events after Close, want the %d collected before", len(got), len(f.transitions))
	}
}

func TestRoutesCountAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.m.ObserveAttempt(bob, engine.OK, time.Millisecond)
	f.m.ObserveAttempt(bob, engine.Blocked, time.Millisecond)
	f.m.ObserveAttempt(bob, engine.OK, time.Millisecond)
	var routes []struct {
		ID        string `json:"id"`
		Attempts  uint64 `json:"attempts"`
		Successes uint64 `json:"successes"`
	}
	f.getJSON(t, "/api/routes", &routes)
	for _, r := range routes {
		want := [2]uint64{}
		if r.ID == bob {
			want = [2]uint64{3, 2}
		}
		if got := [2]uint64{r.Attempts, r.Successes}; got != want {
			t.Errorf("%s: attempts, successes = %v, want %v", r.ID, got, want)
		}
	}
}

// Every state change on /api/events says where it came from and went to,
// candidate included, which the engine's own JSON leaves out as the zero
// state.
func TestEventsAlwaysHaveFrom(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got []map[string]any
	f.getJSON(t, "/api/events", &got)
	fromCandidate := false
	for _, ev := range got {
		if ev["kind"] != "state" {
			continue
		}
		if _, ok := ev["from"]; !ok {
			t.Errorf("state event without from: %v", ev)
		}
		if _, ok := ev["to"]; !ok {
			t.Errorf("state event without to: %v", ev)
		}
		fromCandidate = fromCandidate || ev["from"] == "candidate"
	}
	if !fromCandidate {
		t.Fatalf("no state change from candidate among %v: the fixture changed", got)
	}
}

func TestAPIEventJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc string
		ev   engine.Event
		want string
	}{
		{"from candidate", engine.Event{Time: at, Kind: engine.EventState, Route: "r", From: engine.Candidate, To: engine.Healthy},
			`{"from":"candidate","time":"2026-01-01T00:00:00Z","kind":"state","route":"r","to":"healthy"}`},
		{"to candidate", engine.Event{Time: at, Kind: engine.EventState, Route: "r", From: engine.Draining, To: engine.Candidate},
			`{"to":"candidate","time":"2026-01-01T00:00:00Z","kind":"state","route":"r","from":"draining"}`},
		{"neither", engine.Event{Time: at, Kind: engine.EventState, Route: "r", From: engine.Healthy, To: engine.Cooling},
			`{"time":"2026-01-01T00:00:00Z","kind":"state","route":"r","from":"healthy","to":"cooling"}`},
		{"not a state change", engine.Event{Time: at, Kind: engine.EventIncident, Route: "r", Target: "t", Open: true},
			`{"time":"2026-01-01T00:00:00Z","kind":"incident","route":"r","target":"t","open":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(apiEvent(tc.ev))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

// With Pprof, Go's profiles are served under /debug/pprof/ to holders of
// the token only, refusals logged; without Pprof, or without a token to
// guard them, there are none.
func TestPprof(t *testing.T) {
	t.Parallel()
	const token = "tok-pprof"
	tests := []struct {
		desc   string
		opts   Options
		auth   string
		path   string
		status int
	}{
		{desc: "index with the token", opts: Options{Token: token, Pprof: true}, auth: "Bearer " + token, path: "/debug/pprof/", status: http.StatusOK},
		{desc: "a heap profile with the token", opts: Options{Token: token, Pprof: true}, auth: "Bearer " + token, path: "/debug/pprof/heap?debug=1", status: http.StatusOK},
		{desc: "a CPU profile with the token", opts: Options{Token: token, Pprof: true}, auth: "Bearer " + token, path: "/debug/pprof/profile?seconds=1", status: http.StatusOK},
		{desc: "no token", opts: Options{Token: token, Pprof: true}, path: "/debug/pprof/", status: http.StatusUnauthorized},
		{desc: "wrong token", opts: Options{Token: token, Pprof: true}, auth: "Bearer tok-pprog", path: "/debug/pprof/heap", status: http.StatusUnauthorized},
		{desc: "wrong token, CPU profile", opts: Options{Token: token, Pprof: true}, auth: "Bearer nope", path: "/debug/pprof/profile?seconds=1", status: http.StatusUnauthorized},
		{desc: "off", opts: Options{Token: token}, auth: "Bearer " + token, path: "/debug/pprof/", status: http.StatusNotFound},
		{desc: "on without a token to guard it", opts: Options{Pprof: true}, path: "/debug/pprof/", status: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			logs := &logtest.Buffer{}
			tc.opts.Log = slog.New(slog.NewTextHandler(logs, nil))
			f := newFixture(t, tc.opts)
			status, h, body := f.do(t, http.MethodGet, tc.path, tc.auth)
			if status != tc.status {
				t.Fatalf("GET %s: %d %s, want %d", tc.path, status, body, tc.status)
			}
			switch status {
			case http.StatusOK:
				if len(body) == 0 {
					t.Error("an empty profile")
				}
			case http.StatusUnauthorized:
				if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(logs.String(), "admin request refused") {
					t.Errorf("refusal: WWW-Authenticate %q, logs %q", h.Get("WWW-Authenticate"), logs.String())
				}
				if sent, ok := strings.CutPrefix(tc.auth, "Bearer "); ok && strings.Contains(logs.String(), sent) {
					t.Errorf("the log quotes the token sent: %q", logs.String())
				}
			}
		})
	}
}

// POST /api/reload does what SIGHUP does for holders of the token, and
// answers with the reload's result; everyone else is refused, and nothing
// is reloaded.
func TestReloadEndpoint(t *testing.T) {
	t.Parallel()
	const token = "T0ken"
	refusal := errors.New("switchyard.toml:12: engine.alpha: must be in (0, 1]")
	tests := []struct {
		desc       string
		token      string
		noReload   bool
		result     error
		method     string
		auth       string
		wantStatus int
		wantBody   string
		wantCalls  int
	}{
		{desc: "ok", token: token, method: http.MethodPost, auth: "Bearer " + token, wantStatus: 200, wantBody: `{"result":"ok"}`, wantCalls: 1},
		{desc: "refused, naming file and line", token: token, result: refusal, method: http.MethodPost, auth: "Bearer " + token, wantStatus: 422,
			wantBody: `{"error":"reload refused; the running configuration stays: switchyard.toml:12: engine.alpha: must be in (0, 1]"}`, wantCalls: 1},
		{desc: "no token configured", method: http.MethodPost, auth: "Bearer " + token, wantStatus: 403, wantBody: "admin token"},
		{desc: "no bearer", token: token, method: http.MethodPost, wantStatus: 401, wantBody: "bearer token"},
		{desc: "wrong bearer", token: token, method: http.MethodPost, auth: "Bearer nope", wantStatus: 401, wantBody: "bearer token"},
		{desc: "GET", token: token, method: http.MethodGet, auth: "Bearer " + token, wantStatus: 405, wantBody: "use POST"},
		{desc: "nothing to reload", token: token, noReload: true, method: http.MethodPost, auth: "Bearer " + token, wantStatus: 404, wantBody: "no configuration"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			opts := Options{Token: tc.token, Reload: func() error { calls.Add(1); return tc.result }}
			if tc.noReload {
				opts.Reload = nil
			}
			f := newFixture(t, opts)
			status, _, body := f.do(t, tc.method, "/api/reload", tc.auth)
			if status != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
				t.Errorf("%d %s, want %d with %s", status, body, tc.wantStatus, tc.wantBody)
			}
			if n := int(calls.Load()); n != tc.wantCalls {
				t.Errorf("reloaded %d times, want %d", n, tc.wantCalls)
			}
		})
	}
}

// fixedRoutes is the routes as a gateway that never reloads publishes
// them.
// newListFixture serves the routes of list (proxy-list lines) from an
// engine with cfg, each added at at, with opts; it returns the parsed
// routes beside the fixture.
func newListFixture(t *testing.T, list string, cfg engine.Config, at time.Time, opts Options) (*fixture, []route.Route) {
	t.Helper()
	parsed, err := route.ParseList("test", []byte(list))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	routes := make([]*route.Route, len(parsed))
	for i := range parsed {
		routes[i] = &parsed[i]
		if err := e.AddRoute(at, parsed[i].Spec()); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{e: e, m: NewMetrics(e, nil)}
	f.srv = NewServer(e, fixedRoutes(t, routes), f.m, opts)
	t.Cleanup(f.srv.Close)
	f.hs = httptest.NewServer(f.srv.Handler())
	t.Cleanup(f.hs.Close)
	return f, parsed
}

func fixedRoutes(tb testing.TB, routes []*route.Route) func() *route.Set {
	set, err := route.NewSet(routes, route.Dialer{})
	if err != nil {
		tb.Fatal(err)
	}
	return func() *route.Set { return set }
}

package admin

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/logtest"
)

// post sends a POST with a JSON body and returns the status and body.
func (f *fixture) post(t *testing.T, path, auth, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.hs.URL+path, strings.NewReader(body))
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
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// fakeProxy is the forward proxy as /api/try meets it: it keeps the
// request it was handed and answers as the gateway does.
// fakeFetcher stands for the gateway's attempt loop: it keeps the request
// it was handed and answers with a two-attempt trace, the first refused by
// a validator.
type fakeFetcher struct {
	mu   sync.Mutex
	got  *gateway.FetchRequest // guarded by mu
	user string                // guarded by mu: whom Authenticate was asked about
}

func (f *fakeFetcher) Authenticate(_ context.Context, user, password, _ string) (string, engine.Labels, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.user = user + ":" + password
	if user == "mallory" {
		return "", nil, errors.New("wrong password")
	}
	return user, engine.Labels{{Key: "plan", Value: "cheap"}}, nil
}

func (f *fakeFetcher) Fetch(_ context.Context, req gateway.FetchRequest) (*gateway.FetchResult, error) {
	f.mu.Lock()
	f.got = &req
	f.mu.Unlock()
	return &gateway.FetchResult{
		Status: http.StatusTeapot, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("hello"), RequestID: "req1",
		Attempts: []gateway.AttemptTrace{
			{Route: alice, Class: engine.ContentInvalid, Status: 200, Latency: 3 * time.Millisecond, Detail: "body matches must_not_match"},
			{Route: bob, Class: engine.OK, Status: 418, Latency: 2 * time.Millisecond, Start: 4 * time.Millisecond, Hedge: true},
		},
	}, nil
}

func (f *fakeFetcher) request() (*gateway.FetchRequest, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got, f.user
}

func TestTry(t *testing.T) {
	t.Parallel()
	bearer := "Bearer " + token
	good := `{"url":"http://shop.example/p?q=1","session":"s1","labels":"region=eu","must_not_match":"captcha","user":"u","password":"pw"}`
	tests := []struct {
		desc       string
		token      string // configured
		auth       string
		body       string
		wantStatus int
	}{
		{"sent", token, bearer, good, http.StatusOK},
		{"https, through a tunnel", token, bearer, `{"url":"https://shop.example/"}`, http.StatusOK},
		{"read-only gateway", "", bearer, good, http.StatusForbidden},
		{"no token", token, "", good, http.StatusUnauthorized},
		{"wrong token", token, "Bearer tok-124", good, http.StatusUnauthorized},
		{"not JSON", token, bearer, `url=x`, http.StatusBadRequest},
		{"credentials in the URL", token, bearer, `{"url":"http://alice-Kx7:s3cr3t-Pa55@shop.example/"}`, http.StatusBadRequest},
		{"relative URL", token, bearer, `{"url":"/p"}`, http.StatusBadRequest},
		{"a method with a body", token, bearer, `{"url":"http://shop.example/","method":"POST"}`, http.StatusBadRequest},
		{"bad labels", token, bearer, `{"url":"http://shop.example/","labels":"region"}`, http.StatusBadRequest},
		{"bad regexp", token, bearer, `{"url":"http://shop.example/","must_not_match":"("}`, http.StatusBadRequest},
		{"a gateway user refused", token, bearer, `{"url":"http://shop.example/","user":"mallory","password":"x"}`, http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			fetcher := &fakeFetcher{}
			var logs logtest.Buffer
			f := newFixture(t, Options{Token: tc.token, Fetcher: fetcher, Log: slog.New(slog.NewTextHandler(&logs, nil))})
			status, body := f.post(t, "/api/try", tc.auth, tc.body)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			for _, secret := range append([]string{token, "tok-124"}, credentials...) {
				if strings.Contains(string(body), secret) || strings.Contains(logs.String(), secret) {
					t.Errorf("the answer or the log shows %q: %s %s", secret, body, logs.String())
				}
			}
			r, user := fetcher.request()
			if status != http.StatusOK {
				if r != nil {
					t.Error("a refused try was fetched")
				}
				return
			}
			if tc.desc != "sent" {
				return
			}
			if r.Method != http.MethodGet || r.URL != "http://shop.example/p?q=1" || r.Session != "s1" || r.Labels.String() != "region=eu" ||
				r.Validators.MustNotMatch == nil || r.User != "u" || r.UserLabels.String() != "plan=cheap" || user != "u:pw" {
				t.Errorf("the gateway was handed %+v (user %q)", r, user)
			}
			var got tryResult
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status != http.StatusTeapot || got.Bytes != 5 || got.ContentType != "text/plain" || got.RequestID != "req1" || len(got.Attempts) != 2 ||
				got.Attempts[0].Class != "content_invalid" || got.Attempts[0].Detail == "" || got.Attempts[1].Route != bob || !got.Attempts[1].Hedge || got.Attempts[1].StartMS != 4 {
				t.Errorf("result %+v", got)
			}
		})
	}
	t.Run("no gateway to try", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, Options{Token: token})
		if status, _ := f.post(t, "/api/try", bearer, good); status != http.StatusNotFound {
			t.Errorf("status %d, want 404", status)
		}
	})
}

// TestDashboardReadOnly: without a token every view serves, and says the
// gateway is read-only; the views take no writes.
func TestDashboardReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for _, path := range []string{"/", "/ui/app.js", "/ui/style.css", "/api/dash/overview", "/api/dash/routes", "/api/dash/heatmap", "/api/dash/targets", "/api/routes/" + url.PathEscape(bob)} {
		status, h, body := f.do(t, http.MethodGet, path, "")
		if status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
		if path == "/" && (!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") || !strings.HasPrefix(h.Get("Content-Type"), "text/html")) {
			t.Errorf("GET /: %v", h)
		}
		if status, _, _ := f.do(t, http.MethodPost, path, "Bearer "+token); status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", path, status)
		}
	}
	var o struct {
		ReadOnly bool `json:"read_only"`
	}
	f.getJSON(t, "/api/dash/overview", &o)
	if !o.ReadOnly {
		t.Error("the overview does not say the gateway is read-only")
	}
}

func TestTokenNeverEchoed(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	f := newFixture(t, Options{Token: token, Fetcher: &fakeFetcher{}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	paths := []string{"/", "/ui/app.js", "/api/dash/overview", "/api/dash/routes", "/api/dash/heatmap", "/api/dash/targets", "/api/routes/" + url.PathEscape(bob),
		"/api/routes/" + url.PathEscape("http://alice-Kx7:s3cr3t-Pa55@10.0.0.1:8080")}
	for _, auth := range []string{"", "Bearer " + token, "Bearer tok-124"} {
		for _, path := range paths {
			_, h, body := f.do(t, http.MethodGet, path, auth)
			if text := fmt.Sprint(h) + string(body); strings.Contains(text, token) || strings.Contains(text, "tok-124") {
				t.Errorf("GET %s with %q shows the token: %s", path, auth, text)
			}
		}
		_, body := f.post(t, "/api/try", auth, `{"url":"http://shop.example/"}`)
		if strings.Contains(string(body), token) || strings.Contains(string(body), "tok-124") {
			t.Errorf("POST /api/try with %q shows the token: %s", auth, body)
		}
	}
	if strings.Contains(logs.String(), token) || strings.Contains(logs.String(), "tok-124") {
		t.Errorf("the log shows the token: %s", logs.String())
	}
}

func TestDashRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	// The last failed attempt's class, whatever came after it; a cancel
	// is no failure.
	for _, c := range []engine.Class{engine.ProxyTimeout, engine.Blocked, engine.OK, engine.Canceled} {
		f.m.ObserveAttempt(alice, c, time.Millisecond)
	}
	var got struct {
		States  []string `json:"states"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
	}
	f.getJSON(t, "/api/dash/routes", &got)
	if len(got.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(got.Rows))
	}
	col := make(map[string]int)
	for i, c := range got.Columns {
		col[c] = i
	}
	for _, r := range got.Rows {
		if len(r) != len(got.Columns) {
			t.Fatalf("row %v has %d columns, want %d", r, len(r), len(got.Columns))
		}
		if r[col["id"]] == carol && r[col["tier"]] != 1.0 {
			t.Errorf("carol's row %v: tier %v, want 1", r, r[col["tier"]])
		}
		if r[col["id"]] != alice {
			continue
		}
		state := got.States[int(r[col["state"]].(float64))]
		if state != "cooling" || r[col["cause"]] != "proxy_timeout" || r[col["samples"]] != 4.0 || r[col["last_failure_class"]] != "blocked" ||
			r[col["labels"]] != "plan=gold region=us" || r[col["tier"]] != 0.0 || r[col["url"]] != "http://***:***@10.0.0.1:8080" {
			t.Errorf("alice's row %v", r)
		}
	}
}

func TestRemainingMS(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	tests := []struct {
		desc  string
		until int64
		want  int64
	}{
		{"none", 0, 0},
		{"passed", now.Add(-time.Second).UnixNano(), 0},
		{"ahead", now.Add(1500 * time.Millisecond).UnixNano(), 1500},
		{"until restored", math.MaxInt64, -1},
	}
	for _, tc := range tests {
		if got := remainingMS(tc.until, now); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.desc, got, tc.want)
		}
	}
}

func TestDashHeatmap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc, query string
		wantStatus  int
		wantTargets string
		wantCells   map[string]string // route → cells
	}{
		{"busiest first", "?group=region", http.StatusOK, "[down.example shop.example]",
			// bob's pair with shop.example cooling (3) at score 0.7; the
			// incident froze direct's penalty there, so it stays healthy.
			map[string]string{bob: "--37", direct: "12--", alice: "----"}},
		{"one column", "?targets=1", http.StatusOK, "[down.example]", nil},
		{"too many columns", "?targets=1000", http.StatusBadRequest, "", nil},
		{"not a number", "?targets=x", http.StatusBadRequest, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body := f.do(t, http.MethodGet, "/api/dash/heatmap"+tc.query, "")
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			if status != http.StatusOK {
				return
			}
			var got struct {
				Targets []string `json:"targets"`
				Rows    [][]any  `json:"rows"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.Targets) != tc.wantTargets {
				t.Errorf("targets %v, want %s", got.Targets, tc.wantTargets)
			}
			var groups []string
			for _, r := range got.Rows {
				groups = append(groups, r[1].(string))
				cells := r[3].(string)
				if len(cells) != 2*len(got.Targets) {
					t.Errorf("row %v: cells %q for %d targets", r[0], cells, len(got.Targets))
				}
				if want, ok := tc.wantCells[r[0].(string)]; ok && cells != want {
					t.Errorf("%s: cells %q, want %q", r[0], cells, want)
				}
			}
			if tc.query == "?group=region" && fmt.Sprint(groups) != "[  eu us]" {
				t.Errorf("groups in row order %q, want the unlabelled first, then eu, us", groups)
			}
		})
	}
}

func TestDashTargets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got []targetRow
	f.getJSON(t, "/api/dash/targets", &got)
	byName := make(map[string]targetRow)
	for _, r := range got {
		byName[r.Target] = r
	}
	if shop := byName["shop.example"]; shop.Banned != 1 || shop.Good != 0 || shop.Incident != "" {
		t.Errorf("shop.example %+v, want bob's pair banned", shop)
	}
	down := byName["down.example"]
	if down.Incident != "target_5xx" || len(down.Recent) == 0 || !down.Recent[0].Open {
		t.Errorf("down.example %+v, want its open incident", down)
	}
	if got[0].Target != "down.example" {
		t.Errorf("first %s, want the busiest, down.example", got[0].Target)
	}
}

func TestDashOverview(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := newFixture(t, Options{Token: token, StateAddr: "127.0.0.1:6379", Degraded: func() error { return fmt.Errorf("redis out of reach") },
		RestartRequired: func() []string { return []string{"server"} },
		SampleEvery:     time.Hour, Now: func() time.Time { return now }})
	// Eleven requests (one failed) with ten retries and a hedge between
	// two samples a second apart.
	f.srv.series.Sample(now.Add(-time.Second), f.m.totals())
	for i := range 10 {
		class := engine.OK
		if i == 0 {
			class = engine.Blocked
		}
		f.m.ObserveRequest(http.MethodGet, class, min(i, 1), 0, 100*time.Millisecond)
	}
	f.m.ObserveRequest(http.MethodGet, engine.OK, 1, 1, 100*time.Millisecond)
	f.m.ObserveAttempt(bob, engine.OK, 100*time.Millisecond)
	// Two attempts the gateway could not make, and 25 routes whose proxy
	// refuses their credentials: more than an alarm names.
	f.m.ObserveLocalError("descriptors")
	f.m.ObserveLocalError("upstream_conns")
	for i := range maxAlarmRoutes + 5 {
		f.m.ObserveProbe(fmt.Sprintf("locked-%02d", i), engine.ProxyAuth)
	}
	f.srv.series.Sample(now, f.m.totals())
	var got struct {
		Routes int            `json:"routes"`
		Pool   map[string]int `json:"pool"`
		State  struct {
			Kind, Addr, Degraded string
		} `json:"state"`
		Alarms    []alarmJSON    `json:"alarms"`
		Incidents []incidentJSON `json:"incidents"`
		Budget    struct {
			Requests, Retries, Hedges uint64
			RetryUse                  float64 `json:"retry_use"`
			HedgeUse                  float64 `json:"hedge_use"`
		} `json:"budget"`
		Series    [][]float64 `json:"series"`
		ReadOnly  bool        `json:"read_only"`
		LabelKeys []string    `json:"label_keys"`
	}
	f.getJSON(t, "/api/dash/overview", &got)
	if got.Routes != 4 || got.Pool["cooling"] != 1 || got.Pool["candidate"] != 2 || got.Pool["healthy"] != 1 || got.Pool["draining"] != 0 {
		t.Errorf("routes %d, pool %v", got.Routes, got.Pool)
	}
	if got.State.Kind != "redis" || got.State.Addr != "127.0.0.1:6379" || got.State.Degraded != "redis out of reach" || got.ReadOnly {
		t.Errorf("state %+v, read-only %v", got.State, got.ReadOnly)
	}
	if fmt.Sprint(got.LabelKeys) != "[plan region]" {
		t.Errorf("label keys %v", got.LabelKeys)
	}
	if fmt.Sprint(got.Incidents) != "[{down.example target_5xx}]" {
		t.Errorf("incidents %v", got.Incidents)
	}
	// 11 requests: the retry budget is 10 + ⌊0.2·11⌋ = 12, the hedge
	// budget ⌊0.05·11⌋ = 0 (no hedge fits, so it shows none used).
	if b := got.Budget; b.Requests != 11 || b.Retries != 10 || b.Hedges != 1 || b.RetryUse != round3(11.0/12) || b.HedgeUse != 0 {
		t.Errorf("budget %+v", b)
	}
	if len(got.Series) != 1 || got.Series[0][2] != 11 || got.Series[0][3] != 10 || got.Series[0][7] != round3(bucketMS(27)) || got.Series[0][9] != 2 {
		t.Errorf("series %v", got.Series)
	}
	var named []string
	if i := slices.IndexFunc(got.Alarms, func(a alarmJSON) bool { return a.Kind == "proxy_auth" }); i >= 0 {
		named, got.Alarms[i].Routes = got.Alarms[i].Routes, nil
	}
	if len(named) != maxAlarmRoutes || named[0] != "locked-00" || named[maxAlarmRoutes-1] != fmt.Sprintf("locked-%02d", maxAlarmRoutes-1) {
		t.Errorf("the proxy_auth alarm names %v, want the first %d failing routes", named, maxAlarmRoutes)
	}
	want := []alarmJSON{
		{Kind: "state_degraded", Detail: "redis out of reach"},
		{Kind: "proxy_auth", Count: maxAlarmRoutes + 5},
		{Kind: "local_resources", Count: 2, Seconds: 1},
		{Kind: "restart_required", Sections: []string{"server"}},
	}
	if fmt.Sprint(got.Alarms) != fmt.Sprint(want) {
		t.Errorf("alarms %+v, want %+v", got.Alarms, want)
	}
}

func TestDashOverviewWithoutAlarms(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got struct {
		Alarms []alarmJSON `json:"alarms"`
	}
	f.getJSON(t, "/api/dash/overview", &got)
	if got.Alarms == nil || len(got.Alarms) != 0 {
		t.Errorf("alarms %#v, want an empty list", got.Alarms)
	}
}

func TestRouteDetail(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var got struct {
		routeJSON
		CostMS float64        `json:"cost_ms"`
		Events []engine.Event `json:"events"`
	}
	f.getJSON(t, "/api/routes/"+url.PathEscape(bob), &got)
	if got.ID != bob || len(got.Targets) != 1 || got.CostMS <= 0 {
		t.Errorf("bob: %+v", got.routeJSON)
	}
	var cooled bool
	for _, e := range got.Events {
		if e.Route != bob {
			t.Errorf("bob's detail holds %+v", e)
		}
		cooled = cooled || e.Target == "shop.example" && e.To == engine.Cooling && e.Reason != ""
	}
	if !cooled {
		t.Errorf("bob's events %+v miss shop.example cooling with its reason", got.Events)
	}
}

func TestEventFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc, query string
		wantStatus  int
		keep        func(e engine.Event) bool
	}{
		{"route", "?route=" + url.QueryEscape(alice), http.StatusOK, func(e engine.Event) bool { return e.Route == alice }},
		{"target", "?target=down.example", http.StatusOK, func(e engine.Event) bool { return e.Target == "down.example" }},
		{"kind", "?kind=incident", http.StatusOK, func(e engine.Event) bool { return e.Kind == engine.EventIncident }},
		{"target and limit", "?target=down.example&limit=1", http.StatusOK, func(e engine.Event) bool { return e.Target == "down.example" }},
		{"unknown kind", "?kind=score", http.StatusBadRequest, nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body := f.do(t, http.MethodGet, "/api/events"+tc.query, "")
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d", status, tc.wantStatus)
			}
			if status != http.StatusOK {
				return
			}
			var got []engine.Event
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			var want []engine.Event
			for i := len(f.transitions) - 1; i >= 0; i-- {
				if tc.keep(f.transitions[i]) {
					want = append(want, f.transitions[i])
				}
			}
			if strings.Contains(tc.query, "limit=1") {
				want = want[:1]
			}
			if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v\nwant %v", got, want)
			}
		})
	}
}

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"gzip, deflate, br, zstd", true},
		{"br;q=1.0, GZIP;q=0.5", true},
		{"gzip;q=0", false},
		{"gzip; q=0.000", false},
		{"gzip;q=bad", false},
		{"deflate, *", false},
		{"xgzip", false},
	}
	for _, tc := range tests {
		if got := acceptsGzip(tc.header); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

// TestGzip: every JSON endpoint answers gzipped to a client that asks,
// the same JSON as plain.
func TestGzip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for _, path := range []string{"/api/dash/routes", "/api/routes", "/api/targets", "/api/events", "/api/routes/" + url.PathEscape(bob)} {
		t.Run(path, func(t *testing.T) {
			_, _, plain := f.do(t, http.MethodGet, path, "")
			req, err := http.NewRequest(http.MethodGet, f.hs.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport leaves the body compressed
			resp, err := f.hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("headers %v", resp.Header)
			}
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(plain) {
				t.Errorf("gzipped %s, plain %s", got, plain)
			}
		})
	}
}

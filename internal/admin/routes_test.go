package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
)

// nextPage is the next page's path of a Link header (rel="next"), "" for
// none.
func nextPage(t *testing.T, h http.Header) string {
	t.Helper()
	link := h.Get("Link")
	if link == "" {
		return ""
	}
	ref, ok := strings.CutSuffix(link, `>; rel="next"`)
	if !ok || !strings.HasPrefix(ref, "<") {
		t.Fatalf("Link %q", link)
	}
	return ref[1:]
}

func TestRoutesFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc  string
		query string
		want  []string
		pairs map[string][]string // route → its targets shown, when checked
	}{
		{"no filter", "", []string{direct, alice, carol, bob}, nil},
		{"one state", "state=cooling", []string{alice}, nil},
		{"a list of states", "state=candidate,healthy", []string{direct, carol, bob}, nil},
		{"repeated states", "state=candidate&state=healthy", []string{direct, carol, bob}, nil},
		{"a state no route is in", "state=ejected", []string{}, nil},
		{"a label", "label=region=us", []string{alice}, nil},
		{"labels all match", "label=region=us&label=plan=gold", []string{alice}, nil},
		{"labels one does not match", "label=region=us&label=plan=silver", []string{}, nil},
		{"a cost tier: it and above", "label=tier=1", []string{carol}, nil},
		{"a cost tier with a label", "label=tier=1&label=region=us", []string{}, nil},
		{"a target shows its pair alone", "target=shop.example", []string{bob}, map[string][]string{bob: {"shop.example"}}},
		{"a target with evidence on several routes", "target=down.example", []string{direct, carol},
			map[string][]string{direct: {"down.example"}, carol: {"down.example"}}},
		{"a target without evidence", "target=nowhere.example", []string{}, nil},
		{"state and target", "state=healthy&target=down.example", []string{}, nil},
		{"after an id", "after=" + url.QueryEscape(alice), []string{carol, bob}, nil},
		{"after an id no route has", "after=e", []string{alice, carol, bob}, nil},
		{"after the last", "after=" + url.QueryEscape(bob), []string{}, nil},
		{"limit", "limit=2", []string{direct, alice}, nil},
		{"limit with a filter", "state=candidate&limit=1", []string{direct}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var got []routeJSON
			f.getJSON(t, "/api/routes?"+tc.query, &got)
			ids := make([]string, 0, len(got))
			for _, r := range got {
				ids = append(ids, r.ID)
				if want, ok := tc.pairs[r.ID]; ok {
					var shown []string
					for _, p := range r.Targets {
						shown = append(shown, p.Target)
					}
					if !slices.Equal(shown, want) {
						t.Errorf("%s: targets %v, want %v", r.ID, shown, want)
					}
				}
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("ids %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestRoutesNextPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc  string
		query string
		next  string // the Link's path, "" for none
	}{
		{"more remain", "limit=2", "/api/routes?after=" + url.QueryEscape(alice) + "&limit=2"},
		{"the filters are kept", "state=candidate,healthy&limit=1", "/api/routes?after=direct&limit=1&state=candidate%2Chealthy"},
		{"the last page fills the limit", "limit=4", ""},
		{"no more match the filter", "state=cooling&limit=1", ""},
		{"the after given is replaced", "after=a&limit=1", "/api/routes?after=direct&limit=1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, h, body := f.do(t, http.MethodGet, "/api/routes?"+tc.query, "")
			if status != http.StatusOK {
				t.Fatalf("%d %s", status, body)
			}
			if got := nextPage(t, h); got != tc.next {
				t.Errorf("next %q, want %q", got, tc.next)
			}
		})
	}
}

func TestRoutesBadQuery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	tests := []struct {
		desc, query, reason string
	}{
		{"unknown state", "state=cooled", "unknown state"},
		{"one bad state of a list", "state=healthy,", "unknown state"},
		{"label without a value", "label=region", "label must be key=value"},
		{"label key in capitals", "label=Region=us", "label must be key=value"},
		{"a tier that is no tier", "label=tier=gold", "label must be key=value"},
		{"the same label key twice", "label=region=us&label=region=eu", "label must be key=value"},
		{"limit zero", "limit=0", "limit must be"},
		{"limit over the maximum", "limit=5001", "limit must be"},
		{"limit not a number", "limit=all", "limit must be"},
		{"after twice", "after=a&after=b", "after given more than once"},
		{"unknown parameter", "stat=healthy", "unknown parameter"},
		{"the old name of a cursor", "cursor=abc", "unknown parameter"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body := f.do(t, http.MethodGet, "/api/routes?"+tc.query, "")
			if status != http.StatusBadRequest || !strings.Contains(string(body), tc.reason) {
				t.Errorf("%d %s, want 400 with %q", status, body, tc.reason)
			}
		})
	}
	// A reason never quotes what it was given: after may be an address
	// typed with its password.
	_, _, body := f.do(t, http.MethodGet, "/api/routes?after=x&after="+url.QueryEscape("http://u:s3cr3t@h:1"), "")
	if strings.Contains(string(body), "s3cr3t") {
		t.Errorf("the refusal quotes its input: %s", body)
	}
}

// newPool is a server over n routes r00000…, listed out of order, with
// labels provider=p0…p(n%7) and region by parity; every third route has a
// pair record for shop.example, which bans it and serves the others (so
// that it is no incident: a site failing every route it is tried through
// is down).
func newPool(t testing.TB, n int) (*engine.Engine, *Server) {
	t.Helper()
	var list strings.Builder
	for i := range n {
		j := (i * 7919) % n // a permutation when n is not a multiple of 7919
		fmt.Fprintf(&list, "http://127.0.0.1:%d id=r%05d provider=p%d region=%s\n", 10000+j%50000, j, j%7, []string{"us", "eu"}[j%2])
	}
	parsed, err := route.ParseList("pool", []byte(list.String()))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Seed: 1, UncheckedCandidates: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	routes := make([]*route.Route, len(parsed))
	for i := range parsed {
		routes[i] = &parsed[i]
		if err := e.AddRoute(now, parsed[i].Spec()); err != nil {
			t.Fatal(err)
		}
		class := engine.OK
		if j := (i * 7919) % n; j%3 == 0 {
			class = engine.Blocked
		}
		if err := e.Feedback(now, parsed[i].ID, "shop.example", engine.Outcome{Class: class}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewServer(e, fixedRoutes(t, routes), NewMetrics(e, nil), Options{})
	t.Cleanup(s.Close)
	return e, s
}

// TestRoutesPagesCoverThePool follows the next pages over a pool and a
// filter, and checks that together they are every matching route once, in
// id order, each page within its limit; and that routes added since (as a
// reload adds them) join the index.
func TestRoutesPagesCoverThePool(t *testing.T) {
	t.Parallel()
	e, s := newPool(t, 1234)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	follow := func(t *testing.T, first string, limit int) []string {
		t.Helper()
		var ids []string
		for path, pages := first, 0; path != ""; pages++ {
			if pages > 1234 {
				t.Fatal("the pages do not end")
			}
			var page []routeJSON
			resp, err := hs.Client().Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeJSON(resp, &page); err != nil {
				t.Fatal(err)
			}
			if len(page) > limit || len(page) == 0 {
				t.Fatalf("%s: %d routes, limit %d", path, len(page), limit)
			}
			for _, r := range page {
				ids = append(ids, r.ID)
			}
			path = nextPage(t, resp.Header)
		}
		return ids
	}
	want := func(n int, keep func(i int) bool) []string {
		var out []string
		for i := range n {
			if keep(i) {
				out = append(out, fmt.Sprintf("r%05d", i))
			}
		}
		return out
	}
	tests := []struct {
		desc  string
		query string
		limit int
		want  []string
	}{
		{"every route at the default limit", "/api/routes", defaultRoutesLimit, want(1234, func(int) bool { return true })},
		{"every route, a small limit", "/api/routes?limit=100", 100, want(1234, func(int) bool { return true })},
		{"a label", "/api/routes?label=provider=p3&limit=50", 50, want(1234, func(i int) bool { return i%7 == 3 })},
		{"two labels", "/api/routes?label=provider=p3&label=region=eu&limit=7", 7, want(1234, func(i int) bool { return i%7 == 3 && i%2 == 1 })},
		{"a target", "/api/routes?target=shop.example&limit=64", 64, want(1234, func(i int) bool { return i%3 == 0 })},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := follow(t, tc.query, tc.limit); !slices.Equal(got, tc.want) {
				t.Errorf("%d routes over the pages, want %d in order", len(got), len(tc.want))
			}
		})
	}
	t.Run("routes added later join the index", func(t *testing.T) {
		if err := e.AddRoute(time.Now(), engine.RouteSpec{ID: "r00617a"}); err != nil {
			t.Fatal(err)
		}
		var page []routeJSON
		resp, err := hs.Client().Get(hs.URL + "/api/routes?after=r00617&limit=2")
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeJSON(resp, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) != 2 || page[0].ID != "r00617a" || page[1].ID != "r00618" {
			t.Errorf("after r00617: %+v", page)
		}
	})
}

// decodeJSON reads a 200 JSON answer into v and closes its body.
func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func TestRoutesSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.m.ObserveAttempt(carol, engine.ProxyAuth, time.Millisecond)
	type summary struct {
		Routes           int                     `json:"routes"`
		States           map[string]int          `json:"states"`
		Usable           int                     `json:"usable"`
		ProxyAuthFailing int                     `json:"proxy_auth_failing"`
		Labels           map[string]labelSummary `json:"labels"`
	}
	var got summary
	f.getJSON(t, "/api/routes/summary", &got)
	want := summary{
		Routes: 4,
		States: map[string]int{"candidate": 2, "healthy": 1, "suspect": 0, "cooling": 1, "half_open": 0, "ejected": 0, "draining": 0},
		Usable: 3, ProxyAuthFailing: 1,
		Labels: map[string]labelSummary{
			"region": {Values: []labelCount{{"eu", 1}, {"us", 1}}, Distinct: 2},
			"plan":   {Values: []labelCount{{"gold", 1}}, Distinct: 1},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summary\n%+v, want\n%+v", got, want)
	}
}

// TestRoutesSummaryTop checks that a key's values are bounded by top, the
// most common first, the rest counted as other.
func TestRoutesSummaryTop(t *testing.T) {
	t.Parallel()
	_, s := newPool(t, 700)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	tests := []struct {
		desc, query string
		status      int
		provider    labelSummary
	}{
		{"top 2", "?top=2", http.StatusOK, labelSummary{Values: []labelCount{{"p0", 100}, {"p1", 100}}, Other: 500, Distinct: 7}},
		{"the default bounds nothing here", "", http.StatusOK, labelSummary{Values: []labelCount{
			{"p0", 100}, {"p1", 100}, {"p2", 100}, {"p3", 100}, {"p4", 100}, {"p5", 100}, {"p6", 100}}, Distinct: 7}},
		{"top zero", "?top=0", http.StatusBadRequest, labelSummary{}},
		{"top over the maximum", "?top=101", http.StatusBadRequest, labelSummary{}},
		{"unknown parameter", "?state=healthy", http.StatusBadRequest, labelSummary{}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			resp, err := hs.Client().Get(hs.URL + "/api/routes/summary" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Routes int                     `json:"routes"`
				Labels map[string]labelSummary `json:"labels"`
			}
			if tc.status != http.StatusOK {
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
				}
				return
			}
			if err := decodeJSON(resp, &got); err != nil {
				t.Fatal(err)
			}
			if got.Routes != 700 || !reflect.DeepEqual(got.Labels["provider"], tc.provider) {
				t.Errorf("routes %d, provider %+v, want %+v", got.Routes, got.Labels["provider"], tc.provider)
			}
		})
	}
}

// FuzzRouteQuery checks that any query either parses into a limit within
// its bounds or is refused with a reason that never quotes the query.
func FuzzRouteQuery(f *testing.F) {
	for _, seed := range []string{"", "state=cooling,half_open&label=region=us&label=plan=gold", "target=shop.example&limit=5000",
		"after=http%3A%2F%2F10.0.0.1%3A8080~a90abad5", "limit=0", "state=", "label==", "x=1", "limit=1&limit=2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseRouteQuery(v)
		switch {
		case err == nil && (q.limit < 1 || q.limit > maxRoutesLimit):
			t.Errorf("%q: limit %d", raw, q.limit)
		case err != nil && len(v.Get("after")) > 3 && strings.Contains(err.Error(), v.Get("after")):
			t.Errorf("%q: the reason quotes after: %v", raw, err)
		}
	})
}

package admin

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/switchyard/switchyard/engine"
)

// The pages of GET /api/routes (docs/design/010-dashboard.md): routes in
// id order, at most limit of them, from after the id given. A pool of
// 100,000 routes was 33 MB in one answer; a page of the default limit is
// about 165 KB.
const (
	defaultRoutesLimit = 500
	maxRoutesLimit     = 5000
)

// routeQuery is what a GET /api/routes asks for: the routes matching
// every filter given, in id order, after after, at most limit.
type routeQuery struct {
	states [engine.Draining + 1]bool // the global states asked for; all false: any
	labels engine.Labels             // labels a route must carry, every one
	floor  int                       // the lowest cost tier shown (label tier=N)
	target string                    // "": any; else routes with a pair record for it, that pair alone shown
	limit  int
	after  string // a route id; "" for the first page
}

// errRouteQuery answers a parameter /api/routes does not know.
var errRouteQuery = errors.New("unknown parameter: /api/routes takes state, label, target, limit and after")

// parseRouteQuery reads /api/routes' parameters: state (a state, or a
// comma list of them; repeatable), label (k=v; repeatable, all must
// match; tier=N: of cost tier N or above, as a request's), target, limit
// (1 to maxRoutesLimit) and after (a route id). Its
// errors are the reason of a 400; they never quote after, which may be an
// address typed with its password.
func parseRouteQuery(v url.Values) (routeQuery, error) {
	q := routeQuery{limit: defaultRoutesLimit}
	for name, values := range v {
		switch name {
		case "state", "label":
		case "target", "limit", "after":
			if len(values) > 1 {
				return q, errors.New(name + " given more than once")
			}
		default:
			return q, errRouteQuery
		}
	}
	for _, list := range v["state"] {
		for name := range strings.SplitSeq(list, ",") {
			st, ok := stateNamed(strings.TrimSpace(name))
			if !ok {
				return q, errors.New("unknown state: want " + strings.Join(states(), ", "))
			}
			q.states[st] = true
		}
	}
	if len(v["label"]) > 0 {
		labels, err := engine.ParseLabels(strings.Join(v["label"], " "))
		if err != nil {
			return q, errors.New("label must be key=value: " + err.Error())
		}
		q.labels = labels
		q.floor, _ = labels.MinTier() // tier=N: routes of tier N or above, as a request takes them
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxRoutesLimit {
			return q, errors.New("limit must be a whole number from 1 to " + strconv.Itoa(maxRoutesLimit))
		}
		q.limit = n
	}
	q.target, q.after = v.Get("target"), v.Get("after")
	return q, nil
}

// stateNamed is the state whose name is name.
func stateNamed(name string) (engine.State, bool) {
	for st := engine.Candidate; st <= engine.Draining; st++ {
		if st.String() == name {
			return st, true
		}
	}
	return 0, false
}

// matchGlobal reports whether a route's global status passes q's state
// and label filters.
func (q *routeQuery) matchGlobal(st *engine.RouteStatus) bool {
	return (!slices.Contains(q.states[:], true) || q.states[st.Health.State]) && st.Labels.Matches(q.labels) && st.Tier >= q.floor
}

// matchTarget reports whether st passes q's target filter, and narrows
// its pairs to that target's when q names one.
func (q *routeQuery) matchTarget(st *engine.RouteStatus) bool {
	if q.target == "" {
		return true
	}
	i := slices.IndexFunc(st.Targets, func(p engine.PairStatus) bool { return p.Target == q.target })
	if i < 0 {
		return false
	}
	st.Targets = st.Targets[i : i+1]
	return true
}

// routeIndex is every route id, sorted, for paging /api/routes without
// sorting the pool per request. Routes are never taken out of the engine,
// so it only grows: by the ids the engine added since it last looked.
type routeIndex struct {
	mu  sync.Mutex
	ids []string // guarded by mu; replaced, never changed in place, so a caller may read the slice it got
	n   int      // guarded by mu; the engine's routes ids holds
}

// sorted returns every route id of e, sorted.
func (x *routeIndex) sorted(e *engine.Engine) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if added := e.RouteIDs(nil, x.n); len(added) > 0 {
		ids := slices.Concat(x.ids, added)
		slices.Sort(ids)
		x.ids, x.n = ids, x.n+len(added)
	}
	return x.ids
}

// listRoutes is GET /api/routes: a page of the routes matching the query,
// in id order, as a JSON array. When more remain, the Link header names
// the next page (RFC 8288 rel="next"): the same query, after the page's
// last id. A page costs a binary search, and per route looked at one read
// of its global record, which allocates nothing, and a copy of its pairs
// if it passes the state and label filters: whatever the size of the
// pool, a page without filters looks at limit + 1 routes.
func (s *Server) listRoutes(w http.ResponseWriter, r *http.Request) {
	q, err := parseRouteQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ids := s.index.sorted(s.engine)
	i, found := slices.BinarySearch(ids, q.after)
	if found {
		i++
	}
	page := make([]routeJSON, 0, min(q.limit, len(ids)-i))
	for ; i < len(ids); i++ {
		if g, ok := s.engine.RouteGlobal(ids[i]); !ok || !q.matchGlobal(&g) {
			continue
		}
		st, ok := s.engine.Route(ids[i])
		if !ok || !q.matchGlobal(&st) || !q.matchTarget(&st) {
			continue // a report between the two reads moved it
		}
		if len(page) == q.limit {
			// One more matches: there is a next page.
			next := r.URL.Query()
			next.Set("after", page[len(page)-1].ID)
			w.Header().Set("Link", "<"+r.URL.Path+"?"+next.Encode()+`>; rel="next"`)
			break
		}
		page = append(page, s.routeJSON(st))
	}
	writeJSON(w, http.StatusOK, page)
}

// Bounds of the label values /api/routes/summary counts apart per key.
const (
	defaultSummaryTop = 10
	maxSummaryTop     = 100
)

// labelSummary is one label key in /api/routes/summary: how many routes
// carry each of its top values, and the rest.
type labelSummary struct {
	Values   []labelCount `json:"values"`   // the most common values, most routes first
	Other    int          `json:"other"`    // routes whose value is not among them
	Distinct int          `json:"distinct"` // values the key takes
}

type labelCount struct {
	Value  string `json:"value"`
	Routes int    `json:"routes"`
}

// routesSummary is GET /api/routes/summary?top=N: the pool in counts,
// whatever its size: routes by state, how many are usable and how many
// are refused by their proxy (407), and per label key its N most common
// values (default defaultSummaryTop). It walks the engine's global
// records without copying the pool (engine.EachRoute).
func (s *Server) routesSummary(w http.ResponseWriter, r *http.Request) {
	top := defaultSummaryTop
	for name := range r.URL.Query() {
		if name != "top" {
			writeError(w, http.StatusBadRequest, "unknown parameter: /api/routes/summary takes top")
			return
		}
	}
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSummaryTop {
			writeError(w, http.StatusBadRequest, "top must be a whole number from 1 to "+strconv.Itoa(maxSummaryTop))
			return
		}
		top = n
	}
	var perState [engine.Draining + 1]int
	routes, usable := 0, 0
	values := make(map[string]map[string]int) // key → value → routes
	s.engine.EachRoute(func(st *engine.RouteStatus) {
		routes++
		perState[st.Health.State]++
		if st.Health.State.Usable() {
			usable++
		}
		for _, l := range st.Labels {
			if values[l.Key] == nil {
				values[l.Key] = make(map[string]int)
			}
			values[l.Key][l.Value]++
		}
	})
	byState := make(map[string]int, len(perState))
	for st, n := range perState {
		byState[engine.State(st).String()] = n
	}
	labels := make(map[string]labelSummary, len(values))
	for key, counts := range values {
		all := make([]labelCount, 0, len(counts))
		total := 0
		for v, n := range counts {
			all = append(all, labelCount{Value: v, Routes: n})
			total += n
		}
		slices.SortFunc(all, func(a, b labelCount) int {
			return cmp.Or(cmp.Compare(b.Routes, a.Routes), strings.Compare(a.Value, b.Value))
		})
		ls := labelSummary{Values: all[:min(top, len(all))], Distinct: len(all), Other: total}
		for _, c := range ls.Values {
			ls.Other -= c.Routes
		}
		labels[key] = ls
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"routes":             routes,
		"states":             byState,
		"usable":             usable,
		"proxy_auth_failing": s.metrics.auth.n.Load(),
		"labels":             labels,
	})
}

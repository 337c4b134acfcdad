package admin

import (
	"cmp"
	"compress/gzip"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// The dashboard's JSON (docs/design/010-dashboard.md): compact forms that
// stay small at 10,000 routes and 1,000 targets, read from one snapshot of
// the engine shared by every request for snapshotTTL, so several open
// dashboards cost one walk of the pool.
const snapshotTTL = 500 * time.Millisecond

// snapshot returns the engine's routes, taken at most snapshotTTL ago.
// Concurrent callers wait for one walk rather than each taking their own.
func (s *Server) snapshot() []engine.RouteStatus {
	now := s.now()
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snap != nil && !now.Before(s.snapAt) && now.Sub(s.snapAt) < snapshotTTL {
		return s.snap
	}
	s.snap, s.snapAt = s.engine.Routes(), now
	return s.snap
}

// forgetSnapshot makes the next snapshot fresh: after an operator action,
// its author sees the route's new state at once.
func (s *Server) forgetSnapshot() {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.snap = nil
}

// states are every state, in the engine's order, which the compact forms
// index.
func states() []string {
	var out []string
	for st := engine.Candidate; st <= engine.Draining; st++ {
		out = append(out, st.String())
	}
	return out
}

// costMS is a route's expected time to a valid answer, in ms: its
// latency × (in flight + 1) ÷ score^γ, the selection's cost
// (docs/design/005-cost.md) without the per-target and slow-start terms;
// -1 when it has no latency yet or no chance of success.
func costMS(st *engine.RouteStatus, gamma float64) float64 {
	if st.Health.Latency <= 0 || st.Score <= 0 {
		return -1
	}
	return round3(st.Health.Latency * 1000 * float64(st.Inflight+1) / math.Pow(st.Score, gamma))
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// remainingMS is the time left until the Unix ns deadline until, in ms; 0
// when there is none or it passed, and -1 for an operator's ejection,
// which lasts until Restore.
func remainingMS(until int64, now time.Time) int64 {
	switch {
	case until == math.MaxInt64:
		return -1
	case until == 0:
		return 0
	}
	return max(0, (until-now.UnixNano())/int64(time.Millisecond))
}

// dashRoutes is GET /api/dash/routes: every route as one row of columns,
// for the routes table, which sorts and filters in the browser.
func (s *Server) dashRoutes(w http.ResponseWriter, _ *http.Request) {
	now := s.now()
	snap := s.snapshot()
	routes := s.routes()
	gamma := s.engine.Config().Gamma
	rows := make([][]any, len(snap))
	for i := range snap {
		st := &snap[i]
		h := &st.Health
		attempts, successes, lastFailure := s.metrics.routeTotals(st.ID)
		url := ""
		if r := routes.Route(st.ID); r != nil {
			url = r.Redacted()
		}
		rows[i] = []any{
			st.ID, url, int(h.State), st.Labels.String(), st.Tier, round3(st.Score), costMS(st, gamma),
			round3(h.Latency * 1000), st.Inflight, attempts, successes, lastFailure, causeName(h.Cause),
			remainingMS(h.Until, now), h.Samples, len(st.Targets),
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"states":  states(),
		"columns": []string{"id", "url", "state", "labels", "tier", "score", "cost_ms", "latency_ms", "inflight", "attempts", "successes", "last_failure_class", "cause", "cooldown_ms", "samples", "targets"},
		"rows":    rows,
	})
}

// maxHeatmapTargets bounds the heatmap's columns.
const maxHeatmapTargets = 200

// dashHeatmap is GET /api/dash/heatmap?targets=N&group=LABEL: rows of
// routes grouped by a label's value, columns the N busiest targets (by
// samples over every route, default 50). Each row's cells are a string of
// two characters per column: the pair's state as an index into states
// ('0'+i) and its score in tenths ('0'…'9'), or "--" where the route has
// no record for the target.
func (s *Server) dashHeatmap(w http.ResponseWriter, r *http.Request) {
	n := 50
	if q := r.URL.Query().Get("targets"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 1 || v > maxHeatmapTargets {
			writeError(w, http.StatusBadRequest, "targets must be a whole number from 1 to "+strconv.Itoa(maxHeatmapTargets))
			return
		}
		n = v
	}
	group := r.URL.Query().Get("group")
	snap := s.snapshot()
	busy := make(map[string]uint64)
	for i := range snap {
		for _, p := range snap[i].Targets {
			busy[p.Target] += uint64(p.Health.Samples)
		}
	}
	targets := make([]string, 0, len(busy))
	for t := range busy {
		targets = append(targets, t)
	}
	slices.SortFunc(targets, func(a, b string) int {
		return cmp.Or(cmp.Compare(busy[b], busy[a]), strings.Compare(a, b))
	})
	targets = targets[:min(n, len(targets))]
	column := make(map[string]int, len(targets))
	for i, t := range targets {
		column[t] = i
	}
	type row struct {
		id, group string
		state     int
		cells     []byte
	}
	rows := make([]row, len(snap))
	for i := range snap {
		st := &snap[i]
		cells := []byte(strings.Repeat("--", len(targets)))
		for _, p := range st.Targets {
			if c, ok := column[p.Target]; ok {
				cells[2*c] = '0' + byte(p.Health.State)
				cells[2*c+1] = '0' + byte(min(9, int(p.Score*10)))
			}
		}
		g, _ := st.Labels.Get(group)
		rows[i] = row{id: st.ID, group: g, state: int(st.Health.State), cells: cells}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.id, b.id)) })
	out := make([][]any, len(rows))
	for i, r := range rows {
		out[i] = []any{r.id, r.group, r.state, string(r.cells)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"states": states(), "targets": targets, "rows": out})
}

// targetRow is one target of /api/dash/targets.
type targetRow struct {
	Target string `json:"target"`
	Good   int    `json:"good"`    // pairs candidate or healthy
	Cool   int    `json:"cooling"` // suspect, cooling, half open
	// Banned are the pairs out of use whose cause is blocked or
	// content_invalid: the site refuses those exits.
	Banned   int    `json:"banned"`
	Samples  uint64 `json:"samples"`
	Incident string `json:"incident,omitempty"` // the open incident's class
	// Involved names up to maxInvolved routes of the open incident:
	// those whose pair was moved by its class.
	Involved []string `json:"involved,omitempty"`
	// Tolerance and Paced are the pacing its 429s taught
	// (GET /api/targets/{target}/pace has it whole): requests per pace
	// window per exit, and the routes held to a rate.
	Tolerance float64    `json:"tolerance,omitempty"`
	Paced     int        `json:"paced,omitempty"`
	PacedRate float64    `json:"paced_rate,omitempty"` // their rates' sum, requests/s
	Frozen    float64    `json:"frozen,omitempty"`     // requests/s a new exit starts held at since the site froze
	Braked    float64    `json:"braked,omitempty"`     // requests/s its free exits are spaced at while a young 429 brakes it
	Recent    []apiEvent `json:"recent,omitempty"`     // its incident events kept, newest first
	Tier      *tierJSON  `json:"tier,omitempty"`       // above the cheapest cost tier (GET /api/targets' tiers)
}

const maxInvolved = 20

// dashTargets is GET /api/dash/targets: per target, the pairs good,
// cooling and banned, its pacing, and its open and recent incidents;
// busiest first.
func (s *Server) dashTargets(w http.ResponseWriter, _ *http.Request) {
	now := s.now()
	snap := s.snapshot()
	open := make(map[string]engine.Class)
	for _, in := range s.engine.Incidents() {
		open[in.Target] = in.Class
	}
	byName := make(map[string]*targetRow)
	get := func(name string) *targetRow {
		t, ok := byName[name]
		if !ok {
			t = &targetRow{Target: name}
			byName[name] = t
		}
		return t
	}
	for i := range snap {
		for _, p := range snap[i].Targets {
			t := get(p.Target)
			t.Samples += uint64(p.Health.Samples)
			switch st := p.Health.State; {
			case st == engine.Candidate || st == engine.Healthy:
				t.Good++
			case p.Health.Cause == engine.Blocked || p.Health.Cause == engine.ContentInvalid:
				t.Banned++
			default:
				t.Cool++
			}
			if c, ok := open[p.Target]; ok && p.Health.Cause == c && len(t.Involved) < maxInvolved {
				t.Involved = append(t.Involved, snap[i].ID)
			}
		}
	}
	for name, c := range open {
		get(name).Incident = c.String()
	}
	for _, tt := range s.engine.Tiers() {
		tj := newTierJSON(tt)
		get(tt.Target).Tier = &tj
	}
	for _, e := range s.events.newest(s.events.capacity()) {
		if e.Kind == engine.EventIncident {
			t := get(e.Target)
			t.Recent = append(t.Recent, apiEvent(e))
		}
	}
	out := make([]*targetRow, 0, len(byName))
	for _, t := range byName {
		if pace, ok := s.engine.Pace(now, t.Target); ok {
			t.Tolerance, t.Frozen, t.Braked = round3(pace.Tolerance), round3(pace.Frozen), round3(pace.Braked)
			for _, p := range pace.Pairs {
				if p.Rate > 0 {
					t.Paced++
					t.PacedRate += p.Rate
				}
			}
			t.PacedRate = round3(t.PacedRate)
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *targetRow) int {
		return cmp.Or(cmp.Compare(b.Samples, a.Samples), strings.Compare(a.Target, b.Target))
	})
	writeJSON(w, http.StatusOK, out)
}

// budgetWindow is the retry budget's window (engine.Budget: ten one-second
// buckets), over which the overview shows its use.
const budgetWindow = 10 * time.Second

// dashOverview is GET /api/dash/overview: the pool by state, the routes'
// label keys, what needs the operator (alarms), open incidents, shared
// state, the retry and hedge budgets' use and the series of the last
// minutes, as rows of
// [unix ms, seconds, requests, ok, attempts, retries, hedges, p50 ms, p95 ms, local errors].
func (s *Server) dashOverview(w http.ResponseWriter, _ *http.Request) {
	snap := s.snapshot()
	pool := make(map[string]int)
	for _, name := range states() {
		pool[name] = 0
	}
	keys := make(map[string]bool)
	for i := range snap {
		pool[snap[i].Health.State.String()]++
		for _, l := range snap[i].Labels {
			keys[l.Key] = true
		}
	}
	incidents := make([]incidentJSON, 0)
	for _, in := range s.engine.Incidents() {
		incidents = append(incidents, incidentJSON{Target: in.Target, Class: in.Class.String()})
	}
	slices.SortFunc(incidents, func(a, b incidentJSON) int { return strings.Compare(a.Target, b.Target) })
	state := map[string]string{"kind": "memory"}
	if s.stateAddr != "" {
		state = map[string]string{"kind": "redis", "addr": s.stateAddr}
	}
	if s.degraded != nil {
		if err := s.degraded(); err != nil {
			state["degraded"] = err.Error()
		}
	}
	points := s.series.Points()
	rows := make([][]any, len(points))
	var requests, retries, hedges uint64
	var window time.Duration
	for i, p := range points {
		rows[i] = []any{p.Time.UnixMilli(), round3(p.Seconds), p.Requests, p.OK, p.Attempts, p.Retries, p.Hedges, round3(p.P50MS), round3(p.P95MS), p.Local}
	}
	for i := len(points) - 1; i >= 0 && window < budgetWindow; i-- {
		p := points[i]
		requests, retries, hedges = requests+p.Requests, retries+p.Retries, hedges+p.Hedges
		window += time.Duration(p.Seconds * float64(time.Second))
	}
	// The budget's caps, as engine.Budget computes them: a floor of 10
	// extra attempts plus the ratio of the window's requests.
	retryCap := 10 + math.Floor(s.budget.BudgetRatio*float64(requests))
	hedgeCap := math.Floor(s.budget.HedgeRatio * float64(requests))
	hedgeUse := 0.0
	if hedgeCap > 0 {
		hedgeUse = round3(float64(hedges) / hedgeCap)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"routes":     len(snap),
		"pool":       pool,
		"label_keys": slices.Sorted(maps.Keys(keys)), // what the heatmap may group by
		"alarms":     s.alarms(state["degraded"], points),
		"incidents":  incidents,
		"state":      state,
		"read_only":  !s.hasToken,
		"try":        s.fetcher != nil,
		"budget": map[string]any{
			"retry_ratio": s.budget.BudgetRatio, "hedge_ratio": s.budget.HedgeRatio,
			"requests": requests, "retries": retries, "hedges": hedges,
			"retry_use": round3(float64(retries+hedges) / retryCap), "hedge_use": hedgeUse,
		},
		"series": rows,
	})
}

// alarmJSON is a condition the operator must act on, in the overview.
type alarmJSON struct {
	// Kind is proxy_auth (routes whose proxy refuses their credentials),
	// local_resources (attempts the gateway could not make for want of
	// its own descriptors, ports or upstream connection cap),
	// restart_required (reloaded settings only a restart applies) or
	// state_degraded (the shared state out of reach).
	Kind     string   `json:"kind"`
	Count    uint64   `json:"count,omitempty"`    // proxy_auth: routes; local_resources: attempts
	Routes   []string `json:"routes,omitempty"`   // proxy_auth: the first maxAlarmRoutes of them
	Seconds  float64  `json:"seconds,omitempty"`  // local_resources: the span counted, the series'
	Sections []string `json:"sections,omitempty"` // restart_required
	Detail   string   `json:"detail,omitempty"`   // state_degraded: why
}

// maxAlarmRoutes bounds the routes an alarm names, so that a pool whose
// provider revoked every credential still gets a short overview.
const maxAlarmRoutes = 20

// alarms lists what needs the operator now: degraded is the shared
// state's error ("" when reachable), points the series, over which local
// resource failures are counted.
func (s *Server) alarms(degraded string, points []Point) []alarmJSON {
	alarms := make([]alarmJSON, 0)
	if degraded != "" {
		alarms = append(alarms, alarmJSON{Kind: "state_degraded", Detail: degraded})
	}
	if failing := s.metrics.ProxyAuthFailing(); len(failing) > 0 {
		alarms = append(alarms, alarmJSON{Kind: "proxy_auth", Count: uint64(len(failing)), Routes: failing[:min(len(failing), maxAlarmRoutes)]})
	}
	var local uint64
	var span float64
	for _, p := range points {
		local, span = local+p.Local, span+p.Seconds
	}
	if local > 0 {
		alarms = append(alarms, alarmJSON{Kind: "local_resources", Count: local, Seconds: round3(span)})
	}
	if s.restart != nil {
		if pending := s.restart(); len(pending) > 0 {
			alarms = append(alarms, alarmJSON{Kind: "restart_required", Sections: pending})
		}
	}
	return alarms
}

// routeDetail is GET /api/routes/{id}: the route as /api/routes shows it,
// with its cost estimate and its events kept, newest first.
func (s *Server) routeDetail(w http.ResponseWriter, r *http.Request) {
	st, ok := s.engine.Route(r.PathValue("id"))
	if !ok {
		// The id is not echoed, as in act.
		writeError(w, http.StatusNotFound, "unknown route: give its id, path-escaped, as listed by /api/routes")
		return
	}
	f := eventFilter{route: st.ID}
	var events []apiEvent
	for _, e := range s.events.newest(s.events.capacity()) {
		if f.match(&e) {
			events = append(events, apiEvent(e))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		routeJSON
		CostMS float64    `json:"cost_ms"`
		Events []apiEvent `json:"events"`
	}{s.routeJSON(st), costMS(&st, s.engine.Config().Gamma), events})
}

// gzipped compresses h's answers for clients that accept gzip: the
// dashboard's JSON at 10,000 routes is about a megabyte, mostly repeated
// ids and cells, which compress several times over.
func gzipped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer zw.Close()
		h.ServeHTTP(gzipWriter{ResponseWriter: w, zw: zw}, r)
	})
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip
// (RFC 9110 12.5.3): listed without q=0. A wildcard is not taken up: every
// browser names gzip.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(params), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "q") {
			return true
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		return err == nil && q > 0
	}
	return false
}

// gzipWriter writes an answer's body through zw.
type gzipWriter struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g gzipWriter) Write(b []byte) (int, error) { return g.zw.Write(b) }

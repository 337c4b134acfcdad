// Package admin is Switchyard's admin listener
// (docs/design/008-gateway.md): Prometheus metrics, liveness and readiness,
// a JSON API over the engine's state, and the operator actions drain, eject
// and restore. Everything it prints about a route comes from the route's id
// or Redacted address, so proxy credentials never leave the process through
// it.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	// Its handlers are mounted on the admin mux only, behind the token
	// (Options.Pprof); its init also registers them on
	// http.DefaultServeMux, which nothing here serves.
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/provider"
	"github.com/switchyard/switchyard/internal/route"
)

// Options configure a Server.
type Options struct {
	// Token is the bearer token for admin actions. "" makes the listener
	// read-only: actions answer 403.
	Token string
	// Ready reports whether the gateway can serve traffic; its error text
	// is /readyz's answer. nil means always ready.
	Ready func() error
	// Degraded reports an impairment the gateway serves through, such as
	// shared state out of reach: /readyz then answers 200 "degraded: …",
	// so load balancers keep the gateway while operators see why. nil
	// means never.
	Degraded func() error
	// RestartRequired names the configuration sections a reload changed
	// that only a restart applies; /readyz adds them to its answer. nil
	// means none.
	RestartRequired func() []string
	// Events is how many recent state and incident events /api/events
	// keeps. Zero or less means 1000.
	Events int
	// Log receives a line per admin action and per refused one; nil
	// discards them.
	Log *slog.Logger
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ to
	// holders of Token; without a Token it serves nothing.
	Pprof bool
	// Reload does what SIGHUP does: loads the configuration again and
	// applies it, or refuses it whole with the error naming file and line.
	// POST /api/reload calls it for holders of Token and answers with its
	// result; nil answers 404.
	Reload func() error
	// SubExits is what a provider gateway route's sub-exits (its provider
	// sessions) did, for /api/routes; ok false for any other route. nil
	// shows none.
	SubExits func(routeID string) (st provider.Stats, ok bool)

	// The dashboard's (docs/design/010-dashboard.md).

	// Fetcher runs the dashboard's "try a request" (POST /api/try, token
	// holders only) through the gateway's attempt loop; nil answers 404.
	Fetcher Fetcher
	// StateAddr is the shared state's Redis address, never its password;
	// "" for state in memory.
	StateAddr string
	// Budget is the retry and hedge budget in force, whose use the
	// overview shows.
	Budget engine.BudgetConfig
	// SampleEvery is how often the overview's series samples the
	// counters; zero or less means 1s. SeriesPoints is how many samples
	// it keeps; zero or less means 300 (5 minutes at 1s).
	SampleEvery  time.Duration
	SeriesPoints int
	// Now is the clock of the dashboard's views; nil means time.Now.
	Now func() time.Time
	// Cluster is the node cluster of GET /api/nodes and its actions; nil
	// outside a cluster.
	Cluster Cluster
}

// subscriptionBuffer is the engine subscription's capacity: it absorbs
// bursts of transitions between the collector's wake-ups; an overflow
// loses old history, never engine throughput.
const subscriptionBuffer = 4096

// Server serves the admin endpoints.
type Server struct {
	// Immutable after NewServer.
	engine   *engine.Engine
	metrics  *Metrics
	token    [sha256.Size]byte // hash of Options.Token, compared in constant time
	hasToken bool
	ready    func() error
	degraded func() error
	restart  func() []string
	reload   func() error
	subExits func(string) (provider.Stats, bool) // nil: none shown
	log      *slog.Logger
	mux      *http.ServeMux
	now      func() time.Time
	fetcher  Fetcher // nil: no "try a request"
	cluster  Cluster // nil outside a cluster
	budget   engine.BudgetConfig
	// stateAddr is the Redis address of shared state, "" in memory.
	stateAddr string

	// The collector goroutine reads sub and fills events until Close
	// closes sub; it closes done as it exits. Both are safe for concurrent
	// use.
	sub    *engine.Subscription
	done   chan struct{}
	events *recentEvents

	routes func() *route.Set // the routes the gateway carries, listed and draining: their addresses to show
	index  routeIndex        // the engine's route ids, sorted, for /api/routes' pages

	// The sampler goroutine fills series every sampleEvery until stop
	// closes; it closes sampled as it exits. series and streams are safe
	// for concurrent use.
	series      *Series
	sampleEvery time.Duration
	stop        chan struct{}
	sampled     chan struct{}
	closeOnce   sync.Once
	streams     *streams

	snapMu sync.Mutex
	snap   []engine.RouteStatus // guarded by snapMu; nil: take a fresh one
	snapAt time.Time            // guarded by snapMu; when snap was taken
}

// NewServer returns the admin server of a gateway running e over the
// routes that routes gives at each call (the gateway's published set),
// serving m at /metrics. It starts a goroutine collecting the engine's
// transitions for /api/events; Close stops it.
func NewServer(e *engine.Engine, routes func() *route.Set, m *Metrics, opts Options) *Server {
	if opts.Events <= 0 {
		opts.Events = 1000
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = time.Second
	}
	if opts.SeriesPoints <= 0 {
		opts.SeriesPoints = 300
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Budget == (engine.BudgetConfig{}) {
		opts.Budget = engine.DefaultBudget() // as the gateway reads a zero one
	}
	s := &Server{
		engine:   e,
		routes:   routes,
		metrics:  m,
		hasToken: opts.Token != "",
		ready:    opts.Ready,
		degraded: opts.Degraded,
		restart:  opts.RestartRequired,
		reload:   opts.Reload,
		subExits: opts.SubExits,
		log:      opts.Log,
		mux:      http.NewServeMux(),
		sub:      e.Subscribe(subscriptionBuffer, engine.EventState, engine.EventIncident, engine.EventTier),
		done:     make(chan struct{}),
		events:   newRecentEvents(opts.Events),

		now:         opts.Now,
		fetcher:     opts.Fetcher,
		cluster:     opts.Cluster,
		budget:      opts.Budget,
		stateAddr:   opts.StateAddr,
		series:      NewSeries(opts.SeriesPoints),
		sampleEvery: opts.SampleEvery,
		stop:        make(chan struct{}),
		sampled:     make(chan struct{}),
		streams:     newStreams(),
	}
	// Hashing first makes both sides of the comparison the same length,
	// so neither the comparison's time nor its result leaks the length.
	s.token = sha256.Sum256([]byte(opts.Token))
	s.mux.Handle("/healthz", readOnly(http.HandlerFunc(s.healthz)))
	s.mux.Handle("/readyz", readOnly(http.HandlerFunc(s.readyz)))
	s.mux.Handle("/metrics", readOnly(m.handler()))
	// The JSON answers are gzipped for clients that ask: the dashboard's
	// routes of 10,000 routes are about a megabyte plain.
	s.mux.Handle("/api/routes", readOnly(gzipped(http.HandlerFunc(s.listRoutes))))
	s.mux.Handle("/api/routes/summary", readOnly(gzipped(http.HandlerFunc(s.routesSummary))))
	s.mux.Handle("/api/targets", readOnly(gzipped(http.HandlerFunc(s.targets))))
	s.mux.Handle("/api/targets/{target}/pace", readOnly(gzipped(http.HandlerFunc(s.targetPace))))
	s.mux.Handle("/api/events", readOnly(gzipped(http.HandlerFunc(s.listEvents))))
	s.mux.Handle("/api/events/stream", readOnly(http.HandlerFunc(s.eventStream)))
	s.mux.Handle("/api/routes/{id}", readOnly(gzipped(http.HandlerFunc(s.routeDetail))))
	s.mux.Handle("/api/dash/overview", readOnly(gzipped(http.HandlerFunc(s.dashOverview))))
	s.mux.Handle("/api/dash/routes", readOnly(gzipped(http.HandlerFunc(s.dashRoutes))))
	s.mux.Handle("/api/dash/heatmap", readOnly(gzipped(http.HandlerFunc(s.dashHeatmap))))
	s.mux.Handle("/api/dash/targets", readOnly(gzipped(http.HandlerFunc(s.dashTargets))))
	s.mux.HandleFunc("/api/try", s.try)
	ui := readOnly(dashboard())
	s.mux.Handle("/{$}", ui)
	s.mux.Handle("/ui/", ui)
	// Route ids hold "/" (http://host:port), so clients path-escape
	// them (url.PathEscape); the mux matches and unescapes each segment.
	s.mux.HandleFunc("/api/routes/{id}/{action}", s.act)
	s.mux.HandleFunc("/api/reload", s.reloadConfig)
	s.mux.Handle("/api/nodes", readOnly(gzipped(http.HandlerFunc(s.listNodes))))
	s.mux.HandleFunc("/api/nodes/{action}", s.nodeAction)
	if opts.Pprof && s.hasToken {
		s.mux.Handle("/debug/pprof/", s.tokenOnly(http.HandlerFunc(pprof.Index)))
		s.mux.Handle("/debug/pprof/cmdline", s.tokenOnly(http.HandlerFunc(pprof.Cmdline)))
		s.mux.Handle("/debug/pprof/profile", s.tokenOnly(http.HandlerFunc(pprof.Profile)))
		s.mux.Handle("/debug/pprof/symbol", s.tokenOnly(http.HandlerFunc(pprof.Symbol)))
		s.mux.Handle("/debug/pprof/trace", s.tokenOnly(http.HandlerFunc(pprof.Trace)))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	go s.collect()
	go s.sample()
	return s
}

// Handler returns the admin endpoints' handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Close ends the event streams, stops the event collector and the
// sampler and waits for them to exit. It is idempotent.
func (s *Server) Close() {
	s.streams.end()
	s.sub.Close()
	<-s.done
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.sampled
}

// EndStreams ends the event streams open (GET /api/events/stream), which
// would otherwise hold a graceful shutdown of the admin listener until its
// grace ran out; later ones are refused. Give it to the listener's
// http.Server.RegisterOnShutdown.
func (s *Server) EndStreams() { s.streams.end() }

// sample fills the overview's series from the counters until Close.
func (s *Server) sample() {
	defer close(s.sampled)
	tick := time.NewTicker(s.sampleEvery)
	defer tick.Stop()
	s.series.Sample(s.now(), s.metrics.totals())
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.series.Sample(s.now(), s.metrics.totals())
		}
	}
}

// collect keeps the engine's state and incident events for /api/events
// until the subscription closes.
func (s *Server) collect() {
	defer close(s.done)
	for {
		// Next returns an error only once the subscription is closed and
		// drained: its context never ends.
		ev, err := s.sub.Next(context.Background())
		if err != nil {
			return
		}
		s.events.add(ev)
		s.streams.publish(ev)
	}
}

// readOnly answers methods other than GET and HEAD with 405, since the mux
// patterns carry no method: a method pattern would make the catch-all "/"
// answer 404 instead.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed: use GET")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.ready != nil {
		if err := s.ready(); err != nil {
			writeText(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	status := "ready"
	if s.degraded != nil {
		if err := s.degraded(); err != nil {
			status = "degraded: " + err.Error()
		}
	}
	if s.restart != nil {
		if pending := s.restart(); len(pending) > 0 {
			status += "; restart required to apply: " + strings.Join(pending, ", ")
		}
	}
	if failing := s.metrics.ProxyAuthFailing(); len(failing) > 0 {
		// Still ready: the other routes carry the traffic. At most a few
		// named, so the answer stays a line however many fail.
		const named = 5
		status += "; " + strconv.Itoa(len(failing)) + " route(s) refused by their proxy (407: check their credentials): " + strings.Join(failing[:min(named, len(failing))], ", ")
		if len(failing) > named {
			status += ", …"
		}
	}
	writeText(w, http.StatusOK, status)
}

// routeJSON is a route in /api/routes. Times are RFC 3339 in UTC and
// omitted when they never happened; cause is omitted when it is ok.
type routeJSON struct {
	ID                  string            `json:"id"`
	URL                 string            `json:"url,omitempty"`    // Redacted: ***:***, never a credential
	Scheme              string            `json:"scheme,omitempty"` // omitted for a route missing from the list
	Labels              map[string]string `json:"labels"`
	Tier                int               `json:"tier"` // cost tier, 0 the cheapest
	State               string            `json:"state"`
	Score               float64           `json:"score"`
	Weight              float64           `json:"weight"`
	Inflight            int               `json:"inflight"`
	Attempts            uint64            `json:"attempts"`  // through this gateway since start
	Successes           uint64            `json:"successes"` // of which OK
	Samples             uint32            `json:"samples"`
	SuccessEWMA         float64           `json:"success_ewma"`
	LatencyMSEWMA       float64           `json:"latency_ms_ewma"`
	ConsecutiveFailures uint16            `json:"consecutive_failures"`
	LastSuccess         string            `json:"last_success,omitempty"`
	LastFailure         string            `json:"last_failure,omitempty"`
	LastFailureClass    string            `json:"last_failure_class,omitempty"` // of this gateway's last failed attempt through the route
	CooldownUntil       string            `json:"cooldown_until,omitempty"`
	Cause               string            `json:"cause,omitempty"`
	Targets             []targetJSON      `json:"targets"`
	SubExits            *subExitsJSON     `json:"sub_exits,omitempty"` // a provider gateway's
}

// subExitsJSON is provider.Stats: a gateway route's provider sessions.
type subExitsJSON struct {
	Live    int `json:"live"`    // in use now
	Minted  int `json:"minted"`  // started since the route's table was made
	Retired int `json:"retired"` // ended by a failure through them
	Expired int `json:"expired"` // ended by session_ttl or session_idle
	Evicted int `json:"evicted"` // dropped for room (sessions=)
}

// targetJSON is one route×target record of a route in /api/routes.
type targetJSON struct {
	Target        string  `json:"target"`
	State         string  `json:"state"`
	Score         float64 `json:"score"`
	CooldownUntil string  `json:"cooldown_until,omitempty"`
	Cause         string  `json:"cause,omitempty"`
	Samples       uint32  `json:"samples"`
}

func (s *Server) routeJSON(st engine.RouteStatus) routeJSON {
	h := st.Health
	attempts, successes, lastFailure := s.metrics.routeTotals(st.ID)
	rj := routeJSON{
		Attempts:            attempts,
		Successes:           successes,
		LastFailureClass:    lastFailure,
		ID:                  st.ID,
		Labels:              make(map[string]string, len(st.Labels)),
		Tier:                st.Tier,
		State:               h.State.String(),
		Score:               st.Score,
		Weight:              st.Weight,
		Inflight:            st.Inflight,
		Samples:             h.Samples,
		SuccessEWMA:         h.Success,
		LatencyMSEWMA:       h.Latency * 1000,
		ConsecutiveFailures: h.ConsecFail,
		LastSuccess:         unixTime(h.LastSuccess),
		LastFailure:         unixTime(h.LastFailure),
		CooldownUntil:       timeText(h.UntilTime()),
		Cause:               causeName(h.Cause),
		Targets:             make([]targetJSON, 0, len(st.Targets)),
	}
	if r := s.routes().Route(st.ID); r != nil {
		rj.URL, rj.Scheme = r.Redacted(), string(r.Scheme)
		if r.Gateway != nil && s.subExits != nil {
			if se, ok := s.subExits(st.ID); ok {
				rj.SubExits = &subExitsJSON{Live: se.Live, Minted: se.Minted, Retired: se.Retired, Expired: se.Expired, Evicted: se.Evicted}
			}
		}
	}
	for _, l := range st.Labels {
		rj.Labels[l.Key] = l.Value
	}
	for _, p := range st.Targets {
		rj.Targets = append(rj.Targets, targetJSON{
			Target:        p.Target,
			State:         p.Health.State.String(),
			Score:         p.Score,
			CooldownUntil: timeText(p.Health.UntilTime()),
			Cause:         causeName(p.Health.Cause),
			Samples:       p.Health.Samples,
		})
	}
	return rj
}

type incidentJSON struct {
	Target string `json:"target"`
	Class  string `json:"class"`
}

func (s *Server) targets(w http.ResponseWriter, _ *http.Request) {
	incidents, tiers := s.engine.Incidents(), s.engine.Tiers()
	out := struct {
		Incidents []incidentJSON `json:"incidents"`
		Tiers     []tierJSON     `json:"tiers"`
	}{Incidents: make([]incidentJSON, 0, len(incidents)), Tiers: make([]tierJSON, 0, len(tiers))}
	for _, in := range incidents {
		out.Incidents = append(out.Incidents, incidentJSON{Target: in.Target, Class: in.Class.String()})
	}
	slices.SortFunc(out.Incidents, func(a, b incidentJSON) int { return strings.Compare(a.Target, b.Target) })
	for _, t := range tiers {
		out.Tiers = append(out.Tiers, newTierJSON(t))
	}
	slices.SortFunc(out.Tiers, func(a, b tierJSON) int { return strings.Compare(a.Target, b.Target) })
	writeJSON(w, http.StatusOK, out)
}

// newTierJSON is t as the API shows it.
func newTierJSON(t engine.TargetTier) tierJSON {
	tj := tierJSON{Target: t.Target, Tier: t.Tier, Serving: t.Serving, Reason: t.Reason}
	if !t.Since.IsZero() {
		tj.Since = &t.Since
	}
	if !t.Until.IsZero() {
		tj.Until = &t.Until
	}
	return tj
}

// tierJSON is engine.TargetTier: a target served above the cheapest tier.
type tierJSON struct {
	Target  string     `json:"target"`
	Tier    int        `json:"tier"`            // lowest tier in use
	Serving int        `json:"serving"`         // tier of the latest pick
	Since   *time.Time `json:"since,omitempty"` // when tier last changed
	Until   *time.Time `json:"until,omitempty"` // when tier steps down
	Reason  string     `json:"reason,omitempty"`
}

// paceJSON is engine.PaceStatus: the pacing learned for one target.
type paceJSON struct {
	Target    string         `json:"target"`
	Tolerance float64        `json:"tolerance"` // requests per pace window per exit, all gateways; 0: none
	Gateways  int            `json:"gateways"`  // gateways sharing the limits (1: this one alone)
	Frozen    float64        `json:"frozen"`    // requests/s a new exit starts held at since the site froze; 0: not frozen
	Braked    float64        `json:"braked"`    // requests/s the exits no rate holds are spaced at while a young 429 brakes the site; 0: none
	Pairs     []pairPaceJSON `json:"pairs"`
}

type pairPaceJSON struct {
	Route string  `json:"route"`
	Rate  float64 `json:"rate"`  // requests/s its 429s allow, all gateways; 0: none
	Own   float64 `json:"own"`   // requests/s this gateway sends it at; 0: not paced
	Sent  int     `json:"sent"`  // sent in the pace window, all gateways
	Local int     `json:"local"` // of which through this gateway
	Guess bool    `json:"guess"` // rate is the freeze's guess, not what its own 429s taught
}

// targetPace is GET /api/targets/{target}/pace: what the target's 429s
// and bans taught.
func (s *Server) targetPace(w http.ResponseWriter, r *http.Request) {
	st, ok := s.engine.Pace(s.now(), r.PathValue("target"))
	if !ok {
		writeError(w, http.StatusNotFound, "no pacing learned for this target")
		return
	}
	out := paceJSON{Target: st.Target, Tolerance: st.Tolerance, Gateways: st.Processes, Frozen: st.Frozen, Braked: st.Braked, Pairs: make([]pairPaceJSON, len(st.Pairs))}
	for i, p := range st.Pairs {
		out.Pairs[i] = pairPaceJSON{Route: p.Route, Rate: p.Rate, Own: p.Own, Sent: p.Sent, Local: p.Local, Guess: p.Guess}
	}
	writeJSON(w, http.StatusOK, out)
}

// listEvents is GET /api/events: the newest events kept, up to limit,
// those of one route, target or kind when the query names them.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	limit := s.events.capacity()
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit must be a whole number, 1 or more")
			return
		}
		limit = n
	}
	f, ok := parseEventFilter(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "kind must be state, incident or tier")
		return
	}
	out := make([]apiEvent, 0)
	for _, e := range s.events.newest(s.events.capacity()) {
		if len(out) == limit {
			break
		}
		if f.match(&e) {
			out = append(out, apiEvent(e))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// act runs an operator action on a route: POST /api/routes/{id}/{action}.
// Each action and each refused one is logged with the client's address;
// never the token, nor an id no route has (it came from the client, and
// may be a route's address typed with its password).
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	var op func(time.Time, string) error
	action, id := r.PathValue("action"), r.PathValue("id")
	switch action {
	case "drain":
		op = s.engine.Drain
	case "eject":
		op = s.engine.Eject
	case "restore":
		op = s.engine.Restore
	default:
		writeError(w, http.StatusNotFound, "unknown action: want drain, eject or restore")
		return
	}
	attrs := []slog.Attr{slog.String("action", action), slog.String("remote", r.RemoteAddr)}
	if _, known := s.engine.RouteSpec(id); known {
		attrs = append(attrs, slog.String("route", id))
	}
	if !s.mayChange(w, r, "action", attrs...) {
		return
	}
	// The id is not echoed: it came from the client, and a route id typed
	// with its password would otherwise be printed back.
	if err := op(s.now(), id); err != nil {
		if errors.Is(err, engine.ErrUnknownRoute) {
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "admin action refused: unknown route", attrs...)
			writeError(w, http.StatusNotFound, "unknown route: give its id, path-escaped, as listed by /api/routes")
			return
		}
		s.log.LogAttrs(r.Context(), slog.LevelError, "admin action failed", append(attrs, slog.String("err", err.Error()))...)
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.forgetSnapshot()
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin action", attrs...)
	w.WriteHeader(http.StatusNoContent)
}

// reloadConfig is POST /api/reload: the configuration loaded again and
// applied, as SIGHUP does, for holders of the token. It answers 200
// {"result":"ok"}, or 422 {"error": …} naming what refused it (file and
// line) while the running configuration stays. Each request and refusal
// is logged, as actions are.
func (s *Server) reloadConfig(w http.ResponseWriter, r *http.Request) {
	if s.reload == nil {
		writeError(w, http.StatusNotFound, "this gateway has no configuration to reload")
		return
	}
	remote := slog.String("remote", r.RemoteAddr)
	if !s.mayChange(w, r, "reload", remote) {
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin reload", remote)
	if err := s.reload(); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "reload refused; the running configuration stays: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"result": "ok"})
}

// mayChange reports whether r may change the gateway: a POST carrying the
// admin token. Otherwise it answers the refusal and logs it, as "admin
// <what> refused" with attrs.
func (s *Server) mayChange(w http.ResponseWriter, r *http.Request, what string, attrs ...slog.Attr) bool {
	switch {
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed: use POST")
	case !s.hasToken:
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "admin "+what+" refused: the admin API is read-only", attrs...)
		writeError(w, http.StatusForbidden, "an admin "+what+" needs the admin token (admin.token or SWITCHYARD_ADMIN_TOKEN)")
	case !s.authorized(r):
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "admin "+what+" refused: missing or wrong bearer token", attrs...)
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	default:
		return true
	}
	return false
}

// tokenOnly serves h to requests carrying the admin bearer token; others
// are answered 401 and logged, as refused actions are.
func (s *Server) tokenOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "admin request refused: missing or wrong bearer token",
				slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the admin bearer token.
func (s *Server) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text + "\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// unixTime formats Unix nanoseconds, "" for 0 (never).
func unixTime(ns int64) string {
	if ns == 0 {
		return ""
	}
	return timeText(time.Unix(0, ns))
}

// timeText formats t as RFC 3339 in UTC, "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// causeName is the class's name, "" for ok: a record that was never moved
// by a failure has no cause to show.
func causeName(c engine.Class) string {
	if c == engine.OK {
		return ""
	}
	return c.String()
}

package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
)

// Metrics are the gateway's Prometheus metrics (names prefixed switchyard_).
// The gateway calls the Observe methods; the route gauges are read from the
// engine at scrape time, so they cost nothing between scrapes and never
// drift from the engine's own view. They live in their own registry so that
// tests and embedders never collide on the global one.
type Metrics struct {
	// All immutable after NewMetrics; the collectors are safe for
	// concurrent use.
	reg            *prometheus.Registry
	engine         *engine.Engine
	requests       *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	retries        prometheus.Counter
	hedges         prometheus.Counter
	attemptSeconds *prometheus.HistogramVec
	connsCut       *prometheus.CounterVec
	authRefused    *prometheus.CounterVec
	localErrors    *prometheus.CounterVec
	subExits       *prometheus.CounterVec
	spend          *prometheus.CounterVec
	stallChecks    *prometheus.CounterVec
	tunnelsCut     *prometheus.CounterVec
	reservedWait   prometheus.Histogram
	auth           *proxyAuth

	perRoute sync.Map // route id → *routeCounts, for /api/routes
	// seriesPerRoute is a PerRoute: whether /metrics has the series
	// labelled by route. Set by SetPerRoute, read by every attempt.
	seriesPerRoute atomic.Uint32

	// The dashboard's totals (series.go), read by its sampler: plain
	// atomics, since reading a Prometheus vector per sample costs a
	// lookup per label value.
	requestsTotal, requestsOK atomic.Uint64
	attemptsTotal             atomic.Uint64
	retriesTotal, hedgesTotal atomic.Uint64
	localTotal                atomic.Uint64
	latency                   latencyHistogram // of requests, to their answers relayed
}

// routeCounts are one route's attempts since start, how many were OK,
// and the class of its last failed one.
type routeCounts struct {
	attempts, successes atomic.Uint64
	lastFailure         atomic.Uint32 // engine.Class + 1; 0 before any failure
}

// NewMetrics returns the metrics of a gateway running on e. log receives
// the warning of a route whose proxy refuses its credentials; nil discards
// it.
func NewMetrics(e *engine.Engine, log *slog.Logger) *Metrics {
	m := &Metrics{
		auth:   newProxyAuth(log),
		reg:    prometheus.NewRegistry(),
		engine: e,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_requests_total",
			Help: "Requests served, by method and result (ok or the failing outcome class).",
		}, []string{"method", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_attempts_total",
			Help: "Attempts made through each route, by outcome class.",
		}, []string{"route", "class"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_retries_total",
			Help: "Attempts beyond each request's first that followed a failure or a deadline.",
		}),
		hedges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_hedges_total",
			Help: "Attempts started beside one still waiting for its answer, the first answer winning.",
		}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_attempt_seconds",
			Help:    "Attempt latency, by outcome class.",
			Buckets: prometheus.DefBuckets,
		}, []string{"class"}),
		connsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_client_conns_cut_total",
			Help: "Client connections the gateway cut, by reason: idle, header, slow_body or over_cap.",
		}, []string{"reason"}),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_auth_refused_total",
			Help: "Clients refused at authentication, by reason: denied (407), throttled (429: too many failures from the address) or busy (503: too many checks waiting).",
		}, []string{"reason"}),
		localErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_local_errors_total",
			Help: "Attempts the gateway could not make for want of its own resources, by reason: emfile, enfile (out of file descriptors), enobufs, enomem (kernel buffers or memory), eaddrnotavail (local ports), upstream_cap (server.max_upstream_conns open). Answered 503 local_resources; no evidence against any route.",
		}, []string{"reason"}),
		subExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_sub_exit_failures_total",
			Help: "Failures through a provider gateway's sub-exit (a session's provider session) that retired it or whose ban was kept from the engine as that provider IP's alone, by class and effect: retired, spared (the gateway not cooled for the site) or retired_spared.",
		}, []string{"class", "effect"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_spend_total",
			Help: "What attempts cost by their routes' price_per_request and price_per_gb (answers relayed and tunnels both ways), in the prices' currency, by the routes' cost tier. Divided by switchyard_requests_total{result=\"ok\"}: the cost per completed request.",
		}, []string{"tier"}),
		stallChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_stall_checks_total",
			Help: "Checks of an exit under a stalled tunnel (its client waiting past the deadline, nothing heard through the exit since): a new connect through it, by class, ok when the exit answered.",
		}, []string{"class"}),
		tunnelsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tunnels_cut_total",
			Help: "Tunnels the gateway cut, by reason: exit_failed (their exit failed a check after a stall, with a fault of its own: their clients retry through another exit) or drained (idle between two exchanges, through a route drained since they were built).",
		}, []string{"reason"}),
		reservedWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_reserved_wait_seconds",
			Help:    "First attempts that waited for a paced fast exit's next token, reserved for them, rather than go at once to a far slower exit; and how long each waited (at most half the fast exit's latency).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
	}
	// Every reason is exported, even at 0, so that alerts see a series.
	for _, r := range []CutReason{CutIdle, CutHeader, CutSlowBody, CutOverCap} {
		m.connsCut.WithLabelValues(string(r))
	}
	for _, r := range []string{"emfile", "enfile", "enobufs", "enomem", "eaddrnotavail", "upstream_cap"} {
		m.localErrors.WithLabelValues(r)
	}
	for _, r := range []string{gateway.TunnelCutExitFailed, gateway.TunnelCutDrained} {
		m.tunnelsCut.WithLabelValues(r)
	}
	authFailing := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_routes_proxy_auth_failing",
		Help: "Routes whose proxy refused their credentials (407, or SOCKS5 authentication) at their last attempt or probe that said, until one through them succeeds: credentials in the proxy list that no longer pass, or an account that ran out. /readyz names them.",
	}, func() float64 { return float64(m.auth.n.Load()) })
	m.reg.MustRegister(m.requests, perRouteAttempts{m}, m.retries, m.hedges, m.attemptSeconds, m.connsCut, m.authRefused, m.localErrors, m.subExits, m.spend, m.stallChecks, m.tunnelsCut, m.reservedWait, authFailing,
		engineCollector{e: e, perRoute: m.perRouteSeries})
	// The process's own health, as every Go exporter shows it: go_*
	// (goroutines, heap, GC pauses) and process_* (CPU, memory, open
	// file descriptors against their limit).
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// PerRoute says whether /metrics has the series labelled by route:
// switchyard_attempts_total{route,class}, switchyard_route_inflight and
// switchyard_route_score, which at 100,000 routes are most of 14 MB of
// exposition (docs/design/010-dashboard.md). Without them the pool's series stay: attempts by class are
// switchyard_attempt_seconds_count{class}, routes by state
// switchyard_routes{state}. It is written as metrics.per_route: true,
// false or "auto".
type PerRoute uint8

// The values of PerRoute.
const (
	// PerRouteAuto exports them while the engine has at most
	// PerRouteAutoMax routes, following reloads that add routes.
	PerRouteAuto PerRoute = iota
	PerRouteOn
	PerRouteOff
)

// PerRouteAutoMax is the most routes PerRouteAuto exports the series
// labelled by route for: up to 17 series a route (an attempts counter per
// outcome class seen, its leases in flight, its score), so at most about
// 17,000, which a Prometheus scrapes without trouble.
const PerRouteAutoMax = 1000

var perRouteNames = [...]string{PerRouteAuto: "auto", PerRouteOn: "true", PerRouteOff: "false"}

func (p PerRoute) String() string { return perRouteNames[p] }

// MarshalText writes "auto", "true" or "false".
func (p PerRoute) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads "auto", "true" or "false" (a TOML boolean arrives as
// its text).
func (p *PerRoute) UnmarshalText(b []byte) error {
	for v, name := range perRouteNames {
		if string(b) == name {
			*p = PerRoute(v)
			return nil
		}
	}
	return errors.New(`want true, false or "auto"`)
}

// SetPerRoute sets whether /metrics has the series labelled by route;
// before it, PerRouteAuto.
func (m *Metrics) SetPerRoute(p PerRoute) { m.seriesPerRoute.Store(uint32(p)) }

// perRouteSeries reports whether the series labelled by route are
// exported now: one atomic load, and the engine's route count (another)
// under PerRouteAuto.
func (m *Metrics) perRouteSeries() bool {
	switch PerRoute(m.seriesPerRoute.Load()) {
	case PerRouteOn:
		return true
	case PerRouteOff:
		return false
	}
	return m.engine.RouteCount() <= PerRouteAutoMax
}

// perRouteAttempts exports switchyard_attempts_total while the series
// labelled by route are on.
type perRouteAttempts struct{ m *Metrics }

var _ prometheus.Collector = perRouteAttempts{}

// Describe implements prometheus.Collector.
func (c perRouteAttempts) Describe(ch chan<- *prometheus.Desc) { c.m.attempts.Describe(ch) }

// Collect implements prometheus.Collector.
func (c perRouteAttempts) Collect(ch chan<- prometheus.Metric) {
	if c.m.perRouteSeries() {
		c.m.attempts.Collect(ch)
		return
	}
	// Off, as auto turns once a reload passes PerRouteAutoMax: the
	// series counted until then are dropped rather than kept unseen.
	c.m.attempts.Reset()
}

// CutReason is why the gateway cut a client connection.
type CutReason string

// The reasons of switchyard_client_conns_cut_total, one per [server] bound.
const (
	CutIdle     CutReason = "idle"      // idle past idle_timeout between requests
	CutHeader   CutReason = "header"    // headers not in within header_timeout
	CutSlowBody CutReason = "slow_body" // body behind min_body_rate by body_timeout
	CutOverCap  CutReason = "over_cap"  // accepted beyond max_client_conns
)

// ObserveConnCut counts a client connection cut for reason.
func (m *Metrics) ObserveConnCut(reason CutReason) {
	m.connsCut.WithLabelValues(string(reason)).Inc()
}

// ObserveAuthRefusal counts a client refused at authentication.
func (m *Metrics) ObserveAuthRefusal(reason string) {
	m.authRefused.WithLabelValues(reason).Inc()
}

// ObserveLocalError counts an attempt the gateway could not make for want
// of its own resource reason.
func (m *Metrics) ObserveLocalError(reason string) {
	m.localErrors.WithLabelValues(reason).Inc()
	m.localTotal.Add(1)
}

// ObserveSubExit counts a failure through a provider gateway's sub-exit
// that retired it, or whose ban was spared the gateway, or both.
func (m *Metrics) ObserveSubExit(class engine.Class, retired, spared bool) {
	effect := "retired"
	switch {
	case retired && spared:
		effect = "retired_spared"
	case spared:
		effect = "spared"
	}
	m.subExits.WithLabelValues(class.String(), effect).Inc()
}

// ObserveStallCheck counts a check of an exit under a stalled tunnel.
func (m *Metrics) ObserveStallCheck(class engine.Class) {
	m.stallChecks.WithLabelValues(class.String()).Inc()
}

// ObserveReservedWait records a first attempt's wait for the paced
// route's token its lease reserved.
func (m *Metrics) ObserveReservedWait(wait time.Duration) {
	m.reservedWait.Observe(wait.Seconds())
}

// ObserveTunnelsCut counts n tunnels the stall watch cut for reason.
func (m *Metrics) ObserveTunnelsCut(reason string, n int) {
	m.tunnelsCut.WithLabelValues(reason).Add(float64(n))
}

// ObserveSpend adds what attempts through a route of tier cost.
func (m *Metrics) ObserveSpend(tier int, amount float64) {
	m.spend.WithLabelValues(strconv.Itoa(tier)).Add(amount)
}

// WatchClientConns adds the gauge of open client connections, read from
// open at each scrape.
func (m *Metrics) WatchClientConns(open func() int64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_client_conns",
		Help: "Open client connections of the forward proxy, tunnels included.",
	}, func() float64 { return float64(open()) }))
}

// WatchUpstreamConns adds the gauge of the connections open in the
// transport the routes share, read from open at each scrape.
func (m *Metrics) WatchUpstreamConns(open func() int64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_upstream_conns",
		Help: "Connections open to upstream proxies (to targets, for direct routes), in use or idle, tunnels included; capped by server.max_upstream_conns, idle ones by server.max_idle_upstream_conns.",
	}, func() float64 { return float64(open()) }))
}

// WatchRestart adds the gauge that is 1 while the configuration last
// loaded differs from the running one in sections only a restart applies,
// pending naming them.
func (m *Metrics) WatchRestart(pending func() []string) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_config_restart_required",
		Help: "1 while a reloaded configuration changes sections that need a restart to apply (named by /readyz).",
	}, func() float64 {
		if len(pending()) > 0 {
			return 1
		}
		return 0
	}))
}

// ObserveRequest counts a finished request: class is its final outcome;
// retries and hedges are the attempts it made after the first; latency
// its time from arrival to its answer relayed, which the overview's
// percentiles read.
func (m *Metrics) ObserveRequest(method string, class engine.Class, retries, hedges int, latency time.Duration) {
	m.requests.WithLabelValues(methodLabel(method), class.String()).Inc()
	m.latency.observe(latency)
	m.requestsTotal.Add(1)
	if class == engine.OK {
		m.requestsOK.Add(1)
	}
	if retries > 0 {
		m.retries.Add(float64(retries))
		m.retriesTotal.Add(uint64(retries))
	}
	if hedges > 0 {
		m.hedges.Add(float64(hedges))
		m.hedgesTotal.Add(uint64(hedges))
	}
}

// ObserveAttempt counts one attempt through route (an id, which never holds
// a credential) and records its latency.
func (m *Metrics) ObserveAttempt(route string, class engine.Class, latency time.Duration) {
	m.auth.observe(route, class, "attempt")
	if m.perRouteSeries() {
		m.attempts.WithLabelValues(route, class.String()).Inc()
	}
	m.attemptSeconds.WithLabelValues(class.String()).Observe(latency.Seconds())
	m.attemptsTotal.Add(1)
	v, ok := m.perRoute.Load(route)
	if !ok {
		v, _ = m.perRoute.LoadOrStore(route, new(routeCounts))
	}
	c := v.(*routeCounts)
	c.attempts.Add(1)
	switch class {
	case engine.OK:
		c.successes.Add(1)
	case engine.Canceled: // no evidence either way
	default:
		c.lastFailure.Store(uint32(class) + 1)
	}
}

// ObserveProbe takes a probe's outcome through route (probe.Observer), for
// the alarm of routes whose proxy refuses their credentials.
func (m *Metrics) ObserveProbe(route string, class engine.Class) {
	m.auth.observe(route, class, "probe")
}

// ProxyAuthFailing names the routes whose proxy refuses their credentials
// (switchyard_routes_proxy_auth_failing), sorted.
func (m *Metrics) ProxyAuthFailing() []string { return m.auth.routes() }

// ResetProxyAuth is told of a reload: a route whose proxy still refuses
// its credentials is logged again, and failing routes keep reports false
// for (no longer listed, or listed with other credentials) are forgotten
// until their proxy refuses them again.
func (m *Metrics) ResetProxyAuth(keep func(route string) bool) { m.auth.reset(keep) }

// routeTotals returns route's attempts and successes since start, and
// the class of its last failed attempt ("" for none).
func (m *Metrics) routeTotals(route string) (attempts, successes uint64, lastFailure string) {
	if v, ok := m.perRoute.Load(route); ok {
		c := v.(*routeCounts)
		if f := c.lastFailure.Load(); f > 0 {
			lastFailure = engine.Class(f - 1).String()
		}
		return c.attempts.Load(), c.successes.Load(), lastFailure
	}
	return 0, 0, ""
}

// handler serves the registry in the Prometheus exposition format.
func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// methodLabel folds methods outside the standard set into "other": the
// method comes from clients, and each distinct label value is a new series.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// StateStats is what /metrics shows of a shared state store.
type StateStats struct {
	Degraded      bool   // serving from local state: the store is out of reach
	Errors        uint64 // failed calls to the store
	Writes        uint64 // records written to the store
	Outages       uint64 // times the store became unreachable
	Conflicts     uint64 // writes retried because another process wrote first
	RemoteChanges uint64 // records other processes changed, applied here
}

// WatchState adds a shared state store's gauges and counters, read from
// stats at each scrape.
func (m *Metrics) WatchState(stats func() StateStats) {
	m.reg.MustRegister(stateCollector(stats))
}

var (
	stateDegradedDesc  = prometheus.NewDesc("switchyard_state_degraded", "1 while the shared state store is out of reach and the gateway serves from local state.", nil, nil)
	stateErrorsDesc    = prometheus.NewDesc("switchyard_state_errors_total", "Failed calls to the shared state store.", nil, nil)
	stateWritesDesc    = prometheus.NewDesc("switchyard_state_writes_total", "Health records written to the shared state store.", nil, nil)
	stateOutagesDesc   = prometheus.NewDesc("switchyard_state_outages_total", "Times the shared state store became unreachable.", nil, nil)
	stateConflictsDesc = prometheus.NewDesc("switchyard_state_conflicts_total", "Record writes retried because another gateway wrote first.", nil, nil)
	stateRemoteDesc    = prometheus.NewDesc("switchyard_state_remote_changes_total", "Records changed by other gateways, applied here.", nil, nil)
)

// stateCollector reads a store's StateStats at scrape time.
type stateCollector func() StateStats

// Describe implements prometheus.Collector.
func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{stateDegradedDesc, stateErrorsDesc, stateWritesDesc, stateOutagesDesc, stateConflictsDesc, stateRemoteDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c()
	degraded := 0.0
	if st.Degraded {
		degraded = 1
	}
	ch <- prometheus.MustNewConstMetric(stateDegradedDesc, prometheus.GaugeValue, degraded)
	ch <- prometheus.MustNewConstMetric(stateErrorsDesc, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(stateWritesDesc, prometheus.CounterValue, float64(st.Writes))
	ch <- prometheus.MustNewConstMetric(stateOutagesDesc, prometheus.CounterValue, float64(st.Outages))
	ch <- prometheus.MustNewConstMetric(stateConflictsDesc, prometheus.CounterValue, float64(st.Conflicts))
	ch <- prometheus.MustNewConstMetric(stateRemoteDesc, prometheus.CounterValue, float64(st.RemoteChanges))
}

var (
	routesDesc   = prometheus.NewDesc("switchyard_routes", "Routes in each health state.", []string{"state"}, nil)
	inflightDesc = prometheus.NewDesc("switchyard_route_inflight", "Leases in flight on each route.", []string{"route"}, nil)
	scoreDesc    = prometheus.NewDesc("switchyard_route_score", "Global score of each route, in [0, 1].", []string{"route"}, nil)
	incidentDesc = prometheus.NewDesc("switchyard_incidents", "Open target incidents.", nil, nil)
	tiersDesc    = prometheus.NewDesc("switchyard_targets_escalated", "Targets served from a costlier tier than the cheapest, by the lowest tier in use there (GET /api/targets says which and why).", []string{"tier"}, nil)
)

// engineCollector reads the route gauges from the engine at scrape time;
// those labelled by route only while perRoute says so.
type engineCollector struct {
	e        *engine.Engine
	perRoute func() bool
}

var _ prometheus.Collector = engineCollector{}

// Describe implements prometheus.Collector.
func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- routesDesc
	ch <- inflightDesc
	ch <- scoreDesc
	ch <- incidentDesc
	ch <- tiersDesc
}

// Collect implements prometheus.Collector.
func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	perRoute := c.perRoute()
	// Every state is exported, even at 0, so that alerts on a state's
	// count see a series rather than an absent one. The states are
	// numbered contiguously with Draining last.
	var perState [engine.Draining + 1]int
	c.e.EachRoute(func(r *engine.RouteStatus) {
		perState[r.Health.State]++
		if !perRoute {
			return
		}
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(r.Inflight), r.ID)
		ch <- prometheus.MustNewConstMetric(scoreDesc, prometheus.GaugeValue, r.Score, r.ID)
	})
	for s, n := range perState {
		ch <- prometheus.MustNewConstMetric(routesDesc, prometheus.GaugeValue, float64(n), engine.State(s).String())
	}
	ch <- prometheus.MustNewConstMetric(incidentDesc, prometheus.GaugeValue, float64(len(c.e.Incidents())))
	var escalated [engine.MaxTier + 1]int
	for _, t := range c.e.Tiers() {
		escalated[t.Tier]++
	}
	for tier, n := range escalated {
		if n > 0 {
			ch <- prometheus.MustNewConstMetric(tiersDesc, prometheus.GaugeValue, float64(n), strconv.Itoa(tier))
		}
	}
}

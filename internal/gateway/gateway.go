// Package gateway is Switchyard's forward proxy
// (docs/design/008-gateway.md): it takes absolute-form HTTP requests and
// CONNECT tunnels from unmodified clients and runs each through the attempt
// loop (loop.go) — lease a route from the engine, carry the attempt through
// it within the lease's deadline, classify the outcome, report it, and
// retry or hedge on another route when the rules, the budget and the method
// allow.
//
// Traffic only ever leaves through a leased route: when the engine has none
// to give, the client gets a 503, never a direct connection.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/lookalike"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// Config tunes the gateway. Zero fields mean the documented defaults.
type Config struct {
	// MaxAttempts caps the attempts of one request, the first included.
	// Default 3.
	MaxAttempts int
	// AttemptTimeout bounds one attempt from the dial to the end of the
	// response headers (for CONNECT: until the tunnel is built), and caps
	// the deadline the engine gives each lease. Default 30s.
	AttemptTimeout time.Duration
	// RequestTimeout bounds all of a request's attempts together, retries
	// and hedges included, from when its first route is asked for
	// (LearnedMaxWait included) to the response headers (for CONNECT:
	// until the tunnel is built). Past it the client gets
	// 504 with X-Switchyard-Error: request_timeout, and the attempts in
	// flight end as a client's cancel ends them (Lease.Canceled).
	// Default 60s.
	RequestTimeout time.Duration
	// Timeouts bounds the phases of reaching a target through a route; zero
	// fields get route's defaults.
	Timeouts route.Timeouts
	// MaxIdleUpstreamConns caps the idle connections kept for the next
	// request across all routes (route.Upstream): to proxies, pooled per
	// proxy endpoint and credentials, and streams to targets (Direct and
	// SOCKS5 routes, https:// through any), per way out and target; the
	// least recently used idle one is closed past the cap. Default 1024
	// (route.DefaultMaxIdle).
	MaxIdleUpstreamConns int
	// MaxUpstreamConns caps the connections open to upstream proxies (to
	// targets, for Direct routes) at once, in use or idle, tunnels
	// included: an attempt past it fails as the gateway's own (local
	// resources "upstream_cap", a 503, no evidence against the route).
	// Negative means no cap. Default 10000.
	MaxUpstreamConns int
	// MaxBodyBytes is the largest request body buffered so that a retry can
	// resend it. Larger bodies stream once and are never retried.
	// Default 1 MiB.
	MaxBodyBytes int64
	// MaxFetchBody is the most of an answer's body a fetch of the fetch
	// API keeps; a longer one is cut there and marked truncated (fetch it
	// in ranges). Default 16 MiB.
	MaxFetchBody int64
	// Forwarder, when set, may run proxy requests on another cluster node
	// (cluster.go); nil runs every request here.
	Forwarder Forwarder
	// Budget caps retries and hedges pool-wide, so that a failing pool
	// cannot turn into a retry storm (docs/design/007-attempts.md). The
	// zero value means engine.DefaultBudget.
	Budget engine.BudgetConfig
	// ProxyTLS holds the roots that HTTPS proxies are verified against; nil
	// means the system's. Tests set it to trust fake proxies.
	ProxyTLS *tls.Config
	// TargetTLS holds the roots that sites fetched over https:// by the
	// fetch API are verified against; nil means the system's. Tests set
	// it to trust their sites.
	TargetTLS *tls.Config
	// Now is the clock for the engine's timeline and the retry budget.
	// Default time.Now.
	Now func() time.Time
	// Observer is told of every attempt, every request that got a route
	// and every client refused at authentication, for metrics; nil means
	// none.
	Observer Observer
	// Admission refuses internal destinations (docs/security.md);
	// nil means no checks (a malformed target is answered 400 either way).
	// The host, read as every route will send it and then sent so, is
	// checked before a route is leased; on Direct routes every resolved
	// address is checked again at connect time, so DNS rebinding cannot
	// slip past. Proxy routes resolve the target at the proxy, so only the
	// host is checked for them, unless ResolveProxyTargets.
	Admission *admit.Admission
	// ResolveProxyTargets also resolves each target name at admission
	// and refuses it if an address is blocked, for the proxy routes whose
	// connections the dial-time check never sees. A name that does not
	// resolve is refused too (fail closed). Needs Admission.
	ResolveProxyTargets bool
	// Resolver does those lookups and those of Direct routes' dials, so
	// that a name reads alike at both; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Users, when not empty, are the only clients let through: every
	// request must carry their Basic Proxy-Authorization
	// (docs/design/008-gateway.md). Empty means no client authentication.
	// Update replaces them.
	Users map[string]User
	// Targets name the target of each host and hold the operator's
	// per-target settings (probe path, block signatures, pacing); nil
	// means registrable domains and no settings. Update replaces them.
	Targets *target.Rules
	// MaxPacedTargets bounds the targets, and route×target pairs, whose
	// pacing state is kept (LRU). Default 10000.
	MaxPacedTargets int
	// LearnedMaxWait is how long a request's first attempt waits for an
	// exit when every route is at the rate its target taught the engine
	// (engine.PacedError) before the client gets 429 with Retry-After;
	// zero answers at once. Retries and hedges never wait: they have
	// other attempts to watch.
	LearnedMaxWait time.Duration
	// FeedbackTTL is how long after an answer a client may give its
	// attempt a verdict (feedback.go). Default 15m.
	FeedbackTTL time.Duration
	// MITM, when set, intercepts the TLS inside CONNECT tunnels
	// (mitm.go); nil splices them blind.
	MITM *MITM
	// Log receives one Info line per request (per CONNECT: when the tunnel
	// is built or fails); nil means no request logs. Lines never carry
	// credentials or query strings, where crawlers put tokens.
	Log *slog.Logger
}

// Observer receives what the gateway did; admin.Metrics implements it.
type Observer interface {
	ObserveAttempt(route string, class engine.Class, latency time.Duration)
	// ObserveRequest counts a finished request: its final class, the
	// attempts after the first, and its latency, from its arrival to its
	// answer relayed (for a tunnel, to the tunnel up).
	ObserveRequest(method string, class engine.Class, retries, hedges int, latency time.Duration)
	// ObserveAuthRefusal is told of each client refused at
	// authentication: "denied" (407), "throttled" (429) or "busy" (503).
	ObserveAuthRefusal(reason string)
	// ObserveLocalError is told of each attempt the gateway could not make
	// for want of its own resources, reason naming which (route.Error's
	// Local: "emfile", "enfile", "enobufs", "enomem", "eaddrnotavail").
	ObserveLocalError(reason string)
	// ObserveSubExit is told of each failure of class through a provider
	// gateway's sub-exit that retired it or whose ban was kept from the
	// engine as the sub-exit's alone (spared; provider.go).
	ObserveSubExit(class engine.Class, retired, spared bool)
	// ObserveSpend is told what attempts through a route of a cost tier
	// cost by its prices (spend.go).
	ObserveSpend(tier int, amount float64)
	// ObserveStallCheck is told of each check of an exit under a stalled
	// tunnel (stall.go): the check's class, OK when the exit answered.
	ObserveStallCheck(class engine.Class)
	// ObserveTunnelsCut is told of n tunnels the stall watch cut, and why:
	// TunnelCutExitFailed or TunnelCutDrained (stall.go).
	ObserveTunnelsCut(reason string, n int)
	// ObserveReservedWait is told of each first attempt whose lease
	// reserved a paced route's next token, and the wait for it
	// (engine.Lease.Delay), as the wait begins.
	ObserveReservedWait(wait time.Duration)
}

// DefaultConfig is what New gives zero fields, the one place these
// defaults are defined: config.Default starts from it.
func DefaultConfig() Config {
	return Config{
		MaxAttempts:          3,
		AttemptTimeout:       30 * time.Second,
		RequestTimeout:       60 * time.Second,
		MaxBodyBytes:         1 << 20,
		MaxFetchBody:         16 << 20,
		FeedbackTTL:          15 * time.Minute,
		MaxIdleUpstreamConns: route.DefaultMaxIdle,
		MaxUpstreamConns:     10000,
		Budget:               engine.DefaultBudget(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = d.AttemptTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxFetchBody <= 0 {
		c.MaxFetchBody = d.MaxFetchBody
	}
	if c.FeedbackTTL <= 0 {
		c.FeedbackTTL = d.FeedbackTTL
	}
	if c.MaxUpstreamConns == 0 {
		c.MaxUpstreamConns = d.MaxUpstreamConns
	}
	if c.MaxIdleUpstreamConns <= 0 {
		c.MaxIdleUpstreamConns = d.MaxIdleUpstreamConns
	}
	if c.Budget == (engine.BudgetConfig{}) {
		c.Budget = d.Budget
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

// Gateway is the forward proxy. It is an http.Handler, safe for concurrent
// use.
type Gateway struct {
	// Immutable after New.
	cfg      Config
	engine   *engine.Engine
	budget   *engine.Budget
	pacer    *pacing.Pacer
	upstream *route.Upstream // what the exits share: kept connections, the cap on open ones
	// tokens seals the attempt tokens of relayed answers (feedback.go).
	tokens *sealer
	// interceptor serves intercepted connections (nil without
	// Config.MITM); only names the hosts it takes (nil: all) and bypass
	// those it does not (nil: none).
	interceptor  *http.Server
	only, bypass *target.Rules

	// current is what Update may change, swapped whole: a request reads it
	// once and keeps that view to its end.
	current atomic.Pointer[settings]
	updates sync.Mutex // serializes Update

	local localLog // the gateway running out of its own resources, logged at a bounded rate

	lookalike *lookalike.Detector // soft bans no signature knows (lookalike.go)

	providers providers // the provider sessions of gateway routes (provider.go)

	stalls stallWatch // tunnels watched for an exit dying under them (stall.go)
}

// New returns a gateway over routes, which must already have been added to
// e (with r.Spec()): the engine picks among them, the gateway dials them.
func New(cfg Config, e *engine.Engine, routes []*route.Route) (*Gateway, error) {
	cfg = cfg.withDefaults()
	g := &Gateway{cfg: cfg, engine: e, budget: engine.NewBudget(cfg.Budget), upstream: route.NewUpstream(cfg.MaxIdleUpstreamConns, cfg.MaxUpstreamConns),
		lookalike: lookalike.New(lookalike.Config{Now: cfg.Now}), tokens: newSealer()}
	if g.interceptor = g.newInterceptor(); g.interceptor != nil {
		g.only, g.bypass = hostRules(cfg.MITM.Only), hostRules(cfg.MITM.Bypass)
	}
	// Pacing waits on real timers, so it reads the real clock too.
	g.pacer = pacing.New(pacing.Config{Limits: g.paceOf, MaxTargets: cfg.MaxPacedTargets})
	set, err := route.NewSet(routes, g.dialer())
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := g.Update(set, cfg.Users, cfg.Targets); err != nil {
		return nil, err
	}
	return g, nil
}

// dialer is how every route's Exit dials: the configured timeouts and
// proxy roots, and admission's connect-time check on Direct routes, skipped
// for hosts allow-listed by name.
func (g *Gateway) dialer() route.Dialer {
	d := route.Dialer{Timeouts: g.cfg.Timeouts, TLS: g.cfg.ProxyTLS, TargetTLS: g.cfg.TargetTLS, Resolver: g.cfg.Resolver, Upstream: g.upstream}
	if a := g.cfg.Admission; a != nil {
		d.Control = a.DialControl
	}
	return d
}

// Exit is the way out of route id as the gateway carries it, or nil when
// the gateway has no such route: probes go out the same way, admission
// included.
func (g *Gateway) Exit(id string) *route.Exit {
	return g.current.Load().routes.Exit(id)
}

// admit reads the target's authority as every route will send it and
// checks it (with ResolveProxyTargets, also the addresses its name
// resolves to), before any route is leased: a malformed one is answered
// 400, a refused one 403, and nothing is counted. It returns the host and
// authority to carry the request to, so that what was checked is what
// goes out; the authority needs a port unless one is implied.
func (g *Gateway) admit(ctx context.Context, w http.ResponseWriter, authority string, needPort bool) (host, hostport string, ok bool) {
	host, hostport, err := admit.NormalizeHostPort(authority, needPort)
	if err == nil {
		err = g.check(ctx, host)
	}
	if err == nil {
		return host, hostport, true
	}
	switch e := refusal(err); {
	case e != nil && e.Malformed:
		badRequest(w, e.Error())
	default:
		blockedDestination(w, err)
	}
	return "", "", false
}

// Admit is admission's verdict on a probe's target authority (host, and
// port when not 80), read and checked as users' traffic is before it is
// dialled: the authority to send it to, or the *admit.Error refusing it.
// Direct routes check every address again at connect time.
func (g *Gateway) Admit(ctx context.Context, authority string) (string, error) {
	host, hostport, err := admit.NormalizeHostPort(authority, false)
	if err == nil {
		err = g.check(ctx, host)
	}
	return hostport, err
}

// check is admission's verdict on a host as NormalizeHostPort read it.
func (g *Gateway) check(ctx context.Context, host string) error {
	a := g.cfg.Admission
	switch {
	case a == nil:
		return nil
	case g.cfg.ResolveProxyTargets:
		return a.CheckResolved(ctx, g.cfg.Resolver, host) // CheckHost, then the addresses
	}
	return a.CheckHost(host)
}

// blockedDestination answers a request whose target admission refused.
func blockedDestination(w http.ResponseWriter, err error) {
	fail(w, http.StatusForbidden, "blocked_destination", "switchyard: "+err.Error())
}

// refusal returns the admission refusal in err's chain, or nil.
func refusal(err error) *admit.Error {
	var e *admit.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Close closes the idle upstream connections of every route. Requests and
// tunnels in progress are not cut.
func (g *Gateway) Close() { g.upstream.CloseIdleConnections() }

// UpstreamConns is how many connections the exits hold open now, in use
// or idle (idle ones capped by MaxIdleUpstreamConns), tunnels included,
// for metrics.
func (g *Gateway) UpstreamConns() int64 { return g.upstream.Open() }

// ServeHTTP is the forward proxy: CONNECT builds a tunnel, absolute-form
// http:// requests are performed and observed; anything else is the
// client's mistake and answered 400. Client auth comes first, so that a
// stranger gets nothing leased and nothing counted.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := g.current.Load()
	w, rec := g.begin(w, r, s)
	defer g.logRequest(r.Context(), rec)
	var user engine.Labels
	if s.users != nil {
		name, labels, refused := s.users.authenticate(w, r)
		if refused != "" {
			if g.cfg.Observer != nil {
				g.cfg.Observer.ObserveAuthRefusal(refused)
			}
			return
		}
		rec.user, user = name, labels
	}
	ctl, ok := g.control(w, r, rec, user)
	if !ok {
		return
	}
	if g.toNode(w, r, rec, ctl) {
		return
	}
	if r.Method == http.MethodConnect {
		g.serveConnect(w, r, s, ctl, rec, user)
		return
	}
	switch {
	case !r.URL.IsAbs():
		badRequest(w, "switchyard is a forward proxy: send absolute-form requests or CONNECT")
	case r.URL.Scheme == "https":
		badRequest(w, "https:// is not fetched by the proxy: use CONNECT (any HTTPS proxy client does)")
	case r.URL.Scheme != "http":
		badRequest(w, fmt.Sprintf("unsupported scheme %q: only http:// and CONNECT are proxied", r.URL.Scheme))
	case r.URL.Host == "":
		badRequest(w, "absolute URL without a host")
	default:
		g.serveForward(w, r, s, ctl, rec)
	}
}

// logger is where the gateway's own failures go: Config.Log, or the
// default logger when requests are not logged.
func (g *Gateway) logger() *slog.Logger {
	if g.cfg.Log != nil {
		return g.cfg.Log
	}
	return slog.Default()
}

// begin starts r's record and, when requests are logged, has w note the
// status it sends. The caller logs the record when done (logRequest).
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request, s *settings) (http.ResponseWriter, *record) {
	rec := &record{method: r.Method, start: g.cfg.Now()}
	if g.cfg.Log != nil {
		rec.describe(r, s.targets)
		sw := &statusWriter{ResponseWriter: w}
		w, rec.w = sw, sw
	}
	return w, rec
}

// control reads what the client asked of this request (parseControl),
// within what its user may ask (constrain), and takes the verdicts it
// gives on earlier answers (applyFeedback); ok is false when the client
// was answered instead.
func (g *Gateway) control(w http.ResponseWriter, r *http.Request, rec *record, user engine.Labels) (ctl control, ok bool) {
	ctl, err := parseControl(r.Header)
	if err != nil {
		badRequest(w, err.Error())
		return ctl, false
	}
	rec.session = ctl.session
	if rec.user != "" {
		if ctl.labels, err = constrain(rec.user, user, ctl.labels); err != nil {
			fail(w, http.StatusForbidden, "label_conflict", "switchyard: "+err.Error())
			return ctl, false
		}
	}
	switch said, err := g.applyFeedback(r, rec.user); {
	case err != nil:
		badRequest(w, err.Error())
		return ctl, false
	case said != "":
		w.Header().Set(headerFeedback, said)
	}
	return ctl, true
}

// record is what a request's log line says, filled in as it is served.
// Owner: the request's goroutine.
type record struct {
	method, target, url string
	user, session       string
	start               time.Time
	route               string // "" until a route was leased
	class               engine.Class
	attempts, hedges    int
	waited              time.Duration // the first attempt's wait for a reserved token (job.waited)
	status              int           // set when the answer bypasses w (a hijacked CONNECT)
	intercepted         bool          // an intercepted CONNECT, or a request inside one
	paced               *pacing.Error // why the request was answered 429 paced, and the wait; nil otherwise
	w                   *statusWriter // nil without Config.Log
	logged              bool
}

// describe names r's destination for the log: scheme, host and path only,
// never the query (crawlers put tokens there) nor userinfo.
func (rec *record) describe(r *http.Request, targets *target.Directory) {
	host := r.URL.Hostname()
	rec.url = r.URL.Scheme + "://" + r.URL.Host + r.URL.EscapedPath()
	if r.Method == http.MethodConnect {
		host, _, _ = net.SplitHostPort(r.Host)
		rec.url = r.Host
	}
	if host != "" {
		rec.target, _ = targets.Resolve(host)
	}
}

// logRequest writes rec's line once; later calls do nothing, so a tunnel
// can log when it is built and the deferred call not again when it ends.
func (g *Gateway) logRequest(ctx context.Context, rec *record) {
	if g.cfg.Log == nil || rec.logged {
		return
	}
	rec.logged = true
	status := rec.status
	if status == 0 && rec.w != nil {
		status = rec.w.status
	}
	// Room for every attribute, so that appending never grows it.
	var room [16]slog.Attr
	attrs := append(room[:0],
		slog.String("method", clip(rec.method, maxLogField)),
		slog.String("target", clip(rec.target, maxLogField)),
		slog.String("url", clip(rec.url, maxLogURL)),
		slog.Int("status", status),
		slog.Int("attempts", rec.attempts),
		slog.Int64("ms", g.cfg.Now().Sub(rec.start).Milliseconds()),
	)
	if rec.hedges > 0 {
		attrs = append(attrs, slog.Int("hedges", rec.hedges))
	}
	if rec.waited > 0 {
		// The first attempt waited for a paced fast exit's next token
		// rather than go at once to a far slower one.
		attrs = append(attrs, slog.Int64("reserved_wait_ms", rec.waited.Milliseconds()))
	}
	// The route id is the operator's, bounded by the list's line length,
	// and kept whole so that it can be searched for.
	if rec.route != "" {
		attrs = append(attrs, slog.String("route", rec.route), slog.String("class", rec.class.String()))
	}
	if p := rec.paced; p != nil {
		// Which pacing held it back: the engine's, learned from the site's
		// own 429s and bans, or the operator's [[targets]] limits (rate,
		// concurrency, queue_full, politeness); and the wait it was told.
		by := "operator"
		if p.Reason == "learned" {
			by = "learned"
		}
		attrs = append(attrs, slog.String("pacing", by), slog.String("paced", p.Reason), slog.Int64("retry_after_ms", p.RetryAfter.Milliseconds()))
	}
	if rec.intercepted {
		attrs = append(attrs, slog.Bool("mitm", true))
	}
	if rec.session != "" {
		attrs = append(attrs, slog.String("session", clip(rec.session, maxLogField)))
	}
	if rec.user != "" {
		attrs = append(attrs, slog.String("user", clip(rec.user, maxLogField)))
	}
	// A record without a caller's pc: Logger.LogAttrs would walk the
	// stack for one on every request, for a source nobody logs.
	h := g.cfg.Log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r) // a log that cannot be written is no failure of the request
}

// Caps, in bytes, on what a log line quotes of a client's request: its
// request line and headers may take up to a megabyte (the servers'
// http.DefaultMaxHeaderBytes), which must not reach the log for every request.
const (
	maxLogURL   = 256 // scheme, host and path
	maxLogField = 128 // any other field
)

// clip is s cut to at most limit bytes on a UTF-8 boundary, marked with how
// many bytes were cut.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit
	// Back to the start of the rune cut through; no further than a rune's
	// length, so that invalid UTF-8 keeps its prefix too.
	for i := 1; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return fmt.Sprintf("%s…[%d bytes cut]", s[:n], len(s)-n)
}

// statusWriter remembers the status sent, for the log. Unwrap keeps
// http.ResponseController's Flush and Hijack working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// acquire leases a route for an attempt; the error is what the client is
// told when there is none. The attempt timeout caps the lease's deadline.
// mayWait: the caller waits out the lease's Delay (engine.Request.MayWait).
func (g *Gateway) acquire(s *settings, ctl control, target string, avoid []string, mayWait bool) (engine.Lease, *route.Exit, error) {
	now := g.cfg.Now()
	l, err := g.engine.Acquire(now, engine.Request{
		Target: target, Session: ctl.session, Labels: ctl.labels, Avoid: avoid, Timeout: g.cfg.AttemptTimeout, Strict: ctl.strict,
		BindLater: true, // a session binds where its first request succeeded (Gateway.bind)
		MayWait:   mayWait,
	})
	if err != nil {
		if errors.Is(err, engine.ErrNoRoute) || errors.Is(err, engine.ErrBusy) {
			d, _ := g.engine.ReadyIn(now)
			err = &unavailableError{err: err, retryAfter: d}
		}
		return engine.Lease{}, nil, err
	}
	x := s.routes.Exit(l.Route)
	if x == nil {
		// The engine knows a route this gateway was not given: it carries
		// nothing, so the lease is released without evidence.
		g.giveBack(l)
		return engine.Lease{}, nil, fmt.Errorf("route %s has no dialer in this gateway", l.Route)
	}
	if x.Route().Gateway != nil {
		if x, err = g.subExit(x, s, l, ctl); err != nil {
			g.giveBack(l)
			return engine.Lease{}, nil, err
		}
	}
	return l, x, nil
}

// eligible reports whether l's route is usable for its target by its
// health alone: what a strict request asks of a lease taken in panic or
// as the least bad. It reads the route's status, which allocates: only
// such leases of strict requests pay for it.
func (g *Gateway) eligible(l engine.Lease) bool {
	st, ok := g.engine.Route(l.Route)
	if !ok || !st.Health.State.Usable() {
		return false
	}
	for _, p := range st.Targets {
		if p.Target == l.Target {
			return p.Health.State.Usable()
		}
	}
	return true
}

// report tells the engine how an attempt ended. An unknown lease means the
// engine already reaped it as expired; nothing is left to do.
func (g *Gateway) report(l engine.Lease, o engine.Outcome) {
	g.engine.Report(g.cfg.Now(), l, o)
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveAttempt(l.Route, o.Class, o.Latency)
		if billed(o.Class) {
			g.charge(l.Route, 1, 0)
		}
	}
}

// giveBack ends a lease that carried nothing: no evidence, no attempt.
func (g *Gateway) giveBack(l engine.Lease) {
	g.engine.Report(g.cfg.Now(), l, engine.Outcome{Class: engine.Canceled})
}

// JudgeProbe classifies a probe's answer through routeID from target as
// users' answers there are judged (job.judge): the status's class, then
// the built-in and the target's own soft-ban signatures, then the
// lookalike detector, so that a pair cooled for a captcha page is not
// restored by probes served the same page with a 200. The detector
// rechecks the page against what the pair's and the target's users'
// answers taught it and learns nothing from it: a probe fetches one page
// again and again. resp's body may be read; what was read is put back.
func (g *Gateway) JudgeProbe(routeID, targetKey string, resp *http.Response) (engine.Class, time.Duration) {
	class, wait := route.ClassifyStatus(resp.StatusCode, resp.Header, g.cfg.Now())
	j := &job{target: targetKey, probe: true}
	if resp.Request != nil {
		j.url = *resp.Request.URL
	}
	j.judgeBy(g.current.Load().targets.PolicyOf(targetKey), g.lookalike)
	if err := j.judge(resp, routeID, &class); err != nil {
		return engine.TargetReset, 0
	}
	return class, wait
}

// hostOnly is host without a port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// observeRequest tells the Observer how a request that got a route ended:
// of its attempts after the first, hedges were started beside one in
// flight, the others after a failure or a deadline.
func (g *Gateway) observeRequest(method string, class engine.Class, attempts, hedges int, start time.Time) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveRequest(method, class, attempts-1-hedges, hedges, g.cfg.Now().Sub(start))
	}
}

// unavailableError is the engine's ErrNoRoute or ErrBusy with the
// engine's estimate of when a route could take the request
// (Engine.ReadyIn), which the 503 passes on as Retry-After.
type unavailableError struct {
	err        error
	retryAfter time.Duration // 0 when unknown
}

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// acquireError answers a request for which no route could be leased,
// noting a paced one's reason in rec (nil: none kept).
func acquireError(w http.ResponseWriter, rec *record, err error) {
	code := "no_route"
	switch {
	case errors.Is(err, engine.ErrSessionRestartRequired):
		code = "session_restart_required"
	case errors.Is(err, engine.ErrBusy):
		code = "busy"
	case errors.Is(err, engine.ErrNoMatch):
		code = "no_matching_route"
	}
	var paced *pacing.Error
	switch {
	case errors.As(err, &paced):
		tooSoon(w, rec, paced)
		return
	case errors.Is(err, engine.ErrPaced):
		// The exits are at the rates the target's own 429s taught.
		wait := time.Second
		if pe, ok := errors.AsType[*engine.PacedError](err); ok {
			wait = pe.RetryAfter
		}
		tooSoon(w, rec, &pacing.Error{Reason: "learned", RetryAfter: wait})
		return
	}
	if u, ok := errors.AsType[*unavailableError](err); ok {
		// Refused work should come back later, not be dropped: in whole
		// seconds rounded up (RFC 9110 §10.2.3), at least one.
		w.Header().Set("Retry-After", strconv.Itoa(engine.RetryAfterSeconds(u.retryAfter)))
	}
	fail(w, http.StatusServiceUnavailable, code, "switchyard: "+code)
}

// Response headers of the gateway's own making.
const (
	headerRoute    = "X-Switchyard-Route"
	headerAttempts = "X-Switchyard-Attempts"
	headerClass    = "X-Switchyard-Class"
	headerPrefix   = "X-Switchyard-" // the gateway's own headers, canonical
	headerError    = "X-Switchyard-Error"
)

// fail answers with a one-line body naming what went wrong.
func fail(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set(headerError, code)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

func badRequest(w http.ResponseWriter, reason string) {
	fail(w, http.StatusBadRequest, "bad_request", "switchyard: "+reason)
}

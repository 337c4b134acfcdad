// Package gateway is Switchyard's forward proxy (SPEC §1.1): it takes
// absolute-form HTTP requests and CONNECT tunnels from unmodified clients
// and runs each through the attempt loop — lease a route from the engine,
// carry the attempt through it, classify the outcome, report it, and retry
// on another route when the rules, the budget and the method allow.
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// Config tunes the gateway. Zero fields mean the documented defaults.
type Config struct {
	// MaxAttempts caps the attempts of one request, the first included.
	// Default 3.
	MaxAttempts int
	// AttemptTimeout bounds one attempt from the dial to the end of the
	// response headers (for CONNECT: until the tunnel is built). Default 30s.
	AttemptTimeout time.Duration
	// Timeouts bounds the phases of reaching a target through a route; zero
	// fields get route's defaults.
	Timeouts route.Timeouts
	// RetryBody is the largest request body buffered so that a retry can
	// resend it. Larger bodies stream once and are never retried.
	// Default 1 MiB.
	RetryBody int64
	// RetryRatio is the pool-wide retry budget: retries may be at most
	// RetryRatio × the requests of the last ~10s, plus a floor of 10, so a
	// failing pool cannot turn into a retry storm (SPEC §2.4). Default 0.2.
	RetryRatio float64
	// ProxyTLS holds the roots that HTTPS proxies are verified against; nil
	// means the system's. Tests set it to trust fake proxies.
	ProxyTLS *tls.Config
	// Now is the clock for the engine's timeline and the retry budget.
	// Default time.Now.
	Now func() time.Time
	// Observer is told of every attempt and every request that got a
	// route, for metrics; nil means none.
	Observer Observer
	// Admission refuses internal destinations (SPEC §4); nil means no
	// checks. The host as written is checked before a route is leased; on
	// Direct routes every resolved address is checked again at connect
	// time, so DNS rebinding cannot slip past. Proxy routes resolve the
	// target at the proxy, so only the written host is checked for them,
	// unless ResolveProxyTargets.
	Admission *guard.Admission
	// ResolveProxyTargets also resolves each target name at admission
	// and refuses it if an address is blocked, for the proxy routes whose
	// connections the dial-time check never sees. A failed lookup is left
	// for the route to meet. Needs Admission.
	ResolveProxyTargets bool
	// Resolver does those lookups; nil means net.DefaultResolver.
	Resolver guard.Resolver
	// Users, when not empty, are the only clients let through: every
	// request must carry their Basic Proxy-Authorization (SPEC §1.1).
	// Empty means no client authentication. Update replaces them.
	Users map[string]User
	// Targets name the target of each host and hold the operator's
	// per-target settings (probe path, block signatures, pacing); nil
	// means registrable domains and no settings. Update replaces them.
	Targets *target.Rules
	// MaxPacedTargets bounds the targets, and route×target pairs, whose
	// pacing state is kept (LRU). Default 10000.
	MaxPacedTargets int
	// Log receives one Info line per request (per CONNECT: when the tunnel
	// is built or fails); nil means no request logs. Lines never carry
	// credentials or query strings, where crawlers put tokens.
	Log *slog.Logger
}

// Observer receives what the gateway did; admin.Metrics implements it.
type Observer interface {
	ObserveAttempt(route string, class engine.Class, latency time.Duration)
	ObserveRequest(method string, class engine.Class, retries int)
}

// Defaults applied by New to zero fields.
const (
	defaultMaxAttempts    = 3
	defaultAttemptTimeout = 30 * time.Second
	defaultRetryBody      = 1 << 20
	defaultRetryRatio     = 0.2
)

func (c Config) withDefaults() Config {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = defaultAttemptTimeout
	}
	if c.RetryBody <= 0 {
		c.RetryBody = defaultRetryBody
	}
	if c.RetryRatio <= 0 {
		c.RetryRatio = defaultRetryRatio
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
	cfg    Config
	engine *engine.Engine
	budget *retryBudget
	pacer  *guard.Pacer

	// current is what Update may change, swapped whole: a request reads it
	// once and keeps that view to its end.
	current atomic.Pointer[settings]
	updates sync.Mutex // serializes Update

	origins sync.Map // target key → the host (with port) last requested for it, for probes
}

// exit is one route with the transport that carries absolute-form
// requests through it, built once so connections to the route are reused.
type exit struct {
	route     *route.Route
	transport *http.Transport
}

// New returns a gateway over routes, which must already have been added to
// e (with r.Spec()): the engine picks among them, the gateway dials them.
func New(cfg Config, e *engine.Engine, routes []*route.Route) (*Gateway, error) {
	cfg = cfg.withDefaults()
	g := &Gateway{cfg: cfg, engine: e, budget: newRetryBudget(cfg.RetryRatio)}
	// Pacing waits on real timers, so it reads the real clock too.
	g.pacer = guard.NewPacer(guard.PacerConfig{Limits: g.paceOf, MaxTargets: cfg.MaxPacedTargets})
	if err := g.Update(routes, cfg.Users, cfg.Targets); err != nil {
		return nil, err
	}
	return g, nil
}

// transport builds the http.Transport of route r. HTTP and HTTPS proxies
// get absolute-form requests (Go adds the route's Proxy-Authorization);
// SOCKS5 and Direct routes dial the target through route.DialTarget. Every
// dial of a proxy fails with a *route.Error, so attempts classify alike
// whatever the scheme.
func (g *Gateway) transport(r *route.Route) (*http.Transport, error) {
	t := &http.Transport{
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// The client's Accept-Encoding goes through untouched; the answer
		// must reach it as the target sent it.
		DisableCompression: true,
	}
	switch r.Scheme {
	case route.HTTP, route.HTTPS:
		if r.URL == nil {
			return nil, fmt.Errorf("gateway: route %s has no proxy address", r.ID)
		}
		t.Proxy = http.ProxyURL(r.URL)
		t.DialContext = g.dialProxy(r)
		// With an https:// proxy, Go dials the proxy through DialTLSContext.
		t.DialTLSContext = g.dialProxyTLS(r)
	case route.SOCKS5, route.Direct:
		t.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return g.dialer(addr).DialTarget(ctx, r, addr)
		}
	default:
		return nil, fmt.Errorf("gateway: route %s: unsupported scheme %q", r.ID, r.Scheme)
	}
	return t, nil
}

// dialer dials addr ("host:port") through a route, checking the addresses
// a Direct route connects to unless the host is allow-listed by name.
func (g *Gateway) dialer(addr string) route.Dialer {
	d := route.Dialer{Timeouts: g.cfg.Timeouts, TLS: g.cfg.ProxyTLS}
	if a := g.cfg.Admission; a != nil {
		if host, _, _ := net.SplitHostPort(addr); !a.AllowsHost(host) {
			d.Control = a.Control()
		}
	}
	return d
}

// admit checks the target host as the client wrote it (and, with
// ResolveProxyTargets, the addresses it resolves to), before any route is
// leased; a refusal is answered 403 and nothing is counted.
func (g *Gateway) admit(ctx context.Context, w http.ResponseWriter, host string) bool {
	a := g.cfg.Admission
	if a == nil {
		return true
	}
	var err error
	if g.cfg.ResolveProxyTargets {
		err = a.CheckResolved(ctx, g.cfg.Resolver, host) // CheckHost, then the addresses
	} else {
		err = a.CheckHost(host)
	}
	if blocked := refusal(err); blocked != nil {
		blockedDestination(w, blocked)
		return false
	}
	return true
}

// blockedDestination answers a request whose target admission refused.
func blockedDestination(w http.ResponseWriter, err error) {
	fail(w, http.StatusForbidden, "blocked_destination", "switchyard: "+err.Error())
}

// refusal returns the admission refusal in err's chain, or nil.
func refusal(err error) *guard.Error {
	var e *guard.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// dialProxy connects to r's proxy, naming failures as DialTarget would.
func (g *Gateway) dialProxy(r *route.Route) func(context.Context, string, string) (net.Conn, error) {
	dial := g.cfg.Timeouts.Dial
	if dial <= 0 {
		dial = 5 * time.Second
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dial}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			phase := route.PhaseDial
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
				phase = route.PhaseDialTimeout
			}
			return nil, &route.Error{Phase: phase, Route: r.ID, Err: err}
		}
		return c, nil
	}
}

// dialProxyTLS connects to an HTTPS proxy and completes TLS with it,
// verifying the proxy's name from the route's URL.
func (g *Gateway) dialProxyTLS(r *route.Route) func(context.Context, string, string) (net.Conn, error) {
	dial := g.dialProxy(r)
	handshake := g.cfg.Timeouts.Handshake
	if handshake <= 0 {
		handshake = 5 * time.Second
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{}
		if g.cfg.ProxyTLS != nil {
			cfg = g.cfg.ProxyTLS.Clone()
		}
		cfg.ServerName = r.URL.Hostname()
		cfg.NextProtos = nil // absolute-form requests are HTTP/1.1
		tc := tls.Client(c, cfg)
		hctx, cancel := context.WithTimeout(ctx, handshake)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			c.Close()
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, &route.Error{Phase: route.PhaseHandshake, Route: r.ID, Err: err}
		}
		return tc, nil
	}
}

// Close closes the idle upstream connections of every route. Requests and
// tunnels in progress are not cut.
func (g *Gateway) Close() {
	for _, x := range g.current.Load().exits {
		x.transport.CloseIdleConnections()
	}
}

// ServeHTTP is the forward proxy: CONNECT builds a tunnel, absolute-form
// http:// requests are performed and observed; anything else is the
// client's mistake and answered 400. Client auth comes first, so that a
// stranger gets nothing leased and nothing counted.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := g.current.Load()
	rec := &record{method: r.Method, start: g.cfg.Now()}
	if g.cfg.Log != nil {
		rec.describe(r, s.targets)
		sw := &statusWriter{ResponseWriter: w}
		w, rec.w = sw, sw
		defer g.logRequest(r.Context(), rec)
	}
	var user engine.Labels
	if s.users != nil {
		name, labels, ok := s.users.authenticate(r.Header)
		if !ok {
			challenge(w)
			return
		}
		rec.user, user = name, labels
	}
	ctl, err := parseControl(r.Header)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	rec.session = ctl.session
	if s.users != nil {
		if ctl.labels, err = constrain(rec.user, user, ctl.labels); err != nil {
			fail(w, http.StatusForbidden, "label_conflict", "switchyard: "+err.Error())
			return
		}
	}
	if r.Method == http.MethodConnect {
		g.serveConnect(w, r, s, ctl, rec)
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

// record is what a request's log line says, filled in as it is served.
// Owner: the request's goroutine.
type record struct {
	method, target, url string
	user, session       string
	start               time.Time
	route               string // "" until a route was leased
	class               engine.Class
	attempts            int
	status              int           // set when the answer bypasses w (a hijacked CONNECT)
	w                   *statusWriter // nil without Config.Log
	logged              bool
}

// describe names r's destination for the log: scheme, host and path only,
// never the query (crawlers put tokens there) nor userinfo.
func (rec *record) describe(r *http.Request, targets *target.Rules) {
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
	attrs := []slog.Attr{
		slog.String("method", rec.method),
		slog.String("target", rec.target),
		slog.String("url", rec.url),
		slog.Int("status", status),
		slog.Int("attempts", rec.attempts),
		slog.Int64("ms", g.cfg.Now().Sub(rec.start).Milliseconds()),
	}
	if rec.route != "" {
		attrs = append(attrs, slog.String("route", rec.route), slog.String("class", rec.class.String()))
	}
	if rec.session != "" {
		attrs = append(attrs, slog.String("session", rec.session))
	}
	if rec.user != "" {
		attrs = append(attrs, slog.String("user", rec.user))
	}
	g.cfg.Log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
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
// told when there is none.
func (g *Gateway) acquire(s *settings, ctl control, target string, avoid []string) (engine.Lease, *exit, error) {
	l, err := g.engine.Acquire(g.cfg.Now(), engine.Request{Target: target, Session: ctl.session, Labels: ctl.labels, Avoid: avoid})
	if err != nil {
		return engine.Lease{}, nil, err
	}
	x, ok := s.exits[l.Route]
	if !ok {
		// The engine knows a route this gateway was not given: it carries
		// nothing, so the lease is released without evidence.
		g.giveBack(l)
		return engine.Lease{}, nil, fmt.Errorf("route %s has no dialer in this gateway", l.Route)
	}
	return l, x, nil
}

// report tells the engine how an attempt ended. An unknown lease means the
// engine already reaped it as expired; nothing is left to do.
func (g *Gateway) report(l engine.Lease, o engine.Outcome) {
	g.engine.Report(g.cfg.Now(), l, o)
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveAttempt(l.Route, o.Class, o.Latency)
	}
}

// giveBack ends a lease that carried nothing: no evidence, no attempt.
func (g *Gateway) giveBack(l engine.Lease) {
	g.engine.Report(g.cfg.Now(), l, engine.Outcome{Class: engine.Canceled})
}

// ProbeURL is the page a route×target probe should fetch for a target key:
// the target's probe path (default "/") on the host of the last
// absolute-form request for it, else of the last CONNECT, else the key
// itself. A CONNECT target is probed over plain HTTP: any answer shows the
// route reaches the site, and a ban or captcha page shows it is refused.
func (g *Gateway) ProbeURL(target string) string {
	host := target
	if v, ok := g.origins.Load(target); ok {
		host = v.(string)
	}
	path := "/"
	if _, p := g.current.Load().targets.Resolve(hostOnly(host)); p != nil && p.ProbePath != "" {
		path = p.ProbePath
	}
	return "http://" + host + path
}

// hostOnly is host without a port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// noteOrigin remembers host as where target was last asked for, for
// probes. Most requests repeat the host already known: those only read.
func (g *Gateway) noteOrigin(target, host string) {
	if v, ok := g.origins.Load(target); !ok || v.(string) != host {
		g.origins.Store(target, host)
	}
}

// observeRequest tells the Observer how a request that got a route ended.
func (g *Gateway) observeRequest(method string, class engine.Class, attempts int) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveRequest(method, class, attempts-1)
	}
}

// acquireError answers a request for which no route could be leased.
func acquireError(w http.ResponseWriter, err error) {
	code := "no_route"
	switch {
	case errors.Is(err, engine.ErrSessionRestartRequired):
		code = "session_restart_required"
	case errors.Is(err, engine.ErrBusy):
		code = "busy"
	case errors.Is(err, engine.ErrNoMatch):
		code = "no_matching_route"
	}
	var paced *guard.PaceError
	switch {
	case errors.As(err, &paced):
		tooSoon(w, paced)
		return
	case errors.Is(err, engine.ErrPaced):
		// The exits are at the rates the target's own 429s taught.
		wait := time.Second
		if pe, ok := errors.AsType[*engine.PacedError](err); ok {
			wait = pe.RetryAfter
		}
		tooSoon(w, &guard.PaceError{Reason: "learned", RetryAfter: wait})
		return
	}
	fail(w, http.StatusServiceUnavailable, code, "switchyard: "+code)
}

// Response headers of the gateway's own making.
const (
	headerRoute    = "X-Switchyard-Route"
	headerAttempts = "X-Switchyard-Attempts"
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

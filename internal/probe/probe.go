// Package probe answers the engine's probe jobs, off users' traffic:
// half-open routes are tested before they get work again.
package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
)

// Config tunes the prober; zero fields mean the defaults.
type Config struct {
	Concurrency int            // probes at once; default 8
	Timeout     time.Duration  // one probe, end to end; default 10s
	Timeouts    route.Timeouts // dial and handshake through the route
	// TargetURL is the page a route×target probe fetches for a target key;
	// default "http://<target>/". The gateway supplies the origin it last
	// saw for the key (the key is a registrable domain, without a port).
	TargetURL func(target string) string
	// NeutralURL, when set, is an http:// page that every route should be
	// able to fetch: neutral probes GET it through the route, which also
	// checks the route's credentials. Unset, a neutral probe is a TCP check
	// of the proxy.
	NeutralURL string
	ProxyTLS   *tls.Config      // roots for HTTPS proxies
	Now        func() time.Time // clock; nil → time.Now
}

// Prober runs probe jobs with bounded concurrency.
type Prober struct {
	// immutable
	e   *engine.Engine
	cfg Config
	sem chan struct{}

	routes atomic.Pointer[map[string]*route.Route] // by id; replaced whole by SetRoutes

	wg sync.WaitGroup // running probes
}

// New returns a prober for the engine's routes.
func New(e *engine.Engine, routes []*route.Route, cfg Config) *Prober {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.TargetURL == nil {
		cfg.TargetURL = func(target string) string { return "http://" + target + "/" }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Prober{e: e, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}
	p.SetRoutes(routes)
	return p
}

// SetRoutes replaces the routes probes go through, after a reload; a job
// for a route no longer listed ends without evidence.
func (p *Prober) SetRoutes(routes []*route.Route) {
	byID := make(map[string]*route.Route, len(routes))
	for _, r := range routes {
		byID[r.ID] = r
	}
	p.routes.Store(&byID)
}

// Run drains the engine's probe jobs every interval until ctx is done,
// then waits for the probes still running.
func (p *Prober) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	defer p.wg.Wait()
	var jobs []engine.ProbeJob
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			jobs = p.Drain(ctx, jobs[:0])
		}
	}
}

// Drain starts every pending probe job, waiting for a free slot when
// Concurrency probes are running, and returns the jobs it started (dst
// reused). Every job is answered with ReportProbe, canceled ones too.
func (p *Prober) Drain(ctx context.Context, dst []engine.ProbeJob) []engine.ProbeJob {
	dst = p.e.ProbeJobs(dst)
	for _, job := range dst {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			p.e.ReportProbe(p.cfg.Now(), job, engine.Outcome{Class: engine.Canceled})
			continue
		}
		p.wg.Add(1)
		go func() {
			defer func() { <-p.sem; p.wg.Done() }()
			o := p.probe(ctx, job)
			p.e.ReportProbe(p.cfg.Now(), job, o)
		}()
	}
	return dst
}

// Wait blocks until the probes started so far have finished.
func (p *Prober) Wait() { p.wg.Wait() }

// probe runs one job: a route alone (a neutral check of the exit) or the
// route against its target (the target's page through the route).
func (p *Prober) probe(ctx context.Context, job engine.ProbeJob) engine.Outcome {
	r := (*p.routes.Load())[job.Route]
	if r == nil {
		return engine.Outcome{Class: engine.Canceled} // the route left with a reload: no evidence
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	start := p.cfg.Now()
	var class engine.Class
	var wait time.Duration
	switch {
	case job.Target == "" && p.cfg.NeutralURL != "":
		class, wait = p.fetch(ctx, r, p.cfg.NeutralURL)
	case job.Target == "":
		class = p.neutral(ctx, r)
	default:
		class, wait = p.fetch(ctx, r, p.cfg.TargetURL(job.Target))
	}
	return engine.Outcome{Class: class, Latency: p.cfg.Now().Sub(start), RetryAfter: wait}
}

// neutral checks the exit itself. With no neutral page to fetch, that is a
// TCP connection to the proxy: it tells a dead or hanging exit from a live
// one, not a bad password (users' traffic reports 407s). The gateway's own
// connection (direct) has nothing to check.
func (p *Prober) neutral(ctx context.Context, r *route.Route) engine.Class {
	if r.Scheme == route.Direct {
		return engine.OK
	}
	timeouts := p.cfg.Timeouts
	d := net.Dialer{Timeout: timeouts.Dial}
	if d.Timeout <= 0 {
		d.Timeout = 5 * time.Second
	}
	conn, err := d.DialContext(ctx, "tcp", r.URL.Host)
	if err != nil {
		if ctx.Err() != nil {
			return engine.ProxyTimeout
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return engine.ProxyTimeout
		}
		return engine.ProxyConnectFailed
	}
	conn.Close()
	return engine.OK
}

// fetch GETs page through r and classifies the answer as users' traffic
// would be.
func (p *Prober) fetch(ctx context.Context, r *route.Route, page string) (engine.Class, time.Duration) {
	u, err := url.Parse(page)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return engine.Canceled, 0 // no page to probe: no evidence
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	conn, err := route.DialTarget(ctx, r, addr, p.cfg.Timeouts, p.cfg.ProxyTLS)
	if err != nil {
		return route.Classify(err), 0
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, page, nil)
	if err != nil {
		return engine.Canceled, 0
	}
	req.Header.Set("User-Agent", "switchyard-probe")
	req.Close = true
	if err := req.Write(conn); err != nil {
		return engine.TargetReset, 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		if ctx.Err() != nil {
			return engine.TargetTimeout, 0
		}
		return engine.TargetReset, 0
	}
	resp.Body.Close()
	return route.ClassifyStatus(resp.StatusCode, resp.Header, p.cfg.Now())
}

// Package probe answers the engine's probe jobs, off users' traffic:
// half-open routes are tested before they get work again. Probes leave
// through the same Exits as users' traffic, admission included, and are
// classified alike.
package probe

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/route"
)

// Exits gives the way out of each route, by id: nil for a route no longer
// carried. The gateway is one, so that probes leave as users' traffic does.
type Exits interface {
	Exit(route string) *route.Exit
}

// Config tunes the prober; zero fields mean the defaults.
type Config struct {
	Concurrency int           // probes at once; default 8
	Timeout     time.Duration // one probe, end to end; default 10s
	// TargetURL is the page a route×target probe fetches for a target key;
	// default "http://<target>/". The gateway supplies the origin it last
	// saw for the key (the key is a registrable domain, without a port).
	TargetURL func(target string) string
	// NeutralURL, when set, is an http:// page that every route should be
	// able to fetch: neutral probes GET it through the route, which also
	// checks the route's credentials. Unset, a neutral probe of a proxy
	// route asks it for a tunnel to NeutralAuthority, which checks the
	// credentials too, so that a route whose proxy answers 407 stays out
	// after its cooldown instead of coming back to fail users again.
	NeutralURL string
	// NeutralAuthority is the host:port a neutral probe's CONNECT names,
	// "" while none is known: a site users' traffic reached, at 443, the
	// port every proxy tunnels to (Squid's default refuses others before
	// it looks at credentials). It meets Admit. Nil, or "", or refused by
	// Admit: the CONNECT names reservedAuthority.
	NeutralAuthority func() string
	// Observer is told of every probe's outcome but Canceled; nil means
	// none.
	Observer Observer
	// Admit is the admission users' traffic meets before it is dialled
	// (docs/security.md): a page whose authority it refuses is not fetched,
	// on any route type, and one it admits is fetched from the authority it
	// returns, as admission read it. Nil admits every page as written;
	// Direct routes' Exits still check each address at connect time.
	Admit func(ctx context.Context, authority string) (string, error)
	// Judge classifies a route×target probe's answer through route for
	// target as users' answers there are (the gateway's soft-ban
	// signatures and lookalike detector included), and says how long a
	// Retry-After asks to wait; nil classifies by status alone. The
	// neutral page's answer is always by status.
	Judge func(route, target string, resp *http.Response) (engine.Class, time.Duration)
	Now   func() time.Time // clock; nil → time.Now
}

// Observer is told how probes ended; admin.Metrics implements it, to raise
// the alarm of a route whose proxy refuses its credentials.
type Observer interface {
	ObserveProbe(route string, class engine.Class)
}

// Prober runs probe jobs with bounded concurrency.
type Prober struct {
	// immutable
	e     *engine.Engine
	exits Exits
	cfg   Config
	sem   chan struct{}

	wg sync.WaitGroup // running probes
}

// New returns a prober for the engine's routes, which go out through
// exits.
func New(e *engine.Engine, exits Exits, cfg Config) *Prober {
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
	return &Prober{e: e, exits: exits, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}
}

// Run drains the engine's probe jobs every interval until ctx is done,
// then waits for the probes still running.
func (p *Prober) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	defer p.wg.Wait()
	// At once, not a tick later: a gateway that starts has every route to
	// check before users' traffic.
	jobs := p.Drain(ctx, nil)
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
			if p.cfg.Observer != nil && o.Class != engine.Canceled {
				p.cfg.Observer.ObserveProbe(job.Route, o.Class)
			}
		}()
	}
	return dst
}

// Wait blocks until the probes started so far have finished.
func (p *Prober) Wait() { p.wg.Wait() }

// probe runs one job: a route alone (a neutral check of the exit) or the
// route against its target (the target's page through the route). A job
// for a route no longer carried ends without evidence.
func (p *Prober) probe(ctx context.Context, job engine.ProbeJob) engine.Outcome {
	x := p.exits.Exit(job.Route)
	if x == nil {
		return engine.Outcome{Class: engine.Canceled}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	start := p.cfg.Now()
	var class engine.Class
	var wait time.Duration
	switch {
	case job.Target == "" && p.cfg.NeutralURL != "":
		class, wait = p.fetch(ctx, x, p.cfg.NeutralURL, job.Route, "")
	case job.Target == "":
		class = p.neutral(ctx, x)
	default:
		class, wait = p.fetch(ctx, x, p.cfg.TargetURL(job.Target), job.Route, job.Target)
	}
	return engine.Outcome{Class: class, Latency: p.cfg.Now().Sub(start), RetryAfter: wait}
}

// reservedAuthority is what a neutral probe's CONNECT names when no site
// is known or admitted (a fresh start): a name reserved never to resolve
// (RFC 6761, .invalid), so that no proxy reaches anything, yet each must
// answer for the credentials first: 407 when it refuses them, a refusal
// of the tunnel when it took them. A TCP connection to the proxy, the
// check before, passed a proxy that refuses every password and one that
// takes connections and never answers, which then took users' first
// requests.
const reservedAuthority = "switchyard.invalid:443"

// neutral checks the exit alone: a proxy route by a CONNECT through it to
// NeutralAuthority, or to reservedAuthority with none known or admitted,
// which its credentials must pass. Direct, the gateway's own connection,
// has nothing to check. A tunnel the proxy refuses or cannot build
// (PhaseTunnel) is the route passing: the proxy took the credentials, and
// the site named is not what a neutral probe judges.
func (p *Prober) neutral(ctx context.Context, x *route.Exit) engine.Class {
	if x.Route().Scheme == route.Direct {
		return engine.OK
	}
	authority := ""
	if p.cfg.NeutralAuthority != nil {
		authority = p.cfg.NeutralAuthority()
	}
	if authority != "" && p.cfg.Admit != nil {
		var err error
		if authority, err = p.cfg.Admit(ctx, authority); err != nil {
			authority = ""
		}
	}
	if authority == "" {
		authority = reservedAuthority
	}
	var progress route.Progress
	conn, err := x.DialTarget(ctx, authority, &progress)
	if err == nil {
		conn.Close()
		return engine.OK
	}
	if e, ok := errors.AsType[*route.Error](err); ok && e.Phase == route.PhaseTunnel {
		return engine.OK
	}
	if errors.As(err, new(*admit.Error)) {
		return engine.Canceled
	}
	class, _ := route.Classify(err, &progress)
	return class
}

// fetch GETs page through x, routeID's exit, as users' traffic goes (an
// absolute-form request to an HTTP proxy), and classifies the outcome as
// the gateway does: for target's page, by Config.Judge. A destination
// admission refuses is no evidence, as for users.
func (p *Prober) fetch(ctx context.Context, x *route.Exit, page, routeID, target string) (engine.Class, time.Duration) {
	u, err := url.Parse(page)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return engine.Canceled, 0 // no page to probe: no evidence
	}
	if p.cfg.Admit != nil {
		if u.Host, err = p.cfg.Admit(ctx, u.Host); err != nil {
			return engine.Canceled, 0
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return engine.Canceled, 0
	}
	req.Header.Set("User-Agent", "switchyard-probe")
	var progress route.Progress
	resp, err := x.RoundTrip(req, &progress)
	if err != nil {
		if errors.As(err, new(*admit.Error)) {
			return engine.Canceled, 0
		}
		class, _ := route.Classify(err, &progress)
		return class, 0
	}
	defer resp.Body.Close()
	if target != "" && p.cfg.Judge != nil {
		return p.cfg.Judge(routeID, target, resp)
	}
	return route.ClassifyStatus(resp.StatusCode, resp.Header, p.cfg.Now())
}

// Package server runs one gateway process from a validated configuration:
// the engine over the routes, the forward proxy, the prober and sweeps, and
// the admin listener; and reloads it. The serve and demo commands share it.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/redisstore"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/cluster"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/fetchapi"
	"github.com/switchyard/switchyard/internal/frontdoor"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/probe"
	"github.com/switchyard/switchyard/internal/route"
)

// Listeners are where a Server listens; the configuration's addresses are
// the caller's to bind, so tests and the demo can pick free ports.
type Listeners struct {
	Proxy net.Listener // the forward proxy; required
	Admin net.Listener // the admin endpoints; nil for none
	API   net.Listener // the fetch API, gRPC and JSON; nil for none
}

// Probes leave through the gateway's exits.
var _ probe.Exits = (*gateway.Gateway)(nil)

// Server is a gateway ready to run. Run closes its listeners.
type Server struct {
	// immutable after New
	engine  *engine.Engine
	gateway *gateway.Gateway
	admin   *admin.Server    // nil without an admin listener
	api     *fetchapi.Server // nil without an API listener
	prober  *probe.Prober
	metrics *admin.Metrics
	shared  *redisstore.Store // nil with in-memory state
	cluster *cluster.Cluster  // nil outside a cluster
	ln      Listeners
	clients *clientListener // ln.Proxy, counted and capped
	log     *slog.Logger
	// started is the configuration the process started with: its
	// sections that only a restart applies are the ones in force.
	started *config.Config

	mu sync.Mutex // serializes Reload
	// pending names the sections of the last configuration reloaded that
	// differ from started's: a restart would apply them.
	pending atomic.Pointer[[]string]
	// source loads the configuration again, for ReloadFromSource; nil
	// until SetSource.
	source atomic.Pointer[func() (*config.Config, error)]
}

// New builds the engine, over in-memory or Redis-shared state as cfg says,
// and the gateway over cfg's routes. log receives the request lines, reload
// reports and shared-state outages; nil discards them. Redis out of reach
// is not an error: the gateway starts on local state and catches up.
func New(cfg *config.Config, ln Listeners, log *slog.Logger) (*Server, error) {
	if ln.Proxy == nil {
		return nil, errors.New("server: no proxy listener")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ecfg, err := cfg.Engine.EngineConfig()
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, log: log, started: cfg}
	var store engine.Store
	if cfg.State.Shared() {
		if s.shared, err = redisstore.Open(cfg.State.URL, redisstore.Options{
			Prefix: cfg.State.Prefix, Timeout: cfg.State.Timeout, Resync: cfg.State.Resync, PairTTL: ecfg.PairTTL, Log: log,
		}); err != nil {
			return nil, err
		}
		store = s.shared
	}
	e, err := engine.New(ecfg, store)
	if err != nil {
		s.closeShared()
		return nil, err
	}
	s.engine = e
	now := time.Now()
	routes := make([]*route.Route, len(cfg.RouteList))
	for i := range cfg.RouteList {
		r := &cfg.RouteList[i]
		if err := e.AddRoute(now, r.Spec()); err != nil {
			s.closeShared()
			return nil, err
		}
		routes[i] = r
	}
	s.restoreLearned(now)
	metrics := admin.NewMetrics(e, log)
	metrics.SetPerRoute(cfg.Metrics.PerRoute)
	metrics.WatchRestart(s.restartRequired)
	s.clients = newClientListener(ln.Proxy, cfg.Server.MaxClientConns, metrics)
	gcfg := gateway.Config{
		MaxAttempts:          cfg.Retry.MaxAttempts,
		AttemptTimeout:       cfg.Retry.AttemptTimeout,
		RequestTimeout:       cfg.Retry.RequestTimeout,
		MaxBodyBytes:         cfg.Retry.MaxBodyBytes,
		Budget:               engine.BudgetConfig{BudgetRatio: cfg.Retry.BudgetRatio, HedgeRatio: cfg.Retry.HedgeRatio},
		Observer:             metrics,
		Users:                gatewayUsers(cfg),
		Targets:              cfg.TargetRules(),
		MaxPacedTargets:      cfg.Pacing.MaxTargets,
		LearnedMaxWait:       cfg.Pacing.LearnedMaxWait,
		ResolveProxyTargets:  cfg.Security.ResolveProxyTargets,
		Log:                  log,
		MaxIdleUpstreamConns: cfg.Server.MaxIdleUpstreamConns,
		MaxUpstreamConns:     upstreamCap(cfg.Server.MaxUpstreamConns),
		MaxFetchBody:         cfg.Fetch.MaxResponseBytes,
		FeedbackTTL:          cfg.Fetch.FeedbackTTL,
	}
	if cfg.BlockPrivate() {
		gcfg.Admission = admit.New(cfg.Security.AllowPrefixes, cfg.Security.AllowHosts)
	}
	if roots := cfg.MITM.UpstreamRoots; roots != nil {
		gcfg.TargetTLS = &tls.Config{RootCAs: roots}
	}
	if gcfg.MITM, err = interception(cfg, log); err != nil {
		s.closeShared()
		return nil, err
	}
	inCluster := ln.API != nil && cfg.Cluster.ClusterConfig().Enabled()
	var forwarder *apiForwarder
	if inCluster {
		forwarder = &apiForwarder{}
		gcfg.Forwarder = forwarder
	}
	if s.gateway, err = gateway.New(gcfg, e, routes); err != nil {
		s.closeShared()
		return nil, err
	}
	metrics.WatchUpstreamConns(s.gateway.UpstreamConns)
	// Probes leave through the gateway's own exits, so they see what users'
	// traffic sees, admission included, and follow its reloads.
	s.prober = probe.New(e, s.gateway, probe.Config{
		TargetURL:        func(key string) string { return s.gateway.Targets().ProbeURL(key) },
		NeutralAuthority: func() string { return s.gateway.Targets().NeutralAuthority() },
		Judge:            s.gateway.JudgeProbe, NeutralURL: cfg.Probe.URL, Admit: s.gateway.Admit, Observer: metrics,
	})
	s.metrics = metrics
	aopts := admin.Options{
		Token: cfg.Admin.Token.Value(), Pprof: cfg.Admin.Pprof, RestartRequired: s.restartRequired, Reload: s.ReloadFromSource, Log: log,
		Fetcher: s.gateway, Budget: gcfg.Budget, SubExits: s.gateway.SubExits,
	}
	if s.shared != nil {
		aopts.StateAddr = s.shared.Addr()
		aopts.Degraded = s.shared.Healthy
		metrics.WatchState(func() admin.StateStats {
			st := s.shared.Stats()
			return admin.StateStats{Degraded: st.Degraded, Errors: st.Errors, Writes: st.Writes, Outages: st.Outages, Conflicts: st.Conflicts, RemoteChanges: st.RemoteNotes}
		})
	}
	node := cfg.Cluster.NodeID
	if inCluster {
		id, err := cluster.Identify(cfg.Cluster.NodeID, log)
		if err != nil {
			s.closeShared()
			return nil, err
		}
		node = id.ID
		if s.cluster, err = cluster.New(cfg.Cluster.ClusterConfig(), cluster.Options{
			Self: id.ID, Address: ln.API.Addr().String(), Local: func() cluster.Summary { return s.api.Summary() }, Log: log,
		}); err != nil {
			s.closeShared()
			return nil, err
		}
		aopts.Cluster = s.cluster
		metrics.WatchCluster(s.cluster)
		log.Info("cluster node", "node", id.ID, "id_from_host_name", id.Detected, "peers", len(cfg.Cluster.Peers), "dns", cfg.Cluster.DNS,
			"tls", cfg.Cluster.TLSCert != "")
		if t := s.cluster.ServerTLS(); t != nil {
			// Peers call over TLS (cluster.tls_*): the API serves it,
			// to users too.
			s.ln.API = tls.NewListener(ln.API, t)
		}
	}
	if node == "" {
		node = hostName()
	}
	if ln.Admin != nil {
		s.admin = admin.NewServer(e, s.gateway.Routes, metrics, aopts)
	}
	if ln.API != nil {
		f := cfg.Fetch
		s.api = fetchapi.New(s.gateway, e, fetchapi.Options{
			Node: node, MaxRequestBytes: f.MaxRequestBytes, BodyTimeout: cfg.Server.BodyTimeout, MaxBatch: f.MaxBatch, Concurrency: f.Concurrency,
			MaxConcurrency: f.MaxConcurrency, FeedbackTTL: f.FeedbackTTL, MaxFeedback: f.MaxFeedback, Log: log,
			Cluster: s.cluster, RequestTimeout: cfg.Retry.RequestTimeout, ProxyPort: portOf(ln.Proxy.Addr()),
		})
	}
	if forwarder != nil {
		forwarder.api.Store(s.api)
	}
	return s, nil
}

// interception is the gateway's TLS interception as cfg's [mitm] asks:
// nil when off; the CA loaded from the operator's files or from the state
// directory, generated there on first use.
func interception(cfg *config.Config, log *slog.Logger) (*gateway.MITM, error) {
	m := cfg.MITM
	if !m.Enabled {
		return nil, nil
	}
	opts := mitm.Options{CacheSize: m.CertCache}
	var ca *mitm.Authority
	var err error
	if m.CACert != "" {
		ca, err = mitm.Load(m.CACert, m.CAKey, opts)
	} else {
		var created bool
		if ca, created, err = mitm.LoadOrCreate(m.StateDir, opts); created {
			log.Warn("mitm: generated a local CA: clients must trust it (switchyard ca shows how)", "cert", ca.CertPath())
		}
	}
	if err != nil {
		return nil, err
	}
	log.Info("mitm: intercepting TLS in CONNECT tunnels", "ca", ca.CertPath(), "only", len(m.Only), "bypass", len(m.Bypass))
	return &gateway.MITM{Authority: ca, Only: m.Only, Bypass: m.Bypass, HandshakeTimeout: cfg.Server.HeaderTimeout, IdleTimeout: cfg.Server.IdleTimeout}, nil
}

// hostName names a gateway outside a cluster, and without cluster.node_id,
// in the fetch API's traces.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "local"
}

// closeShared closes the Redis client of a server that will not run.
func (s *Server) closeShared() {
	if s.shared != nil {
		s.shared.Close()
	}
}

// StateAddr is the shared state's Redis address (never its password), or
// "memory".
func (s *Server) StateAddr() string {
	if s.shared == nil {
		return "memory"
	}
	return s.shared.Addr()
}

// gatewayUsers are cfg's users as the gateway checks them; none means no
// client auth.
func gatewayUsers(cfg *config.Config) map[string]gateway.User {
	if len(cfg.Users) == 0 {
		return nil
	}
	users := make(map[string]gateway.User, len(cfg.Users))
	for _, u := range cfg.Users {
		users[u.Name] = gateway.User{Password: u.Password.Value(), PasswordHash: u.PasswordHash.Value(), Labels: u.LabelList}
	}
	return users
}

// Engine is the server's engine, for status views.
func (s *Server) Engine() *engine.Engine { return s.engine }

// Reload applies next's routes, target rules and users without a restart
// (docs/design/008-gateway.md): a route whose id is unchanged keeps all its
// evidence and state (its labels, max_inflight, weight and cost follow the
// new list); a new route joins as a candidate; a removed route drains (no
// new work, its requests in flight finish) and comes back if a later reload
// lists it again. Requests in flight keep the routes, users and rules they
// started with. Sections that need a restart are left as they are: every
// reload that leaves one different from the running process logs it, and
// /readyz and the metrics show it until a reload puts it back or a restart.
func (s *Server) Reload(next *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	listed := make([]*route.Route, len(next.RouteList))
	for i := range next.RouteList {
		listed[i] = &next.RouteList[i]
	}
	previous := s.gateway.Routes()
	routes, diff, err := previous.Next(listed)
	if err != nil {
		return err
	}
	if err := s.apply(diff); err != nil {
		return err
	}
	if err := s.gateway.Update(routes, gatewayUsers(next), next.TargetRules()); err != nil {
		return err
	}
	// A route whose proxy refused its credentials is warned of again if
	// it still is; one given other credentials, or removed, is no longer
	// counted as failing until its proxy refuses it again.
	s.metrics.ResetProxyAuth(func(id string) bool {
		x := routes.Exit(id)
		return x != nil && x == previous.Exit(id) // listed both times, dialled alike
	})
	if s.cluster != nil {
		s.cluster.SetPeers(next.Cluster.Peers, next.Cluster.DNS)
		if next.Cluster.DNS != "" {
			// A new name is resolved now, not at the next dns_interval;
			// a failure is logged and keeps the peers found last.
			ctx, cancel := context.WithTimeout(context.Background(), s.started.Cluster.CheckTimeout)
			s.cluster.Resolve(ctx)
			cancel()
		}
	}
	pending := restartOnly(s.started, next)
	for _, section := range pending {
		s.log.Warn("reload: this section needs a restart to change; the running one stays", "section", section)
	}
	s.pending.Store(&pending)
	s.log.Info("reloaded", "routes", routes.Listed(), "added", len(diff.Added)+len(diff.Returned), "updated", len(diff.Changed),
		"removed", len(diff.Removed), "targets", len(next.Targets), "users", len(next.Users))
	return nil
}

// apply tells the engine what a reload changes: new routes join as
// candidates, changed ones take their new spec, returning ones are
// restored, removed ones drain. A route the engine already knows is
// updated rather than added, so that a reload refused halfway through can
// be applied again.
func (s *Server) apply(d route.Diff) error {
	now := time.Now()
	for _, r := range d.Added {
		add := s.engine.AddRoute
		if _, known := s.engine.RouteSpec(r.ID); known {
			add = s.engine.UpdateRoute
		}
		if err := add(now, r.Spec()); err != nil {
			return err
		}
	}
	for _, r := range d.Changed {
		if err := s.engine.UpdateRoute(now, r.Spec()); err != nil {
			return err
		}
	}
	for _, r := range d.Returned {
		if err := s.engine.Restore(now, r.ID); err != nil {
			return err
		}
	}
	for _, r := range d.Removed {
		if err := s.engine.Drain(now, r.ID); err != nil {
			return err
		}
	}
	return nil
}

// SetSource sets how ReloadFromSource loads the configuration again (the
// serve command's file, environment and flags).
func (s *Server) SetSource(load func() (*config.Config, error)) { s.source.Store(&load) }

// ReloadFromSource is a reload as SIGHUP and POST /api/reload ask for it:
// the configuration loaded again from the source SetSource gave, then
// Reload. A configuration that does not load, or that Reload refuses, is
// refused whole and logged; the running one stays, and the error, naming
// the file and line or the key, is returned.
func (s *Server) ReloadFromSource() error {
	load := s.source.Load()
	if load == nil {
		return errors.New("no configuration source to reload from")
	}
	next, err := (*load)()
	if err == nil {
		err = s.Reload(next)
	}
	if err != nil {
		s.log.Error("reload refused; the running configuration stays", "err", err)
	}
	return err
}

// restartRequired names the sections the last reload could not apply.
func (s *Server) restartRequired() []string {
	if p := s.pending.Load(); p != nil {
		return *p
	}
	return nil
}

// restartOnly names the sections that differ between old and next but
// that only a restart applies: listeners, engine knobs, and what the
// gateway, prober and admin were built with.
func restartOnly(old, next *config.Config) []string {
	sections := []struct {
		name string
		a, b any
	}{
		{"listen", old.Listen, next.Listen},
		{"server", old.Server, next.Server},
		{"log", old.Log, next.Log},
		{"engine", old.Engine, next.Engine},
		{"retry", old.Retry, next.Retry},
		{"probe", old.Probe, next.Probe},
		{"security", old.Security, next.Security},
		{"admin", old.Admin, next.Admin},
		{"metrics", old.Metrics, next.Metrics},
		{"pacing", old.Pacing, next.Pacing},
		{"fetch", old.Fetch, next.Fetch},
		{"state", old.State, next.State},
		{"mitm", mitmSection(old), mitmSection(next)},
		{"cluster", restartOnlyCluster(old.Cluster), restartOnlyCluster(next.Cluster)},
	}
	var changed []string
	for _, s := range sections {
		if !reflect.DeepEqual(s.a, s.b) {
			changed = append(changed, s.name)
		}
	}
	return changed
}

// mitmSection is c's [mitm] as written: the parsed roots hold functions,
// which never compare equal.
func mitmSection(c *config.Config) config.MITM {
	m := c.MITM
	m.UpstreamRoots = nil
	return m
}

// restartOnlyCluster is c without what a reload applies: its peers and
// dns.
func restartOnlyCluster(c config.Cluster) config.Cluster {
	c.Peers, c.DNS = nil, ""
	return c
}

// server is what Run asks of a listener's server: net/http's, and the
// forward proxy's front door.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Run serves until ctx ends or a listener fails, then stops accepting and
// gives in-flight requests up to grace to finish. It returns the listener's
// error, or nil after ctx ended.
func (s *Server) Run(ctx context.Context, grace time.Duration) error {
	defer s.gateway.Close()
	limits := s.started.Server
	servers := []server{&frontdoor.Server{
		Handler:           newBodyLimits(limits).wrap(s.gateway),
		ReadHeaderTimeout: limits.HeaderTimeout,
		IdleTimeout:       limits.IdleTimeout,
		ConnState:         s.clients.trackState,
		ConnContext:       withConn,
		Log:               s.log,
	}}
	listeners := []net.Listener{s.clients}
	if s.admin != nil {
		defer s.admin.Close()
		adm := &http.Server{Handler: s.admin.Handler(), ReadHeaderTimeout: limits.HeaderTimeout, IdleTimeout: limits.IdleTimeout}
		// The dashboard's event streams never go idle: ended at once, so
		// that shutdown does not wait out its grace for them.
		adm.RegisterOnShutdown(s.admin.EndStreams)
		servers = append(servers, adm)
		listeners = append(listeners, s.ln.Admin)
	}
	if s.api != nil {
		// Closed after the servers' shutdown: gRPC streams still open
		// when the grace runs out end there.
		defer s.api.Close()
		servers = append(servers, &http.Server{Handler: s.api.Handler(), Protocols: fetchapi.Protocols(), ReadHeaderTimeout: limits.HeaderTimeout, IdleTimeout: limits.IdleTimeout})
		listeners = append(listeners, s.ln.API)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.background(ctx) }()
	failed := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	shutdown, stop := context.WithTimeout(context.Background(), grace)
	defer stop()
	for _, srv := range servers {
		if srv.Shutdown(shutdown) != nil {
			srv.Close() // grace ran out: cut what is left
		}
	}
	cancel()
	wg.Wait()
	return err
}

// background does the engine's timed work until ctx ends: a sweep a second,
// the prober answering probe jobs, the shared store's notifications, and
// the saves of [pacing] learned_file, the last as it ends.
func (s *Server) background(ctx context.Context) {
	if s.shared != nil {
		defer s.shared.Close()
		stored := make(chan struct{})
		go func() { s.shared.Run(ctx); close(stored) }()
		defer func() { <-stored }()
	}
	if s.cluster != nil {
		defer s.cluster.Close()
		checked := make(chan struct{})
		go func() { s.cluster.Run(ctx); close(checked) }()
		defer func() { <-checked }()
	}
	done := make(chan struct{})
	go func() { s.prober.Run(ctx, time.Second); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	save := time.NewTicker(learnedSaveEvery)
	defer save.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			s.saveLearned(time.Now())
			return
		case now := <-tick.C:
			s.engine.Sweep(now)
		case now := <-save.C:
			s.saveLearned(now)
		}
	}
}

// upstreamCap is server.max_upstream_conns as the gateway takes it: 0, no
// cap, is negative there, where 0 means its default.
func upstreamCap(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

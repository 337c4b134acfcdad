// Package server runs one gateway process: the engine over a route list,
// the forward proxy, the prober and sweeps, and the admin listener. The
// serve and demo commands share it.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/probe"
	"github.com/switchyard/switchyard/internal/route"
)

// Options says where a Server listens.
type Options struct {
	Proxy      net.Listener // the forward proxy; required
	Admin      net.Listener // the admin endpoints; nil for none
	AdminToken string       // bearer token for admin actions; "" makes the admin read-only
	// NeutralURL is the http:// page neutral probes fetch through each
	// route; "" makes them a TCP check of the proxy.
	NeutralURL string
	// Admission refuses internal destinations (SPEC §4); nil for none.
	Admission *guard.Admission
	// Users are the clients allowed through the proxy; empty means no
	// client auth.
	Users map[string]gateway.User
	// Log receives the gateway's request lines; nil means none.
	Log *slog.Logger
}

// Server is a gateway ready to run. Run closes its listeners.
type Server struct {
	// immutable after New
	engine  *engine.Engine
	gateway *gateway.Gateway
	admin   *admin.Server // nil without an admin listener
	routes  []*route.Route
	opts    Options
}

// New builds the engine, with its defaults and in-memory state, and the
// gateway over routes.
func New(routes []route.Route, opts Options) (*Server, error) {
	if opts.Proxy == nil {
		return nil, errors.New("server: no proxy listener")
	}
	e, err := engine.New(engine.Config{}, nil)
	if err != nil {
		return nil, err
	}
	s := &Server{engine: e, opts: opts, routes: make([]*route.Route, len(routes))}
	now := time.Now()
	for i := range routes {
		s.routes[i] = &routes[i]
		if err := e.AddRoute(now, routes[i].Spec()); err != nil {
			return nil, err
		}
	}
	metrics := admin.NewMetrics(e)
	if s.gateway, err = gateway.New(gateway.Config{Observer: metrics, Admission: opts.Admission, Users: opts.Users, Log: opts.Log}, e, s.routes); err != nil {
		return nil, err
	}
	if opts.Admin != nil {
		s.admin = admin.NewServer(e, s.routes, metrics, admin.Options{Token: opts.AdminToken})
	}
	return s, nil
}

// Engine is the server's engine, for status views.
func (s *Server) Engine() *engine.Engine { return s.engine }

// Run serves until ctx ends or a listener fails, then stops accepting and
// gives in-flight requests up to grace to finish. It returns the listener's
// error, or nil after ctx ended.
func (s *Server) Run(ctx context.Context, grace time.Duration) error {
	defer s.gateway.Close()
	servers := []*http.Server{{Handler: s.gateway, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{s.opts.Proxy}
	if s.admin != nil {
		defer s.admin.Close()
		servers = append(servers, &http.Server{Handler: s.admin.Handler(), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, s.opts.Admin)
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
// and the prober answering probe jobs.
func (s *Server) background(ctx context.Context) {
	prober := probe.New(s.engine, s.routes, probe.Config{TargetURL: s.gateway.ProbeURL, NeutralURL: s.opts.NeutralURL})
	done := make(chan struct{})
	go func() { prober.Run(ctx, time.Second); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return
		case now := <-tick.C:
			s.engine.Sweep(now)
		}
	}
}

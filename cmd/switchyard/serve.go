package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/probe"
	"github.com/switchyard/switchyard/internal/route"
)

const serveUsage = `usage: switchyard serve --listen ADDR --proxies FILE [--admin ADDR]

Runs the forward proxy: point clients at --listen (curl -x http://ADDR …).
State is kept in memory. Admin actions (drain, eject, restore) need a
bearer token from the environment variable SWITCHYARD_ADMIN_TOKEN.

flags:
`

// shutdownGrace is how long in-flight requests may take to finish after a
// SIGINT or SIGTERM.
const shutdownGrace = 30 * time.Second

// serve runs the gateway until ctx ends or a listener fails; it returns the
// exit code.
func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8080", "address of the forward proxy")
	proxies := fs.String("proxies", "", "proxy list file (see proxies.example.txt); required")
	adminAddr := fs.String("admin", "127.0.0.1:9090", `address of the admin listener ("" to disable)`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *proxies == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	routes, err := route.LoadList(*proxies)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	ptrs := make([]*route.Route, len(routes))
	e, err := engine.New(engine.Config{}, nil)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 1
	}
	now := time.Now()
	for i := range routes {
		ptrs[i] = &routes[i]
		if err := e.AddRoute(now, routes[i].Spec()); err != nil {
			fmt.Fprintln(stderr, "switchyard serve:", err)
			return 2
		}
	}
	metrics := admin.NewMetrics(e)
	gw, err := gateway.New(gateway.Config{Observer: metrics}, e, ptrs)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	defer gw.Close()

	proxyLn, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 1
	}
	servers := []*http.Server{{Handler: gw, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{proxyLn}
	if *adminAddr != "" {
		adminLn, err := net.Listen("tcp", *adminAddr)
		if err != nil {
			proxyLn.Close()
			fmt.Fprintln(stderr, "switchyard serve:", err)
			return 1
		}
		srv := admin.NewServer(e, ptrs, metrics, admin.Options{Token: os.Getenv("SWITCHYARD_ADMIN_TOKEN")})
		defer srv.Close()
		servers = append(servers, &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, adminLn)
		log.Info("admin listening", "addr", adminLn.Addr().String(), "routes", "/api/routes", "metrics", "/metrics")
	}
	log.Info("forward proxy listening", "addr", proxyLn.Addr().String(), "routes", len(routes))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	background := make(chan struct{})
	go func() {
		defer close(background)
		run(ctx, e, gw, ptrs)
	}()
	failed := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { failed <- srv.Serve(listeners[i]) }()
	}
	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", shutdownGrace)
	case err := <-failed:
		log.Error("listener failed", "err", err)
		code = 1
	}
	shutdown, stop := context.WithTimeout(context.Background(), shutdownGrace)
	defer stop()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("shutdown", "err", err)
		}
	}
	cancel()
	<-background
	return code
}

// run does the engine's timed work until ctx ends: sweeps once a second and
// answers probe jobs.
func run(ctx context.Context, e *engine.Engine, gw *gateway.Gateway, routes []*route.Route) {
	prober := probe.New(e, routes, probe.Config{TargetURL: gw.ProbeURL})
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
			e.Sweep(now)
		}
	}
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

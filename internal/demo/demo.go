// Package demo is `switchyard demo`: a live tour of the gateway on one
// machine. It starts a fake site, six fake upstream proxies with different
// faults, the real gateway with its engine, prober, sweeps and admin
// listener, and a gentle load generator, then prints what the engine thinks
// of every route every few seconds, so one can watch dead routes cool and a
// route banned by one site cool for that site only.
package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/server"
)

// Options are the demo's addresses; empty fields get the defaults.
type Options struct {
	Listen string // the forward proxy; default 127.0.0.1:8080
	Admin  string // the admin listener; default 127.0.0.1:9090
}

// Pacing of the demo.
const (
	loadInterval   = time.Second / 15 // ≈ 15 requests/s, one at a time
	requestTimeout = 5 * time.Second
	statusInterval = 5 * time.Second
	shutdownGrace  = 5 * time.Second
	// BlockedHost is the site name the "blocker" proxy refuses; the same
	// site reached as 127.0.0.1 goes through it fine.
	BlockedHost = "localhost"
)

// fleet is the demo's fake upstream proxies, by route id.
var fleet = []struct {
	id string
	b  routetest.Behavior
}{
	{"healthy-1", routetest.Behavior{}},
	{"healthy-2", routetest.Behavior{}},
	{"healthy-3", routetest.Behavior{}},
	{"refused", routetest.Behavior{Refuse: true}},
	{"auth-407", routetest.Behavior{Answer407: true}},
	{"blocker", routetest.Behavior{BlockHosts: []string{BlockedHost}}},
}

// engineHook, when set (by tests), is given the engine once it runs.
var engineHook func(*engine.Engine)

// Run runs the demo until ctx ends, writing the tour to out. It returns
// nil after a clean stop, or the error that kept it from starting or
// running.
func Run(ctx context.Context, out io.Writer, opts Options) (err error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:8080"
	}
	if opts.Admin == "" {
		opts.Admin = "127.0.0.1:9090"
	}

	// The site: answers 200 "ok" to anything.
	siteLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	site := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 10 * time.Second}
	siteDone := make(chan struct{})
	go func() { site.Serve(siteLn); close(siteDone) }()
	defer func() { site.Close(); <-siteDone }()
	_, sitePort, _ := net.SplitHostPort(siteLn.Addr().String())

	// The upstream proxies.
	var list strings.Builder
	for _, f := range fleet {
		p, err := routetest.Start(f.b)
		if err != nil {
			return err
		}
		defer p.Close()
		fmt.Fprintf(&list, "%s id=%s\n", p.URL, f.id)
	}
	routes, err := route.ParseList("demo", []byte(list.String()))
	if err != nil {
		return err
	}

	// The gateway, as serve runs it.
	proxyLn, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", opts.Admin)
	if err != nil {
		proxyLn.Close()
		return err
	}
	cfg := config.WithRoutes(routes)
	// The demo is there to show every fault met and judged within its
	// few seconds. The defaults keep traffic on the cheapest routes
	// (sharpness 4, the better of two draws), so a blocker a little slower
	// than the healthy routes could go unasked for localhost for longer
	// than the tour lasts; here every usable route is drawn in plain
	// proportion to its expected speed (docs/design/005-cost.md).
	cfg.Engine.Picker = "weighted_random"
	cfg.Engine.Sharpness = 1
	srv, err := server.New(cfg, server.Listeners{Proxy: proxyLn, Admin: adminLn}, nil)
	if err != nil {
		proxyLn.Close()
		adminLn.Close()
		return err
	}
	e := srv.Engine()
	if engineHook != nil {
		engineHook(e)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proxyAddr, adminAddr := proxyLn.Addr().String(), adminLn.Addr().String()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); load(ctx, proxyAddr, sitePort) }()
	go func() { defer wg.Done(); report(ctx, out, e) }()

	fmt.Fprintf(out, `switchyard demo: 6 fake proxies (3 healthy, 1 refused, 1 answering 407, 1 that blocks %q),
a fake site on 127.0.0.1:%s, and ~15 requests/s through the gateway to http://localhost:%s/ and http://127.0.0.1:%s/.

  forward proxy  %s
  try it         curl -x http://%s http://127.0.0.1:%s/
  dashboard      http://%s/
  routes         curl http://%s/api/routes
  events         curl http://%s/api/events
  metrics        curl http://%s/metrics

Watch "auth-407" cool at once, "refused" turn suspect and then cool, and "blocker" cool for localhost only. Ctrl-C stops.
`, BlockedHost, sitePort, sitePort, sitePort, proxyAddr, proxyAddr, sitePort, adminAddr, adminAddr, adminAddr, adminAddr)

	err = srv.Run(ctx, shutdownGrace)
	cancel()
	wg.Wait()
	return err
}

// load sends GETs through the gateway, one at a time, alternating between
// the site's two names, at most one per loadInterval, until ctx ends.
func load(ctx context.Context, proxyAddr, sitePort string) {
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr})}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: requestTimeout}
	targets := []string{"http://" + BlockedHost + ":" + sitePort + "/", "http://127.0.0.1:" + sitePort + "/"}
	tick := time.NewTicker(loadInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, targets[i%2], nil)
		if err != nil {
			return
		}
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// report prints every route's state every statusInterval until ctx ends.
func report(ctx context.Context, out io.Writer, e *engine.Engine) {
	tick := time.NewTicker(statusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			fmt.Fprintf(out, "\n%s\n", now.Format(time.TimeOnly))
			for _, st := range e.Routes() {
				fmt.Fprintln(out, StatusLine(st))
			}
		}
	}
}

// StatusLine is one compact line for a route: id, state, score, and its
// per-target records that cannot carry traffic.
func StatusLine(st engine.RouteStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-10s %-9s score %.2f", st.ID, st.Health.State, st.Score)
	var cooling []string
	for _, p := range st.Targets {
		if !p.Health.State.Usable() {
			cooling = append(cooling, p.Target+"="+p.Health.State.String())
		}
	}
	if len(cooling) > 0 {
		fmt.Fprintf(&b, "  targets: %s", strings.Join(cooling, " "))
	}
	return b.String()
}

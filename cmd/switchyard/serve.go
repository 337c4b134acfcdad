package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/record"
	"github.com/switchyard/switchyard/internal/server"
)

const serveUsage = `usage: switchyard serve [--config FILE] [--listen ADDR] [--proxies FILE] [--admin ADDR] [--api ADDR]
                       [--probe-url URL] [--block-private-networks[=false]] [--allow-cidr CIDR,...]
                       [--log-format text|json] [--state memory|redis://HOST:PORT/DB] [--state-prefix P]
                       [--pid-file FILE] [--record FILE]

Runs the forward proxy: point clients at --listen (curl -x http://ADDR …).
State is kept in memory, or with --state in a Redis shared by every
gateway pointed at it. Settings come from the config file (see
switchyard.example.toml), then SWITCHYARD_<SECTION>_<KEY> environment
variables, then these flags. Secrets come from the file's env:/file:
references or the environment, never from flags: SWITCHYARD_ADMIN_TOKEN
enables admin actions (drain, eject, restore), SWITCHYARD_USERS="alice:pw1"
adds proxy users. SIGHUP, or POST /api/reload on the admin listener with
the admin token, reloads the file and the proxy list; routes keep their
state. --pid-file names the process to signal. --record appends every
outcome and state change to FILE for switchyard replay.

flags:
`

// flagKeys maps each serve flag to the config key it sets.
var flagKeys = map[string]string{
	"listen":                 "listen.proxy",
	"admin":                  "listen.admin",
	"api":                    "listen.api",
	"proxies":                "routes.file",
	"probe-url":              "probe.url",
	"block-private-networks": "security.block_private_networks",
	"allow-cidr":             "security.allow_cidrs",
	"log-format":             "log.format",
	"state":                  "state.url",
	"state-prefix":           "state.prefix",
	"mitm":                   "mitm.enabled",
	"state-dir":              "mitm.state_dir",
}

// shutdownGrace is how long in-flight requests may take to finish after a
// SIGINT or SIGTERM.
const shutdownGrace = 30 * time.Second

// serve runs the gateway until ctx ends or a listener fails; it returns the
// exit code. Each value on hangups reloads the configuration.
func serve(ctx context.Context, args []string, stderr io.Writer, hangups <-chan os.Signal) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", "", "TOML config file (see switchyard.example.toml)")
	pidFile := fs.String("pid-file", "", "write the process id to this file at start, remove it at exit (kill -HUP $(cat FILE) reloads this gateway alone)")
	recordTo := fs.String("record", "", "append every outcome and state change to this file, as JSON Lines, for switchyard replay (rotated to FILE.1 at 64 MiB)")
	fs.String("listen", "127.0.0.1:8080", "address of the forward proxy")
	fs.String("proxies", "", "proxy list file (see proxies.example.txt); required without a config file")
	fs.String("admin", "127.0.0.1:9090", `address of the admin listener ("" to disable)`)
	fs.String("api", "127.0.0.1:9091", `address of the fetch API, gRPC and HTTP JSON ("" to disable)`)
	fs.String("probe-url", "", "http:// page that neutral probes fetch through each route (default: a CONNECT through the proxy, which checks its credentials)")
	fs.Bool("block-private-networks", false, "refuse loopback, private, link-local, metadata and multicast destinations (default: on unless --listen is a loopback address)")
	fs.String("allow-cidr", "", "destination ranges exempt from --block-private-networks (comma-separated)")
	fs.String("log-format", "text", "format of the log on stderr, request lines included: text or json")
	fs.String("state", "memory", "where health state lives: memory, or redis://host:port/db (redis-cluster://host:port?addr=… for a cluster) shared by several gateways (a password belongs in SWITCHYARD_STATE_URL)")
	fs.String("state-prefix", "switchyard", "Redis key prefix, one per deployment")
	fs.Bool("mitm", false, "intercept TLS in CONNECT tunnels, so HTTPS is observed and retried as HTTP is (clients must trust the CA: switchyard ca)")
	fs.String("state-dir", mitm.DefaultStateDir(), "directory of the CA that --mitm generates on first use")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	src := config.Source{Path: *path}
	fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			src.Flags = append(src.Flags, config.Setting{Key: key, Value: f.Value.String(), Flag: f.Name})
		}
	})
	cfg, err := config.Load(src)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintln(stderr, "switchyard serve: --pid-file:", err)
			return 1
		}
		defer os.Remove(*pidFile)
	}
	log := newLogger(cfg.Log.Format, stderr)
	warnConfig(log, cfg)
	if !cfg.LoopbackOnly() && len(cfg.Users) == 0 {
		log.Warn("the proxy or the fetch API listens beyond loopback without client auth: anyone who reaches it can use your exits (add [[users]] or SWITCHYARD_USERS)", "proxy", cfg.Listen.Proxy, "api", cfg.Listen.API)
	}
	var ln server.Listeners
	if ln.Proxy, err = listen("listen", cfg.Listen.Proxy); err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 1
	}
	if cfg.Listen.Admin != "" {
		if ln.Admin, err = listen("admin", cfg.Listen.Admin); err != nil {
			ln.Proxy.Close()
			fmt.Fprintln(stderr, "switchyard serve:", err)
			return 1
		}
	}
	if cfg.Listen.API != "" {
		if ln.API, err = listen("api", cfg.Listen.API); err != nil {
			closeAll(ln)
			fmt.Fprintln(stderr, "switchyard serve:", err)
			return 1
		}
	}
	srv, err := server.New(cfg, ln, log)
	if err != nil {
		closeAll(ln)
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	if ln.Admin != nil {
		log.Info("admin listening", "addr", ln.Admin.Addr().String(), "dashboard", "/", "routes", "/api/routes", "metrics", "/metrics")
	}
	if ln.API != nil {
		log.Info("fetch API listening", "addr", ln.API.Addr().String(), "grpc", "switchyard.v1.Fetcher", "json", "/v1/fetch")
	}
	log.Info("forward proxy listening", "addr", ln.Proxy.Addr().String(), "routes", len(cfg.RouteList), "users", len(cfg.Users),
		"private_networks_blocked", cfg.BlockPrivate(), "state", srv.StateAddr())
	srv.SetSource(func() (*config.Config, error) {
		next, err := config.Load(src)
		if err == nil {
			warnConfig(log, next)
		}
		return next, err
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *recordTo != "" {
		rec, err := record.Open(srv.Engine(), *recordTo, 0, log)
		if err != nil {
			fmt.Fprintln(stderr, "switchyard serve: --record:", err)
			cancel()
			srv.Run(ctx, 0) // stops what New started
			return 1
		}
		recorded := make(chan struct{})
		go func() { rec.Run(ctx); close(recorded) }()
		defer func() { cancel(); <-recorded }() // flushed before the process ends
		log.Info("recording", "file", *recordTo)
	}
	go reloadOnHangup(ctx, hangups, srv)
	if err := srv.Run(ctx, shutdownGrace); err != nil {
		log.Error("listener failed", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// reloadOnHangup reloads the configuration on every hangup until ctx
// ends. A configuration that does not load is refused whole (logged) and
// the running one stays.
func reloadOnHangup(ctx context.Context, hangups <-chan os.Signal, srv *server.Server) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hangups:
			_ = srv.ReloadFromSource() // logged there
		}
	}
}

// warnConfig logs what the configuration let pass but should not have,
// such as a secret written in the file as is (never the secret).
func warnConfig(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config: " + w)
	}
}

// newLogger is the process log on stderr, in format "text" or "json".
func newLogger(format string, stderr io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return slog.New(slog.NewTextHandler(stderr, nil))
}

// listen opens, on addr, the listener that --flag sets (flagKeys). Its
// error names the setting, and for an address in use, how to choose
// another: a second gateway on one machine meets it on every listener it
// did not move.
func listen(flag, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l, nil
	}
	key := flagKeys[flag]
	if errors.Is(err, syscall.EADDRINUSE) {
		remedy := "give this gateway another with --" + flag + ", " + config.EnvName(key) + " or " + key
		if key != "listen.proxy" {
			remedy += `, or "" to turn it off`
		}
		return nil, fmt.Errorf("%s %s: the address is in use (another switchyard?): %s", key, addr, remedy)
	}
	return nil, fmt.Errorf("%s (--%s, %s) %s: %w", key, flag, config.EnvName(key), addr, err)
}

// closeAll closes the listeners of a server that never ran.
func closeAll(ln server.Listeners) {
	ln.Proxy.Close()
	if ln.Admin != nil {
		ln.Admin.Close()
	}
	if ln.API != nil {
		ln.API.Close()
	}
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// hangups delivers SIGHUP, the reload signal.
func hangups() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c
}

const checkConfigUsage = `usage: switchyard check-config --config FILE

Validates the configuration as serve would load it (the file, then
SWITCHYARD_<SECTION>_<KEY> environment variables, secrets and the proxy
list included) without starting anything, and prints the effective
configuration with secrets redacted. Exit 0 when valid, 1 when not.
`

// checkConfig is the check-config command.
func checkConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, checkConfigUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", "", "TOML config file")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	cfg, err := config.Load(config.Source{Path: *path})
	if err != nil {
		fmt.Fprintln(stderr, "switchyard check-config:", err)
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, "switchyard check-config: warning:", w)
	}
	if err := cfg.WriteEffective(stdout); err != nil {
		fmt.Fprintln(stderr, "switchyard check-config:", err)
		return 1
	}
	return 0
}

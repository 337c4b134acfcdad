package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/server"
)

const serveUsage = `usage: switchyard serve --listen ADDR --proxies FILE [--admin ADDR] [--probe-url URL]
                       [--block-private-networks[=false]] [--allow-cidr CIDR,...]
                       [--log-format text|json]

Runs the forward proxy: point clients at --listen (curl -x http://ADDR …).
State is kept in memory. Admin actions (drain, eject, restore) need a
bearer token from the environment variable SWITCHYARD_ADMIN_TOKEN.
Client auth: SWITCHYARD_USERS="alice:pw1,bob:pw2" lets only those users
through (Basic Proxy-Authorization); unset means no auth. Secrets come from
the environment only, never from flags.

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
	probeURL := fs.String("probe-url", "", "http:// page that neutral probes fetch through each route (default: a TCP check of the proxy)")
	blockPrivate := fs.Bool("block-private-networks", false, "refuse loopback, private, link-local, metadata and multicast destinations (default: on unless --listen is a loopback address)")
	var allowCIDRs cidrList
	fs.Var(&allowCIDRs, "allow-cidr", "destination range exempt from --block-private-networks (repeatable or comma-separated)")
	logFormat := fs.String("log-format", "text", "format of the log on stderr, request lines included: text or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *proxies == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *probeURL != "" {
		if u, err := url.Parse(*probeURL); err != nil || u.Scheme != "http" || u.Host == "" {
			fmt.Fprintf(stderr, "switchyard serve: --probe-url %q: want an http:// URL\n", *probeURL)
			return 2
		}
	}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		fmt.Fprintf(stderr, "switchyard serve: --log-format %q: want text or json\n", *logFormat)
		return 2
	}
	users, err := usersFromEnv()
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	routes, err := route.LoadList(*proxies)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	opts := server.Options{AdminToken: os.Getenv("SWITCHYARD_ADMIN_TOKEN"), NeutralURL: *probeURL, Users: users, Log: log}
	if blockPrivateNetworks(fs, *blockPrivate, *listen) {
		opts.Admission = guard.NewAdmission(allowCIDRs, nil)
	}
	if opts.Proxy, err = net.Listen("tcp", *listen); err != nil {
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 1
	}
	if *adminAddr != "" {
		if opts.Admin, err = net.Listen("tcp", *adminAddr); err != nil {
			opts.Proxy.Close()
			fmt.Fprintln(stderr, "switchyard serve:", err)
			return 1
		}
	}
	srv, err := server.New(routes, opts)
	if err != nil {
		closeAll(opts)
		fmt.Fprintln(stderr, "switchyard serve:", err)
		return 2
	}
	if opts.Admin != nil {
		log.Info("admin listening", "addr", opts.Admin.Addr().String(), "routes", "/api/routes", "metrics", "/metrics")
	}
	log.Info("forward proxy listening", "addr", opts.Proxy.Addr().String(), "routes", len(routes), "users", len(users))
	if err := srv.Run(ctx, shutdownGrace); err != nil {
		log.Error("listener failed", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// usersFromEnv reads the proxy's users from SWITCHYARD_USERS; unset means
// no client auth. Set but naming no user is refused, lest a typo turn auth
// off.
func usersFromEnv() (map[string]gateway.User, error) {
	v, ok := os.LookupEnv("SWITCHYARD_USERS")
	if !ok {
		return nil, nil
	}
	return parseUsers(v)
}

// userName is what a user name may hold: no "-", which separates the
// control parameters in the proxy username, and no ":".
var userName = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

// parseUsers parses "alice:pw1,bob:pw2"; a password may contain ':' (the
// name ends at the first). Errors name the entry by position and never
// quote it: it may hold a password. Nothing is trimmed: a space is part of
// a password, and makes a name invalid.
func parseUsers(v string) (map[string]gateway.User, error) {
	if v == "" {
		return nil, errors.New("SWITCHYARD_USERS is set but names no user (unset it to turn client auth off)")
	}
	users := make(map[string]gateway.User)
	for i, entry := range strings.Split(v, ",") {
		name, password, ok := strings.Cut(entry, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("SWITCHYARD_USERS: entry %d: want user:password", i+1)
		case !userName.MatchString(name):
			return nil, fmt.Errorf("SWITCHYARD_USERS: entry %d: user name must be letters, digits, '_' or '.'", i+1)
		case password == "":
			return nil, fmt.Errorf("SWITCHYARD_USERS: entry %d: user %s has an empty password", i+1, name)
		}
		if _, dup := users[name]; dup {
			return nil, fmt.Errorf("SWITCHYARD_USERS: entry %d: user %s given twice", i+1, name)
		}
		users[name] = gateway.User{Password: password}
	}
	return users, nil
}

// blockPrivateNetworks says whether SSRF admission is on: as the flag says
// when given, else on for a proxy reachable beyond loopback (SPEC §4).
func blockPrivateNetworks(fs *flag.FlagSet, flagValue bool, listen string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "block-private-networks" })
	if given {
		return flagValue
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}

// cidrList is a repeatable flag of CIDR ranges, each value one range or a
// comma-separated list.
type cidrList []netip.Prefix

func (l *cidrList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *cidrList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, p)
	}
	return nil
}

// closeAll closes the listeners of a server that never ran.
func closeAll(opts server.Options) {
	opts.Proxy.Close()
	if opts.Admin != nil {
		opts.Admin.Close()
	}
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

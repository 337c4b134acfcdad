package livebench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/internal/freeport"
)

// haproxyContender runs HAProxy configured as its documentation suggests
// for a pool of HTTP proxies: balance (leastconn for a fleet of unequal
// exits, roundrobin for equal ones) over one server per exit with TCP
// health checks, retries with redispatch. It passes the clients'
// absolute-form requests on to the exits unchanged.
func haproxyContender(balance string) contender {
	return contender{name: "haproxy", missing: installed("haproxy"), start: func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error) {
		bin, err := exec.LookPath("haproxy")
		if err != nil {
			return nil, err
		}
		listen, err := freeport.Addr()
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(cfg, []byte(haproxyConfig(listen, f.urls(), balance)), 0o600); err != nil {
			return nil, err
		}
		// -db: stay in the foreground, one process, so its CPU is ours to read.
		return runGateway(ctx, gatewayProcess{
			bin: bin, args: []string{"-db", "-f", cfg}, log: filepath.Join(dir, "haproxy.log"),
			listen: listen, ready: dialable(listen), roots: f.roots,
		}, opts.Workers)
	}}
}

// haproxyConfig is the configuration of HAProxy listening on listen in
// front of exits: mode http, the balance algorithm, a server line with check
// (TCP checks at the default inter 2s, rise 2, fall 3) per exit, retries
// 3, option redispatch, and the timeouts a pool of proxies gets in the
// documentation's examples.
func haproxyConfig(listen string, exits []*url.URL, balance string) string {
	var b strings.Builder
	b.WriteString(`global
    maxconn 4096

defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch

frontend livebench
    bind ` + listen + `
    default_backend exits

backend exits
    balance ` + balance + `
`)
	for i, u := range exits {
		fmt.Fprintf(&b, "    server %s %s check\n", exitName(i), u.Host)
	}
	return b.String()
}

package livebench

import (
	"context"
	"crypto/x509"
	"net/url"
	"os/exec"
	"time"
)

// contender is one way of carrying the load over a fleet: a gateway
// process, or a client that picks exits itself.
type contender struct {
	name string
	// missing says why the contender cannot run on this machine (its
	// binary is not installed) or under these options, or "" when it can.
	missing func(Options) string
	// start makes it ready to carry traffic over f. dir is a scratch
	// directory for its files.
	start func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error)
}

// session is a contender carrying traffic over one fleet.
type session struct {
	router router
	// proxies are the forward proxies its clients may send through: the
	// gateway's, or every exit for a client-side contender. LiveCost
	// builds its own clients over them.
	proxies []*url.URL
	// cpu is the CPU its process has used so far; nil for contenders that
	// run inside the benchmark.
	cpu func() (time.Duration, error)
	// notes are lines for the report, taken after the load; nil for none.
	notes func(ctx context.Context) []string
	// stop ends everything start started.
	stop func()
}

// cpuDuring runs f and returns the CPU the session's process used
// meanwhile, and whether it has a process to read that from.
func (s *session) cpuDuring(f func()) (cpu time.Duration, has bool, err error) {
	if s.cpu == nil {
		f()
		return 0, false, nil
	}
	cpu0, err := s.cpu()
	if err != nil {
		return 0, false, err
	}
	f()
	cpu1, err := s.cpu()
	if err != nil {
		return 0, false, err
	}
	return cpu1 - cpu0, true, nil
}

// installed is the missing of a contender that needs binary on PATH.
func installed(binary string) func(Options) string {
	return func(Options) string {
		if _, err := exec.LookPath(binary); err != nil {
			return binary + " is not on PATH"
		}
		return ""
	}
}

// always is the missing of a contender that can always run.
func always(Options) string { return "" }

// overHTTPS is the missing of a contender that only means something when
// the load is HTTPS.
func overHTTPS(o Options) string {
	if !o.HTTPS {
		return "runs only over HTTPS (" + envPrefix + "HTTPS=1)"
	}
	return ""
}

// contenders are every contender, the oracle first.
func contenders(switchyardBinary func() (string, error)) []contender {
	return []contender{
		oracleContender(),
		switchyardContender("switchyard", switchyardBinary, false),
		switchyardContender("switchyard-mitm", switchyardBinary, true),
		sharedContender(switchyardBinary),
		haproxyContender("leastconn"),
		gliderContender(),
		roundRobinContender(),
	}
}

// gatewayProcess is how to run a gateway contender's process.
type gatewayProcess struct {
	bin    string
	args   []string
	env    []string // added to subprocessEnv
	log    string   // its output
	listen string   // its forward proxy's address
	// roots are what its clients verify HTTPS sites against: the fleet's
	// sites' (fleet.roots), or a gateway's own CA when it intercepts TLS.
	roots *x509.CertPool
	// ready answers nil once the process serves; waited for up to
	// readyLimit.
	ready func(context.Context) error
}

// start starts g's process and waits until it serves.
func (g gatewayProcess) start(ctx context.Context) (*process, error) {
	p, err := startProcess(g.bin, g.args, g.log, g.env...)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, readyLimit, g.ready); err != nil {
		p.stop(stopGrace)
		return nil, err
	}
	return p, nil
}

// runGateway starts g and, once it is ready, returns the session that
// sends the load through its forward proxy. Stopping the session drops the
// load's connections, then stops the process group.
func runGateway(ctx context.Context, g gatewayProcess, workers int) (*session, error) {
	p, err := g.start(ctx)
	if err != nil {
		return nil, err
	}
	proxy := &url.URL{Scheme: "http", Host: g.listen}
	client := proxyClient(proxy, workers, g.roots)
	return &session{
		router:  gateway{client},
		proxies: []*url.URL{proxy},
		cpu:     p.cpuTime,
		stop: func() {
			closeClients(client)
			p.stop(stopGrace)
		},
	}, nil
}

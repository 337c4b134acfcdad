package livebench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/freeport"
)

// sharedGateways is how many gateways the shared contender runs.
const sharedGateways = 2

// sharedContender runs sharedGateways switchyard gateways on one Redis of
// its own, as the README's "Several gateways" starts them: each the quick
// start's over the fleet's proxy list, plus --state redis://, the load's
// attempts taking them in turn as a load balancer in front of them would.
// What one learns steers the others, and each holds a pair to its share
// of a limit a site's 429s taught (docs/design/005-cost.md): beside
// switchyard's row it shows what sharing the state costs the decisions
// and keeps of them.
func sharedContender(binary func() (string, error)) contender {
	return contender{name: "switchyard-shared", missing: installed("redis-server"), start: func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error) {
		bin, list, err := binaryAndList(binary, f, dir)
		if err != nil {
			return nil, err
		}
		redis, state, err := startRedis(ctx, dir)
		if err != nil {
			return nil, err
		}
		procs := []*process{redis}
		var clients []*http.Client
		stop := func() {
			closeClients(clients...)
			for i := len(procs) - 1; i >= 0; i-- { // the gateways before their Redis
				procs[i].stop(stopGrace)
			}
		}
		var proxies []*url.URL
		var admins []string
		for i := range sharedGateways {
			g, adminURL, err := quickStart(bin, list, f, opts, filepath.Join(dir, fmt.Sprintf("switchyard-%d.log", i+1)))
			if err != nil {
				stop()
				return nil, err
			}
			// The fetch API is not the load's, and each would take the
			// same default address.
			g.args = append(g.args, "--state", state, "--api", "")
			p, err := g.start(ctx)
			if err != nil {
				stop()
				return nil, err
			}
			procs = append(procs, p)
			proxy := &url.URL{Scheme: "http", Host: g.listen}
			proxies = append(proxies, proxy)
			clients = append(clients, proxyClient(proxy, opts.Workers, g.roots))
			admins = append(admins, adminURL)
		}
		return &session{
			router:  &inTurn{clients: clients},
			proxies: proxies,
			cpu: func() (time.Duration, error) { // the deployment's: its gateways' and its Redis's
				var sum time.Duration
				for _, p := range procs {
					d, err := p.cpuTime()
					if err != nil {
						return 0, err
					}
					sum += d
				}
				return sum, nil
			},
			notes: func(ctx context.Context) []string {
				notes := []string{binaryNote(bin, opts) + fmt.Sprintf(", %d gateways on one Redis (%s)", sharedGateways, state)}
				for i, a := range admins {
					for _, n := range switchyardNotes(ctx, a, f) {
						notes = append(notes, fmt.Sprintf("gateway %d: %s", i+1, n))
					}
				}
				return notes
			},
			stop: stop,
		}, nil
	}}
}

// startRedis starts a redis-server on a free port of 127.0.0.1 that keeps
// nothing on disk, and gives the process and the gateways' --state URL.
func startRedis(ctx context.Context, dir string) (*process, string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", err
	}
	p, err := startProcess("redis-server", []string{"--bind", host, "--port", port, "--save", "", "--appendonly", "no", "--dir", dir},
		filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, "", err
	}
	if err := p.waitReady(ctx, readyLimit, dialable(addr)); err != nil {
		p.stop(stopGrace)
		return nil, "", err
	}
	return p, "redis://" + addr + "/0", nil
}

// inTurn sends each attempt through the next of several gateways, round
// robin, as a load balancer in front of them does.
type inTurn struct {
	clients []*http.Client // immutable
	next    atomic.Uint64
}

var _ router = (*inTurn)(nil)

func (t *inTurn) route(ctx context.Context, _ string, _ []int) (*http.Client, int, error) {
	i := t.next.Add(1) - 1
	return t.clients[i%uint64(len(t.clients))], -1, ctx.Err()
}

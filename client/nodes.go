package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/switchyard/switchyard/internal/cluster"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Client-side distribution (docs/design/013-cluster.md): a Client made by
// NewNodes holds a connection to every node of a cluster, sends each call
// to the less loaded of two healthy nodes (in flight × latency), and sends
// an idempotent request that failed in transport to another node. A node
// that failed so is left out for the node cooldown, then tried again.

// node is one gateway a Client calls.
type node struct {
	// Immutable.
	addr   string
	conn   *grpc.ClientConn
	client pb.FetcherClient

	inflight atomic.Int64

	mu        sync.Mutex
	latency   time.Duration // guarded by mu: EWMA of answered calls (α 0.3, as the engine's); 0 until one
	downUntil time.Time     // guarded by mu: left out until then after a transport failure
}

// latencyAlpha weighs a call's latency in a node's EWMA.
const latencyAlpha = 0.3

// cost is what P2C compares: the time a call would wait behind the
// node's calls in flight, as the engine's cost (docs/design/005-cost.md).
func (n *node) cost() float64 {
	n.mu.Lock()
	l := n.latency
	n.mu.Unlock()
	if l <= 0 {
		return 0 // unmeasured: the cheapest, so that it gets measured
	}
	return float64(n.inflight.Load()+1) * float64(l)
}

func (n *node) healthy(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !now.Before(n.downUntil)
}

// done ends a call on n: an answer updates its latency, a transport
// failure leaves it out until now + cooldown.
func (n *node) done(start, now time.Time, failed bool, cooldown time.Duration) {
	n.inflight.Add(-1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if failed {
		n.downUntil = now.Add(cooldown)
		return
	}
	d := now.Sub(start)
	if n.latency == 0 {
		n.latency = d
	} else {
		n.latency = time.Duration(latencyAlpha*float64(d) + (1-latencyAlpha)*float64(n.latency))
	}
}

// pick is the node for a call, skipping those in tried: of two drawn at
// random among the healthy ones, the cheaper; when none is healthy, any
// not tried (a cooling node may be back); nil when all were tried.
func (c *Client) pick(tried map[*node]bool) *node {
	now := c.opts.now()
	var healthy, rest []*node
	for _, n := range c.list() {
		switch {
		case tried[n]:
		case n.healthy(now):
			healthy = append(healthy, n)
		default:
			rest = append(rest, n)
		}
	}
	cs := healthy
	if len(cs) == 0 {
		cs = rest
	}
	switch len(cs) {
	case 0:
		return nil
	case 1:
		return cs[0]
	}
	i := rand.IntN(len(cs))
	j := rand.IntN(len(cs) - 1)
	if j >= i {
		j++
	}
	if cs[j].cost() < cs[i].cost() {
		return cs[j]
	}
	return cs[i]
}

// Nodes are the addresses of the nodes the client calls, and whether each
// is in rotation now.
func (c *Client) Nodes() map[string]bool {
	now := c.opts.now()
	nodes := c.list()
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n.addr] = n.healthy(now)
	}
	return out
}

// WithNodeCooldown sets how long a node that failed in transport is left
// out of rotation before it is tried again. Default 5s.
func WithNodeCooldown(d time.Duration) Option { return func(o *options) { o.cooldown = d } }

// WithDNS makes the client find nodes from name's records, besides the
// addresses given to NewNodes, as a node's cluster.dns does: "name:port"
// for its A and AAAA records, "_service._proto.name" for its SRV records.
// It is resolved by New, then every interval (0: 30s), with r (nil: the
// system's resolver); a failed lookup keeps the nodes found last.
func WithDNS(name string, every time.Duration, r *net.Resolver) Option {
	return func(o *options) { o.dns, o.dnsEvery, o.resolver = name, every, r }
}

// defaultDNSEvery is WithDNS's interval when it is given none, as
// cluster.dns_interval's default.
const defaultDNSEvery = 30 * time.Second

// lookupTimeout bounds one resolution of WithDNS's name.
const lookupTimeout = 5 * time.Second

// lookup is the addresses WithDNS's name gives now; none without it.
func (c *Client) lookup() ([]string, error) {
	if c.opts.dns == "" {
		return nil, nil
	}
	r := c.opts.resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	found, err := cluster.Lookup(ctx, r, c.opts.dns)
	if err != nil {
		return nil, fmt.Errorf("switchyard client: resolving %s: %w", c.opts.dns, err)
	}
	return found, nil
}

// resolveEvery resolves WithDNS's name every interval until Close.
func (c *Client) resolveEvery(every time.Duration) {
	defer close(c.stopped)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			c.Resolve()
		}
	}
}

// Resolve resolves WithDNS's name now and calls the nodes it gives (and
// NewNodes' own); on an error the nodes stay as they were.
func (c *Client) Resolve() error {
	found, err := c.lookup()
	if err != nil {
		return err
	}
	return c.setNodes(found)
}

// withClock sets the clock of node cooldowns and latencies (tests).
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// callOn runs f on one node: it counts the call in flight and reports its
// end to the node.
func (c *Client) callOn(ctx context.Context, n *node, f func(context.Context, pb.FetcherClient) error) error {
	n.inflight.Add(1)
	start := c.opts.now()
	err := f(ctx, n.client)
	n.done(start, c.opts.now(), transportFailed(err), c.opts.cooldown)
	return err
}

package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/engine"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// State is a node's health as this node sees it.
type State int

// The states of a node (GET /api/nodes names them).
const (
	Unknown         State = iota // not checked enough yet
	Up                           // in rotation
	Down                         // out of reach: DownAfter failed checks, or a forward failed in transport
	Unauthenticated              // reachable, but refuses this node's token (a different secret)
)

func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Down:
		return "down"
	case Unauthenticated:
		return "unauthenticated"
	}
	return "unknown"
}

// Group counts a node's routes carrying one label set.
type Group struct {
	Labels         engine.Labels
	Tier           int // the routes' cost tier: a request's tier=N takes groups of N and above
	Routes, Usable int
	// Cooling counts, by target, the usable routes not usable for that
	// target (their pair with it cooling or ejected).
	Cooling map[string]int
}

// Summary is what a node advertises of itself in Ping.
type Summary struct {
	Version        string
	Routes, Usable int
	Groups         []Group
	Inflight       int64 // requests in flight through its routes
	ProxyPort      int   // its forward proxy's port; 0 when unknown
}

// fits reports how well s's routes fit a request for target needing
// labels: 2 when a route carrying them is usable for the target, 1 when
// only unusable ones carry them (the engine's least-bad fallback may still
// serve), 0 when none does.
func (s *Summary) fits(labels engine.Labels, target string) int {
	best := 0
	floor, _ := labels.MinTier() // refused before a request gets here
	for _, g := range s.Groups {
		if !g.Labels.Matches(labels) || g.Tier < floor {
			continue
		}
		if g.Usable-g.Cooling[target] > 0 {
			return 2
		}
		best = 1
	}
	return best
}

// Bounds on what a Ping carries: label sets, and targets per set.
const (
	maxGroups       = 256
	maxGroupTargets = 64
)

// Summarize is the Summary of routes, as a node's Ping advertises it.
func Summarize(version string, routes []engine.RouteStatus) Summary {
	s := Summary{Version: version, Routes: len(routes)}
	type key struct {
		labels string
		tier   int
	}
	byLabels := map[key]int{}
	for _, r := range routes {
		usable := r.Health.State.Usable()
		if usable {
			s.Usable++
		}
		s.Inflight += int64(r.Inflight)
		k := key{r.Labels.String(), r.Tier}
		i, ok := byLabels[k]
		if !ok {
			i = len(s.Groups)
			byLabels[k] = i
			s.Groups = append(s.Groups, Group{Labels: r.Labels, Tier: r.Tier})
		}
		g := &s.Groups[i]
		g.Routes++
		if !usable {
			continue
		}
		g.Usable++
		for _, p := range r.Targets {
			if !p.Health.State.Usable() {
				if g.Cooling == nil {
					g.Cooling = map[string]int{}
				}
				g.Cooling[p.Target]++
			}
		}
	}
	for i := range s.Groups {
		s.Groups[i].Cooling = mostCounted(s.Groups[i].Cooling, maxGroupTargets)
	}
	if len(s.Groups) > maxGroups {
		slices.SortStableFunc(s.Groups, func(a, b Group) int { return b.Routes - a.Routes })
		s.Groups = s.Groups[:maxGroups]
	}
	return s
}

// mostCounted is m cut to its n largest counts.
func mostCounted(m map[string]int, n int) map[string]int {
	if len(m) <= n {
		return m
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return m[b] - m[a] })
	for _, k := range keys[n:] {
		delete(m, k)
	}
	return m
}

// PingResponse is s as Ping answers it, for node id.
func (s Summary) PingResponse(id string, uptime time.Duration) *pb.PingResponse {
	out := &pb.PingResponse{
		Node: id, Version: s.Version, UptimeMs: uptime.Milliseconds(), Routes: int32(s.Routes), RoutesUsable: int32(s.Usable),
		Inflight: s.Inflight, ProxyPort: int32(s.ProxyPort),
	}
	for _, g := range s.Groups {
		pg := &pb.RouteGroup{Labels: g.Labels.String(), Tier: int32(g.Tier), Routes: int32(g.Routes), Usable: int32(g.Usable)}
		for _, t := range slices.Sorted(maps.Keys(g.Cooling)) {
			pg.Cooling = append(pg.Cooling, &pb.TargetCount{Target: t, Routes: int32(g.Cooling[t])})
		}
		out.Groups = append(out.Groups, pg)
	}
	return out
}

// summaryOf reads a peer's Ping answer; a label set that does not parse
// (a newer node's syntax) is left out rather than misread.
func summaryOf(p *pb.PingResponse) Summary {
	s := Summary{Version: p.GetVersion(), Routes: int(p.GetRoutes()), Usable: int(p.GetRoutesUsable()), Inflight: p.GetInflight(), ProxyPort: int(p.GetProxyPort())}
	for _, g := range p.GetGroups() {
		labels, err := engine.ParseRouteLabels(g.GetLabels())
		if err != nil {
			continue
		}
		gr := Group{Labels: labels, Tier: int(g.GetTier()), Routes: int(g.GetRoutes()), Usable: int(g.GetUsable())}
		for i, t := range g.GetCooling() {
			if i == maxGroupTargets {
				break
			}
			if gr.Cooling == nil {
				gr.Cooling = map[string]int{}
			}
			gr.Cooling[t.GetTarget()] = int(t.GetRoutes())
		}
		s.Groups = append(s.Groups, gr)
	}
	return s
}

// Options are what a Cluster needs beside its Config.
type Options struct {
	// Self is this node's id (Identify).
	Self string
	// Address is this node's API address as its peers reach it: a peer
	// listed at it is this node, and is not called.
	Address string
	// Local is this node's own Summary, read at every pick.
	Local func() Summary
	// Resolver resolves cluster.dns; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Now is the clock of checks' times; nil means time.Now.
	Now func() time.Time
	// Log receives state changes and refusals; nil discards them.
	Log *slog.Logger
}

// Cluster is this node's view of its peers.
type Cluster struct {
	// Immutable after New.
	cfg   Config
	self  string
	addr  string
	local func() Summary
	res   *net.Resolver
	now   func() time.Time
	log   *slog.Logger
	auth  *authenticator
	dial  []grpc.DialOption
	// instance is random per process (PingResponse.instance).
	instance string
	// serverTLS is the API listener's TLS; nil for h2c.
	serverTLS *tls.Config

	localMu  sync.Mutex
	localSum Summary   // guarded by localMu: Local's last answer
	localAt  time.Time // guarded by localMu: when it was read

	forwardedIn atomic.Int64

	mu      sync.Mutex
	static  []string         // guarded by mu: cluster.peers as last reloaded
	dnsName string           // guarded by mu: cluster.dns as last reloaded
	found   []string         // guarded by mu: the last DNS answer
	added   map[string]bool  // guarded by mu: peers the admin API added
	peers   map[string]*peer // guarded by mu: by address, the union of the above
	closed  bool             // guarded by mu
}

// peer is one other node.
type peer struct {
	// Immutable.
	addr string
	conn *grpc.ClientConn

	inflight  atomic.Int64 // forwards in flight to it
	forwarded atomic.Int64 // forwards sent to it

	// Guarded by Cluster.mu.
	id         string // as its Ping said; "" until then
	state      State
	oks, fails int // consecutive checks passed, failed
	lastCheck  time.Time
	lastErr    string
	summary    Summary
	old        bool // it has no Ping (an older node): no summary
	self       bool // its Ping gave this process's instance: this node's own address
}

// New makes the cluster of cfg. Run checks its peers; Close closes its
// connections.
func New(cfg Config, opts Options) (*Cluster, error) {
	if cfg.Secret == "" {
		return nil, errors.New("cluster: no secret: cluster.secret is required with peers")
	}
	if opts.Self == "" {
		return nil, errors.New("cluster: no node id")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Local == nil {
		opts.Local = func() Summary { return Summary{} }
	}
	serverTLS, clientTLS, err := cfg.TLS()
	if err != nil {
		return nil, err
	}
	transport := insecure.NewCredentials()
	if clientTLS != nil {
		transport = credentials.NewTLS(clientTLS)
	}
	c := &Cluster{
		serverTLS: serverTLS,
		cfg:       cfg, self: opts.Self, addr: opts.Address, local: opts.Local, res: opts.Resolver, now: opts.Now, log: opts.Log,
		added: map[string]bool{}, peers: map[string]*peer{}, instance: rand.Text(),
	}
	c.auth = &authenticator{self: opts.Self, secret: cfg.Secret, instance: c.instance, log: opts.Log}
	c.dial = []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		// A peer that went away is dialled again at least every check,
		// not after gRPC's backoff of up to two minutes, so that a node
		// that restarts is back within up_after checks.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: min(backoff.DefaultConfig.BaseDelay, cfg.CheckInterval), Multiplier: backoff.DefaultConfig.Multiplier,
			Jitter: backoff.DefaultConfig.Jitter, MaxDelay: cfg.CheckInterval,
		}}),
		grpc.WithPerRPCCredentials(nodeCredentials{md: map[string]string{mdNode: opts.Self, mdToken: Token(cfg.Secret, opts.Self), mdInstance: c.instance}, secure: clientTLS != nil}),
		grpc.WithUnaryInterceptor(oneHop),
		grpc.WithStreamInterceptor(oneHopStream),
	}
	c.SetPeers(cfg.Peers, cfg.DNS)
	return c, nil
}

// errSecondHop refuses to forward a request that was forwarded here: one
// hop only, by construction rather than by a hop count
// (docs/design/013-cluster.md).
var errSecondHop = status.Error(codes.FailedPrecondition, "switchyard: cluster: a forwarded request is never forwarded again (one hop only)")

func oneHop(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if Forwarded(ctx) {
		return errSecondHop
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func oneHopStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if Forwarded(ctx) {
		return nil, errSecondHop
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// ServerOptions are the interceptors that authenticate node calls, for
// the API's gRPC server: chained before the fetch API's own user auth.
func (c *Cluster) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(c.auth.unary), grpc.ChainStreamInterceptor(c.auth.stream)}
}

// ServerTLS is the TLS the API listener must serve for this node's peers
// (cluster.tls_*), nil for h2c.
func (c *Cluster) ServerTLS() *tls.Config { return c.serverTLS }

// Self is this node's id.
func (c *Cluster) Self() string { return c.self }

// MaxFailover is cluster.max_failover.
func (c *Cluster) MaxFailover() int { return c.cfg.MaxFailover }

// SetPeers applies a reload's cluster.peers and cluster.dns: peers no
// longer listed (nor found by DNS, nor added by the admin API) are
// dropped and their connections closed; those still listed keep their
// state and counts.
func (c *Cluster) SetPeers(static []string, dnsName string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.static = slices.Clone(static)
	if dnsName != c.dnsName {
		c.found = nil
	}
	c.dnsName = dnsName
	c.reconcile()
}

// AddPeer adds a peer by its API address, as the admin API asks; a reload
// keeps it.
func (c *Cluster) AddPeer(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("cluster: %q: want host:port", addr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.added[addr] = true
	c.reconcile()
	return nil
}

// RemovePeer removes a peer the admin API added or cluster.peers lists,
// until the next reload lists it again. It reports whether it was one.
func (c *Cluster) RemovePeer(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, known := c.peers[addr]
	delete(c.added, addr)
	c.static = slices.DeleteFunc(c.static, func(a string) bool { return a == addr })
	c.reconcile()
	return known
}

// reconcile makes peers the union of static, found and added, this
// node's own address left out. Caller must hold mu.
func (c *Cluster) reconcile() {
	want := map[string]bool{}
	for _, list := range [][]string{c.static, c.found, slices.Collect(maps.Keys(c.added))} {
		for _, a := range list {
			if a != c.addr && !c.closed {
				want[a] = true
			}
		}
	}
	for a, p := range c.peers {
		if !want[a] {
			p.conn.Close()
			delete(c.peers, a)
			c.log.Info("cluster: peer removed", "address", a, "node", p.id)
		}
	}
	for a := range want {
		if _, ok := c.peers[a]; ok {
			continue
		}
		conn, err := grpc.NewClient("passthrough:///"+a, c.dial...)
		if err != nil {
			c.log.Error("cluster: peer not added", "address", a, "err", err)
			continue
		}
		c.peers[a] = &peer{addr: a, conn: conn}
		c.log.Info("cluster: peer added", "address", a)
	}
}

// Close closes the connections to every peer; later reloads add none.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.reconcile()
}

// Run checks every peer each CheckInterval and resolves cluster.dns each
// DNSInterval until ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	check := time.NewTicker(c.cfg.CheckInterval)
	defer check.Stop()
	resolve := time.NewTicker(c.cfg.DNSInterval)
	defer resolve.Stop()
	c.Resolve(ctx)
	c.Check(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			c.Check(ctx)
		case <-resolve.C:
			c.Resolve(ctx)
		}
	}
}

// Check checks every peer once, all at once, and returns when all are
// done: grpc.health.v1 first (reachable?), then an authenticated Ping
// (the right token? and the peer's summary).
func (c *Cluster) Check(ctx context.Context) {
	c.mu.Lock()
	peers := make([]*peer, 0, len(c.peers))
	for _, p := range c.peers {
		peers = append(peers, p)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			r := c.probe(ctx, p.conn)
			c.record(p, r)
		})
	}
	wg.Wait()
}

// Probe is one check of a node: what its health service and its Ping said.
type Probe struct {
	Reachable bool   // grpc.health.v1 answered SERVING
	Verdict   string // "ok", "unreachable", "not_serving", "wrong_token", "no_ping" (an older node), or "error"
	Err       string // the failure, never a token
	Node      string // the id its Ping gave
	Instance  string // the process instance its Ping gave
	Summary   Summary
	Latency   time.Duration
}

// probe checks the node at conn.
func (c *Cluster) probe(ctx context.Context, conn *grpc.ClientConn) Probe {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CheckTimeout)
	defer cancel()
	start := time.Now()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch {
	case err != nil:
		return Probe{Verdict: "unreachable", Err: status.Convert(err).Message()}
	case h.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return Probe{Verdict: "not_serving", Err: h.GetStatus().String()}
	}
	ping, err := pb.NewFetcherClient(conn).Ping(ctx, &pb.PingRequest{})
	r := Probe{Reachable: true, Latency: time.Since(start)}
	switch status.Code(err) {
	case codes.OK:
		r.Verdict, r.Node, r.Instance, r.Summary = "ok", ping.GetNode(), ping.GetInstance(), summaryOf(ping)
		if !ping.GetClusterAuth() {
			// It took the token without checking it: a node without a
			// cluster secret, open to anyone.
			r.Verdict = "no_auth"
		}
	case codes.Unauthenticated:
		r.Verdict, r.Err = "wrong_token", "the peer refuses this node's token: is cluster.secret the same on every node?"
	case codes.Unimplemented:
		r.Verdict, r.Err = "no_ping", "the peer has no Ping: an older version"
	default:
		r.Verdict, r.Err = "error", status.Convert(err).Message()
	}
	return r
}

// Test checks the node at addr once, as the admin API's "test connection"
// asks: a peer's own connection, or a new one for an address not yet
// added.
func (c *Cluster) Test(ctx context.Context, addr string) (Probe, error) {
	c.mu.Lock()
	p := c.peers[addr]
	c.mu.Unlock()
	if p != nil {
		return c.probe(ctx, p.conn), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return Probe{}, fmt.Errorf("cluster: %q: want host:port", addr)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, c.dial...)
	if err != nil {
		return Probe{}, err
	}
	defer conn.Close()
	return c.probe(ctx, conn), nil
}

// record applies one check's result to p with hysteresis: an up peer goes
// down after DownAfter failures in a row, a down or unknown one comes up
// after UpAfter passes in a row, so that one lost packet does not move
// traffic (docs/design/013-cluster.md). A wrong token is no flap: it says
// so at once.
func (c *Cluster) record(p *peer, r Probe) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.lastCheck, p.lastErr = c.now(), r.Err
	old := p.state
	switch r.Verdict {
	case "wrong_token":
		p.oks, p.fails = 0, 0
		p.state = Unauthenticated
	case "ok", "no_ping":
		p.fails = 0
		p.oks++
		if r.Verdict == "ok" {
			p.id, p.summary, p.old = r.Node, r.Summary, false
		} else {
			p.old, p.summary = true, Summary{}
		}
		if r.Instance != "" && r.Instance == c.instance {
			// This node's own address under another spelling (0.0.0.0
			// listened, 10.0.0.1 listed): never called again.
			p.self = true
		} else if p.id == c.self {
			// Another node claims this node's id: its traces and ours
			// could not be told apart. It is never picked.
			c.log.Warn("CLUSTER NODE ID CLAIMED TWICE: the peer answers with this node's own id; give every node its own SWITCHYARD_NODE_ID", "address", p.addr, "node", p.id)
		}
		if p.state != Up && p.oks >= c.cfg.UpAfter {
			p.state = Up
		}
	default: // unreachable, not serving, no auth, error
		p.oks = 0
		p.fails++
		if p.state != Down && (p.fails >= c.cfg.DownAfter || p.state == Unauthenticated) {
			p.state = Down
		}
	}
	if p.state != old {
		c.log.Info("cluster: peer "+p.state.String(), "address", p.addr, "node", p.id, "was", old.String(), "verdict", r.Verdict, "err", r.Err)
	}
}

// Choice is a node picked for a request: this one (Self) or a peer,
// whose connection to forward on is Conn. Done must be called once with
// the forward's error.
type Choice struct {
	Self bool
	Node string           // the node's id
	Conn *grpc.ClientConn // nil for this node
	// Proxy is the node's forward proxy, host:port, for a CONNECT; "" for
	// this node or one that did not say.
	Proxy string

	p       *peer // nil for this node
	cluster *Cluster
}

// Done reports a forward's end: a transport failure (UNAVAILABLE) takes
// the peer out of rotation at once, as a real request failing says more
// than a probe; back in it comes only by UpAfter passed checks. Other
// errors are the request's, not the node's.
func (ch Choice) Done(err error) {
	if ch.p == nil {
		return
	}
	ch.p.inflight.Add(-1)
	if status.Code(err) != codes.Unavailable {
		return
	}
	ch.cluster.markDown(ch.p, err)
}

// Pick chooses the node to run a request for target needing labels,
// skipping the node ids in tried: among the nodes up with a route that
// carries the labels and is usable for the target, this one included, the less loaded of two drawn at random
// (in-flight per usable route: P2C, as docs/design/003-selection.md picks
// routes). Without a usable fit, nodes with only unusable fitting routes;
// without any, this node, whose engine answers as it does alone.
func (c *Cluster) Pick(labels engine.Labels, target string, tried map[string]bool) Choice {
	type cand struct {
		ch   Choice
		cost float64
	}
	var best [3][]cand
	if !tried[c.self] {
		s := c.localSummary()
		if f := s.fits(labels, target); f > 0 {
			best[f] = append(best[f], cand{Choice{Self: true, Node: c.self}, float64(s.Inflight+1) / float64(max(s.Usable, 1))})
		}
	}
	c.mu.Lock()
	for _, p := range c.peers {
		if p.state != Up || p.self || p.id == c.self || tried[p.id] || tried[p.addr] {
			continue
		}
		f := 0
		if p.old {
			if len(labels) == 0 {
				f = 1 // it advertises nothing: a last resort for unconstrained requests
			}
		} else {
			f = p.summary.fits(labels, target)
		}
		if f > 0 {
			load := p.summary.Inflight + p.inflight.Load() + 1
			best[f] = append(best[f], cand{Choice{Node: p.id, Conn: p.conn, Proxy: proxyAddr(p.addr, p.summary.ProxyPort), p: p}, float64(load) / float64(max(p.summary.Usable, 1))})
		}
	}
	c.mu.Unlock()
	for f := 2; f > 0; f-- {
		cs := best[f]
		if len(cs) == 0 {
			continue
		}
		// Two distinct candidates, so that of two nodes the less loaded
		// is always the one picked.
		i := mrand.IntN(len(cs))
		pick := cs[i]
		if len(cs) > 1 {
			j := mrand.IntN(len(cs) - 1)
			if j >= i {
				j++
			}
			if cs[j].cost < pick.cost {
				pick = cs[j]
			}
		}
		if pick.ch.p != nil {
			pick.ch.p.inflight.Add(1)
			pick.ch.p.forwarded.Add(1)
			pick.ch.cluster = c
		}
		return pick.ch
	}
	return Choice{Self: true, Node: c.self}
}

// proxyAddr is the forward proxy of the node whose API is at api: its
// host, the port its Ping gave; "" without one.
func proxyAddr(api string, port int) string {
	host, _, err := net.SplitHostPort(api)
	if err != nil || port <= 0 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// NodeToken is this node's id and token, for a node call made outside
// gRPC (a CONNECT tunnelled through a peer's proxy).
func (c *Cluster) NodeToken() (id, token string) { return c.self, Token(c.cfg.Secret, c.self) }

// Verify reports whether token is node's, for a node call made outside
// gRPC.
func (c *Cluster) Verify(node, token string) bool { return validToken(c.cfg.Secret, node, token) }

// markDown takes p out of rotation after a forward failed in transport.
func (c *Cluster) markDown(p *peer, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.state == Down {
		return
	}
	old := p.state
	p.state, p.oks, p.lastErr = Down, 0, status.Convert(err).Message()
	c.log.Warn("cluster: peer down: a forward failed in transport", "address", p.addr, "node", p.id, "was", old.String(), "err", p.lastErr)
}

// NodeStatus is one node as GET /api/nodes shows it.
type NodeStatus struct {
	ID      string   `json:"id"`
	Address string   `json:"address"`
	Version string   `json:"version"`
	State   string   `json:"state"`
	Self    bool     `json:"self"`
	Routes  int      `json:"routes"`
	Usable  int      `json:"routes_usable"`
	Groups  []string `json:"labels"` // its routes' label sets
	// Cooling counts, by target, its usable routes not usable for that
	// target.
	Cooling   map[string]int `json:"cooling_targets,omitempty"`
	Inflight  int64          `json:"inflight"`
	LastCheck time.Time      `json:"last_check"`
	LastError string         `json:"last_error,omitempty"`
	// ForwardedIn counts the forwards this node ran for entries (on this
	// node's line) and ForwardedOut those it sent to the node.
	ForwardedIn  int64 `json:"forwarded_in"`
	ForwardedOut int64 `json:"forwarded_out"`
}

// localSummaryAge is how long Pick reuses this node's Summary: reading
// it walks every route, too much for every request of a large pool.
const localSummaryAge = time.Second

// localSummary is Local's answer, read again once localSummaryAge old.
func (c *Cluster) localSummary() Summary {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	if now := c.now(); c.localAt.IsZero() || now.Sub(c.localAt) >= localSummaryAge || now.Before(c.localAt) {
		c.localSum, c.localAt = c.local(), now
	}
	return c.localSum
}

// Conn is the connection to the peer whose id is node, if one is known.
func (c *Cluster) Conn(node string) (*grpc.ClientConn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.peers {
		if p.id == node && !p.self {
			return p.conn, true
		}
	}
	return nil, false
}

// CountForwardedIn counts a request an entry forwarded here, run here.
func (c *Cluster) CountForwardedIn() { c.forwardedIn.Add(1) }

// Instance is this process's random instance, for Ping.
func (c *Cluster) Instance() string { return c.instance }

// Nodes is every node, this one first, then the peers by address.
func (c *Cluster) Nodes() []NodeStatus {
	s := c.local()
	out := []NodeStatus{{
		ID: c.self, Address: c.addr, Version: s.Version, State: Up.String(), Self: true, Routes: s.Routes, Usable: s.Usable,
		Groups: groupNames(s.Groups), Cooling: cooling(s.Groups), Inflight: s.Inflight, LastCheck: c.now(), ForwardedIn: c.forwardedIn.Load(),
	}}
	c.mu.Lock()
	for _, p := range c.peers {
		if p.self {
			continue
		}
		out = append(out, NodeStatus{
			ID: p.id, Address: p.addr, Version: p.summary.Version, State: p.state.String(), Routes: p.summary.Routes, Usable: p.summary.Usable,
			Groups: groupNames(p.summary.Groups), Cooling: cooling(p.summary.Groups), Inflight: p.summary.Inflight, LastCheck: p.lastCheck, LastError: p.lastErr,
			ForwardedOut: p.forwarded.Load(),
		})
	}
	c.mu.Unlock()
	slices.SortFunc(out[1:], func(a, b NodeStatus) int { return strings.Compare(a.Address, b.Address) })
	return out
}

// cooling sums the groups' cooling counts by target; nil for none.
func cooling(gs []Group) map[string]int {
	var out map[string]int
	for _, g := range gs {
		for t, n := range g.Cooling {
			if out == nil {
				out = map[string]int{}
			}
			out[t] += n
		}
	}
	return out
}

func groupNames(gs []Group) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Labels.String()
	}
	return out
}

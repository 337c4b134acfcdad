package cluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

func TestToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc             string
		secret, id       string
		checkSecret, who string
		want             bool
	}{
		{"the node's own token", "s3cret", "n1", "s3cret", "n1", true},
		{"another node's token", "s3cret", "n1", "s3cret", "n2", false},
		{"another secret", "s3cret", "n1", "other", "n1", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tok := Token(tc.secret, tc.id)
			if len(tok) != 43 || strings.Contains(tok, tc.secret) {
				t.Fatalf("Token = %q: want 43 base64url characters, not the secret", tok)
			}
			if got := validToken(tc.checkSecret, tc.who, tok); got != tc.want {
				t.Fatalf("validToken(%q, %q) = %v, want %v", tc.checkSecret, tc.who, got, tc.want)
			}
		})
	}
}

func TestIdentify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc       string
		configured string
		host       string
		hostErr    error
		want       Identity
		warns      bool
		fails      bool
	}{
		{desc: "configured", configured: "n1", host: "box", want: Identity{ID: "n1"}},
		{desc: "host name, loudly", host: "box", want: Identity{ID: "box", Detected: true}, warns: true},
		{desc: "no host name", hostErr: errors.New("no name"), fails: true},
		{desc: "empty host name", fails: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var logged bytes.Buffer
			got, err := identify(tc.configured, func() (string, error) { return tc.host, tc.hostErr }, slog.New(slog.NewTextHandler(&logged, nil)))
			if (err != nil) != tc.fails || got != tc.want {
				t.Fatalf("identify = %+v, %v; want %+v, fails %v", got, err, tc.want, tc.fails)
			}
			if warned := strings.Contains(logged.String(), "AUTO-DETECTED"); warned != tc.warns {
				t.Fatalf("warned %v, want %v: %s", warned, tc.warns, logged.String())
			}
		})
	}
}

// node is a peer on 127.0.0.1: the cluster interceptors of its own
// Cluster (secret), grpc.health.v1, and a Ping answering summary unless
// noPing (an older node).
type node struct {
	addr string
	srv  *grpc.Server
}

type pinger struct {
	pb.UnimplementedFetcherServer
	id       string
	instance string
	summary  Summary
}

func (p pinger) Ping(ctx context.Context, _ *pb.PingRequest) (*pb.PingResponse, error) {
	if _, ok := CallFrom(ctx); !ok {
		return nil, status.Error(codes.Unauthenticated, "not a node")
	}
	resp := p.summary.PingResponse(p.id, time.Second)
	resp.ClusterAuth, resp.Instance = true, p.instance
	return resp, nil
}

func startNode(t *testing.T, id, secret string, summary Summary, noPing bool) *node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, id, secret, nil)
	srv := grpc.NewServer(c.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if !noPing {
		pb.RegisterFetcherServer(srv, pinger{id: id, summary: summary})
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return &node{addr: ln.Addr().String(), srv: srv}
}

// testConfig checks with a short timeout and hysteresis of two.
func testConfig(secret string, peers ...string) Config {
	cfg := DefaultConfig()
	cfg.Secret, cfg.Peers, cfg.CheckTimeout = secret, peers, 2*time.Second
	return cfg
}

func newCluster(t *testing.T, id, secret string, peers []string, opts ...func(*Options)) *Cluster {
	t.Helper()
	o := Options{Self: id, Address: "127.0.0.1:1", Local: func() Summary { return Summary{Version: "test"} }}
	for _, f := range opts {
		f(&o)
	}
	c, err := New(testConfig(secret, peers...), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// closedAddr is an address on 127.0.0.1 that refuses connections.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func stateOf(c *Cluster, addr string) NodeStatus {
	for _, n := range c.Nodes() {
		if n.Address == addr {
			return n
		}
	}
	return NodeStatus{}
}

// TestChecksTellUnreachableFromWrongTokenFromOld checks three peers and a
// closed port: the right secret comes up after up_after checks, a wrong
// one is unauthenticated at once, an older node without Ping comes up
// with no summary, and the closed port goes down after down_after.
func TestChecksTellUnreachableFromWrongTokenFromOld(t *testing.T) {
	summary := Summary{Version: "v9", Routes: 2, Usable: 1, Groups: []Group{{Labels: engine.Labels{{Key: "region", Value: "eu"}}, Routes: 2, Usable: 1}}}
	good := startNode(t, "good", "s3cret", summary, false)
	wrong := startNode(t, "wrong", "other", summary, false)
	old := startNode(t, "old", "s3cret", summary, true)
	closed := closedAddr(t)
	c := newCluster(t, "me", "s3cret", []string{good.addr, wrong.addr, old.addr, closed})
	ctx := t.Context()
	c.Check(ctx)
	first := map[string]string{good.addr: "unknown", wrong.addr: "unauthenticated", old.addr: "unknown", closed: "unknown"}
	for addr, want := range first {
		if got := stateOf(c, addr).State; got != want {
			t.Errorf("after one check %s: %s, want %s", addr, got, want)
		}
	}
	c.Check(ctx)
	second := map[string]string{good.addr: "up", wrong.addr: "unauthenticated", old.addr: "up", closed: "down"}
	for addr, want := range second {
		if got := stateOf(c, addr).State; got != want {
			t.Errorf("after two checks %s: %s, want %s", addr, got, want)
		}
	}
	g := stateOf(c, good.addr)
	if g.ID != "good" || g.Version != "v9" || g.Routes != 2 || g.Usable != 1 || len(g.Groups) != 1 || g.Groups[0] != "region=eu" {
		t.Errorf("good's status: %+v", g)
	}
	if w := stateOf(c, wrong.addr); !strings.Contains(w.LastError, "cluster.secret") || strings.Contains(w.LastError, Token("s3cret", "me")) {
		t.Errorf("wrong's error: %q", w.LastError)
	}
	for _, tc := range []struct {
		addr, verdict string
	}{{good.addr, "ok"}, {wrong.addr, "wrong_token"}, {old.addr, "no_ping"}, {closed, "unreachable"}} {
		if p, err := c.Test(ctx, tc.addr); err != nil || p.Verdict != tc.verdict {
			t.Errorf("Test(%s) = %+v, %v: want %s", tc.addr, p, err, tc.verdict)
		}
	}
}

// TestHysteresis runs sequences of check results through record: one
// failure of an up peer or one pass of a down one moves nothing.
func TestHysteresis(t *testing.T) {
	t.Parallel()
	ok, fail, wrong := Probe{Verdict: "ok", Node: "p"}, Probe{Verdict: "unreachable"}, Probe{Verdict: "wrong_token"}
	for _, tc := range []struct {
		desc   string
		checks []Probe
		want   State
	}{
		{"new peer, one pass", []Probe{ok}, Unknown},
		{"new peer, two passes", []Probe{ok, ok}, Up},
		{"up, one failure", []Probe{ok, ok, fail}, Up},
		{"up, two failures", []Probe{ok, ok, fail, fail}, Down},
		{"up, failures not in a row", []Probe{ok, ok, fail, ok, fail}, Up},
		{"down, one pass", []Probe{fail, fail, ok}, Down},
		{"down, two passes", []Probe{fail, fail, ok, ok}, Up},
		{"wrong token at once", []Probe{ok, ok, wrong}, Unauthenticated},
		{"wrong token, then unreachable", []Probe{wrong, fail}, Down},
		{"wrong token fixed", []Probe{wrong, ok, ok}, Up},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c := &Cluster{cfg: DefaultConfig(), self: "me", now: time.Now, log: slog.New(slog.DiscardHandler)}
			p := &peer{addr: "127.0.0.1:1"}
			for _, r := range tc.checks {
				c.record(p, r)
			}
			if p.state != tc.want {
				t.Fatalf("state %s, want %s", p.state, tc.want)
			}
		})
	}
}

// TestPick picks among nodes whose routes fit: the labels only a peer
// has go to it, labels nobody has stay here, a tried node is skipped, and
// a down peer is never picked.
func TestPick(t *testing.T) {
	t.Parallel()
	eu := engine.Labels{{Key: "region", Value: "eu"}}
	us := engine.Labels{{Key: "region", Value: "us"}}
	c := &Cluster{cfg: DefaultConfig(), self: "me", now: time.Now, log: slog.New(slog.DiscardHandler), peers: map[string]*peer{
		"a:1": {addr: "a:1", id: "a", state: Up, summary: Summary{Usable: 1, Groups: []Group{{Labels: us, Routes: 1, Usable: 1, Cooling: map[string]int{"banned.example": 1}}}}},
		"b:1": {addr: "b:1", id: "b", state: Down, summary: Summary{Usable: 1, Groups: []Group{{Labels: us, Routes: 1, Usable: 1}}}},
		"c:1": {addr: "c:1", id: "c", state: Up, summary: Summary{Groups: []Group{{Labels: append(eu, engine.Label{Key: "plan", Value: "x"}), Routes: 1}}}},
	}}
	c.local = func() Summary { return Summary{Usable: 1, Groups: []Group{{Labels: eu, Routes: 1, Usable: 1}}} }
	for _, tc := range []struct {
		desc   string
		labels engine.Labels
		target string
		tried  map[string]bool
		want   string
	}{
		{"only a peer fits", us, "shop.example", nil, "a"},
		{"only this node fits", eu, "", nil, "me"},
		{"nobody fits: here", engine.Labels{{Key: "region", Value: "jp"}}, "", nil, "me"},
		{"the fitting peer was tried", us, "", map[string]bool{"a": true}, "me"},
		{"only an unusable route fits", engine.Labels{{Key: "plan", Value: "x"}}, "", nil, "c"},
		{"the peer's only fit cools for the target: still the best", us, "banned.example", nil, "a"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ch := c.Pick(tc.labels, tc.target, tc.tried)
			defer ch.Done(nil)
			if ch.Node != tc.want {
				t.Fatalf("picked %q, want %q", ch.Node, tc.want)
			}
		})
	}
}

// TestForwardedIsNeverForwardedAgain calls a peer from the context of a
// forward received, as a misconfigured node would: the call never
// leaves.
func TestForwardedIsNeverForwardedAgain(t *testing.T) {
	target := startNode(t, "target", "s3cret", Summary{Routes: 1, Usable: 1, Groups: []Group{{Routes: 1, Usable: 1}}}, false)
	c := newCluster(t, "me", "s3cret", []string{target.addr})
	c.Check(t.Context())
	c.Check(t.Context())
	ch := c.Pick(nil, "", nil)
	if ch.Self {
		t.Fatal("the peer was not picked")
	}
	forwarded := context.WithValue(t.Context(), callKey{}, Call{Node: "entry", Entry: "entry"})
	_, err := pb.NewFetcherClient(ch.Conn).Ping(c.ForwardContext(forwarded, "", ""), &pb.PingRequest{})
	ch.Done(err)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "one hop") {
		t.Fatalf("second hop: %v", err)
	}
	if _, err := pb.NewFetcherClient(ch.Conn).Ping(c.ForwardContext(t.Context(), "", ""), &pb.PingRequest{}); err != nil {
		t.Fatalf("first hop: %v", err)
	}
}

// TestForwardMarkerNeedsAToken sends the forward marker without a node
// token, as a user forging one would: refused.
func TestForwardMarkerNeedsAToken(t *testing.T) {
	a := &authenticator{self: "me", secret: "s3cret", log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		desc string
		md   []string
		ok   bool
	}{
		{"a user's call", nil, true},
		{"forged entry", []string{mdEntry, "x"}, false},
		{"forged user", []string{mdUser, "root"}, false},
		{"node without token", []string{mdNode, "n1"}, false},
		{"node with another's token", []string{mdNode, "n1", mdToken, Token("s3cret", "n2")}, false},
		{"node with its token", []string{mdNode, "n1", mdToken, Token("s3cret", "n1")}, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := metadataIncoming(t.Context(), tc.md...)
			_, err := a.check(ctx, "/switchyard.v1.Fetcher/Fetch")
			if (err == nil) != tc.ok {
				t.Fatalf("check: %v, want ok %v", err, tc.ok)
			}
			if _, err := a.check(ctx, healthService+"Check"); err != nil {
				t.Fatalf("health needs no token: %v", err)
			}
		})
	}
}

func metadataIncoming(ctx context.Context, kv ...string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
}

// TestFits: a route cooling for a target does not fit requests for it, a
// route under the tier a request asks for does not fit it, and Summarize
// counts them so, through a Ping too.
func TestFits(t *testing.T) {
	t.Parallel()
	us := engine.Labels{{Key: "region", Value: "us"}}
	routes := []engine.RouteStatus{
		{ID: "r1", Labels: us, Health: engine.Health{State: engine.Healthy}, Targets: []engine.PairStatus{{Target: "banned.example", Health: engine.Health{State: engine.Cooling}}}},
		{ID: "r2", Labels: us, Health: engine.Health{State: engine.Healthy}, Targets: []engine.PairStatus{{Target: "banned.example", Health: engine.Health{State: engine.Cooling}}, {Target: "ok.example", Health: engine.Health{State: engine.Healthy}}}},
		{ID: "r3", Labels: engine.Labels{{Key: "region", Value: "eu"}}, Health: engine.Health{State: engine.Cooling}},
		// A provider gateway taking any city (docs/design/014).
		{ID: "gw", Labels: engine.Labels{{Key: "city", Value: engine.AnyValue}}, Health: engine.Health{State: engine.Healthy}},
		// A costlier tier, only for de, and cooling for banned.example too.
		{ID: "x1", Labels: engine.Labels{{Key: "region", Value: "de"}}, Tier: 1, Health: engine.Health{State: engine.Healthy}},
	}
	s := Summarize("v", routes)
	back := summaryOf(s.PingResponse("n", 0))
	for _, tc := range []struct {
		desc   string
		labels engine.Labels
		target string
		want   int
	}{
		{"usable for the target", us, "ok.example", 2},
		{"no evidence of the target", us, "new.example", 2},
		{"every fit cools for the target", us, "banned.example", 1},
		{"only an unusable route fits", engine.Labels{{Key: "region", Value: "eu"}}, "", 1},
		{"nothing fits", engine.Labels{{Key: "region", Value: "jp"}}, "", 0},
		{"a gateway takes any value", engine.Labels{{Key: "city", Value: "paris"}}, "", 2},
		{"a tier asked for, with labels", engine.Labels{{Key: "region", Value: "de"}, {Key: engine.TierKey, Value: "1"}}, "", 2},
		{"a tier no route of the labels has", engine.Labels{{Key: "region", Value: "us"}, {Key: engine.TierKey, Value: "1"}}, "", 0},
		{"a tier above every route's", engine.Labels{{Key: engine.TierKey, Value: "2"}}, "", 0},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := s.fits(tc.labels, tc.target); got != tc.want {
				t.Errorf("fits = %d, want %d", got, tc.want)
			}
			if got := back.fits(tc.labels, tc.target); got != tc.want {
				t.Errorf("fits after a Ping = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestOwnAddressIsNoSecondNode lists a node's own address under another
// spelling (localhost for 127.0.0.1): its Ping gives its own instance, so
// it is dropped quietly, never warned of as a second node with its id;
// another process with the same id is warned of.
func TestOwnAddressIsNoSecondNode(t *testing.T) {
	var logged logtest.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	self := newCluster(t, "me", "s3cret", []string{"localhost:" + port}, func(o *Options) { o.Log = log })
	srv := grpc.NewServer(self.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	pb.RegisterFetcherServer(srv, pinger{id: "me", instance: self.Instance()})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()
	self.Check(t.Context())
	if got := len(self.Nodes()); got != 1 || strings.Contains(logged.String(), "CLAIMED TWICE") {
		t.Fatalf("own address: %d nodes listed, log:\n%s", got, logged.String())
	}
	twin := newCluster(t, "me", "s3cret", []string{ln.Addr().String()})
	twin.Check(t.Context())
	if !strings.Contains(logged.String(), "CLAIMED TWICE") {
		t.Fatalf("a second process with this id was not warned of:\n%s", logged.String())
	}
}

// A peer that was down a while and restarts is back within up_after
// checks: its connection is dialled again at least every check, not after
// gRPC's own backoff, which grows to two minutes (5.5 s down left its next
// attempt 3 to 4.5 s after the restart).
func TestRestartedPeerIsBackWithinChecks(t *testing.T) {
	t.Parallel()
	const every = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) func() {
		srv := grpc.NewServer(newCluster(t, "p", "s", nil).ServerOptions()...)
		healthpb.RegisterHealthServer(srv, health.NewServer())
		pb.RegisterFetcherServer(srv, pinger{id: "p"})
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ln) }()
		return func() { srv.Stop(); <-done }
	}
	stop := serve(ln)
	cfg := testConfig("s", addr)
	cfg.CheckInterval = every
	c, err := New(cfg, Options{Self: "me", Address: "127.0.0.1:1", Local: func() Summary { return Summary{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	until := func(want State, within time.Duration) time.Duration {
		start := time.Now()
		for stateOf(c, addr).State != want.String() {
			if time.Since(start) > within {
				t.Fatalf("peer %s, not %s, %v after", stateOf(c, addr).State, want, within)
			}
			c.Check(t.Context())
			time.Sleep(every)
		}
		return time.Since(start)
	}
	until(Up, 5*time.Second)
	stop()
	until(Down, 5*time.Second)
	for deadline := time.Now().Add(5500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(every) {
		c.Check(t.Context()) // down a while: gRPC's backoff would grow
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the peer's address was taken meanwhile: %v", err)
	}
	defer serve(ln)()
	if back := until(Up, 10*time.Second); back > 2*time.Second {
		t.Errorf("the restarted peer was up %v after, want within a few checks of %v", back, every)
	}
}

package client

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/internal/dnstest"
	"github.com/switchyard/switchyard/internal/gateway"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// TestNodesBalanceAndFailOver runs two gateways and a client of both:
// calls reach both; with one cut, every GET is answered by the other and
// the cut one leaves rotation for the cooldown, then is tried again.
func TestNodesBalanceAndFailOver(t *testing.T) {
	s := site(t)
	lns := make([]net.Listener, 2)
	srvs := make([]*http.Server, 2)
	addrs := make([]string, 2)
	for i, id := range []string{"n1", "n2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
		srvs[i] = serveNode(t, ln, 1, gateway.Config{}, id)
	}
	now := time.Now()
	clock := func() time.Time { return now }
	c, err := NewNodes(addrs, WithToken("alice:pw"), WithNodeCooldown(time.Minute), withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := map[string]int{}
	for range 20 {
		resp, err := c.Fetch(testContext(t), s.URL+"/p")
		if err != nil && resp == nil {
			t.Fatal(err)
		}
		ran[resp.Node]++
	}
	if ran["n1"] == 0 || ran["n2"] == 0 {
		t.Fatalf("calls by node: %v, want both", ran)
	}
	srvs[1].Close() // n2 is cut: its connections and listener
	for i := range 20 {
		resp, err := c.Fetch(testContext(t), s.URL+"/q")
		if resp == nil || resp.Node != "n1" {
			t.Fatalf("GET %d after the cut: %v, %v", i, resp, err)
		}
	}
	if up := c.Nodes(); !up[addrs[0]] || up[addrs[1]] {
		t.Fatalf("in rotation: %v", up)
	}
	now = now.Add(time.Minute)
	if up := c.Nodes(); !up[addrs[1]] {
		t.Fatalf("after the cooldown: %v", up)
	}
}

// TestNodesNeverResendAPost: a POST whose node failed in transport is
// not sent to another node.
func TestNodesNeverResendAPost(t *testing.T) {
	c := withNodes(options{retries: 2, backoff: time.Millisecond, now: time.Now, cooldown: time.Minute}, "n1", "n2")
	for _, tc := range []struct {
		desc       string
		idempotent bool
		want       int
	}{
		{"GET: every node, then once more", true, 3},
		{"POST: once", false, 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			for _, n := range c.list() {
				n.downUntil = time.Time{}
			}
			tries := 0
			err := c.call(context.Background(), tc.idempotent, func(context.Context, pb.FetcherClient) error {
				tries++
				return status.Error(codes.Unavailable, "cut")
			})
			if tries != tc.want || err.(*Error).Code != CodeUnavailable {
				t.Fatalf("%d tries (%v), want %d", tries, err, tc.want)
			}
		})
	}
}

// withNodes is a client of nodes at addrs that calls nothing: for tests
// of call's decisions, whose calls never reach a node's connection.
func withNodes(o options, addrs ...string) *Client {
	c := &Client{opts: o}
	nodes := make([]*node, len(addrs))
	for i, a := range addrs {
		nodes[i] = &node{addr: a}
	}
	c.nodes.Store(&nodes)
	return c
}

// TestNodesFromDNS finds two gateways by the SRV records of a DNS server
// on 127.0.0.1: calls reach both; with one record removed and resolved
// again, only the other.
func TestNodesFromDNS(t *testing.T) {
	s := site(t)
	d := dnstest.Start(t)
	var srvs []dnstest.SRV
	for _, id := range []string{"n1", "n2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serveNode(t, ln, 1, gateway.Config{}, id)
		d.Set(id+".nodes.test.", []string{"127.0.0.1"}, nil)
		srvs = append(srvs, dnstest.SRV{Target: id + ".nodes.test.", Port: uint16(ln.Addr().(*net.TCPAddr).Port)})
	}
	d.Set("_api._tcp.nodes.test.", nil, srvs)
	c, err := NewNodes(nil, WithToken("alice:pw"), WithDNS("_api._tcp.nodes.test.", time.Hour, d.Resolver()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := func() map[string]int {
		out := map[string]int{}
		for range 10 {
			resp, err := c.Fetch(testContext(t), s.URL+"/p")
			if resp == nil {
				t.Fatal(err)
			}
			out[resp.Node]++
		}
		return out
	}
	if got := ran(); got["n1"] == 0 || got["n2"] == 0 {
		t.Fatalf("calls by node: %v, want both", got)
	}
	d.Set("_api._tcp.nodes.test.", nil, srvs[:1])
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if got := ran(); got["n1"] != 10 || len(c.Nodes()) != 1 {
		t.Fatalf("after n2's record went: calls %v, nodes %v", got, c.Nodes())
	}
}

// A node that was down a while and restarts takes calls again within a
// cooldown or so: its connection is dialled again at least every
// cooldown, not after gRPC's own backoff, which grows to two minutes
// (5.5 s down left its next attempt 3 to 4.5 s after the restart).
func TestRestartedNodeIsCalledAgain(t *testing.T) {
	t.Parallel()
	const cooldown = 100 * time.Millisecond
	s := site(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := serveNode(t, ln, 1, gateway.Config{}, "n1")
	c, err := NewNodes([]string{addr}, WithToken("alice:pw"), WithNodeCooldown(cooldown))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(testContext(t), s.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	for deadline := time.Now().Add(5500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(cooldown) {
		c.Fetch(testContext(t), s.URL+"/down") // fails: gRPC's backoff would grow
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the node's address was taken meanwhile: %v", err)
	}
	serveNode(t, ln, 1, gateway.Config{}, "n1")
	start := time.Now()
	for {
		resp, err := c.Fetch(testContext(t), s.URL+"/b")
		if err == nil && resp.Node == "n1" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the restarted node never answered: %v", err)
		}
		time.Sleep(cooldown)
	}
	if back := time.Since(start); back > 2*time.Second {
		t.Errorf("the restarted node answered %v after, want within a few cooldowns of %v", back, cooldown)
	}
}

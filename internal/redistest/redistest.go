// Package redistest gives tests a real Redis: the one CI names in
// SWITCHYARD_TEST_REDIS (default 127.0.0.1:6379) under a key prefix of the
// test's own, a redis-server of the test's own that it can stop and start
// again, or a Redis Cluster of its own.
package redistest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/internal/freeport"
	"github.com/switchyard/switchyard/internal/logtest"
)

// Addr is the shared test Redis. Without one the test skips, except in CI
// (CI=true), where that fails: .ci/run makes sure one runs.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SWITCHYARD_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if err := ping(addr, 2*time.Second); err != nil {
		unavailable(t, "no Redis at "+addr+" (set SWITCHYARD_TEST_REDIS): "+err.Error())
	}
	return addr
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func ping(addr string, wait time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: wait, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Prefix is a key prefix of the test's own on addr; its keys are deleted
// when the test ends.
func Prefix(t testing.TB, addr string) string {
	t.Helper()
	prefix := "switchyard-test-" + rand.Text()[:10]
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}

// Server is a redis-server of the test's own on 127.0.0.1, keeping nothing
// on disk, stopped when the test ends.
type Server struct {
	Addr string
	t    testing.TB
	node *node
}

// Start starts a redis-server on a free port. Without the binary the test
// skips (fails in CI).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "no redis-server binary: "+err.Error())
	}
	n, err := startNode(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: n.addr, t: t, node: n}
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on its address, empty. The address is
// the one clients know, so a port taken meanwhile is waited for, boundedly.
func (s *Server) Restart() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s.node, err = startNode(s.t.TempDir(), []string{port}); err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not start again on port %s: %v", port, err)
		}
	}
}

// Stop kills the server, as a crash would.
func (s *Server) Stop() {
	if s.node != nil {
		s.node.stop()
		s.node = nil
	}
}

// Cluster is a Redis Cluster of the test's own: three masters on
// 127.0.0.1, no replicas, keeping nothing on disk, stopped when the test
// ends.
type Cluster struct {
	Addrs []string
	nodes []*node
}

// StartCluster starts a three-node cluster and waits until every node says
// cluster_state:ok. Without redis-server or redis-cli the test skips (fails
// in CI). When the cluster does not come up, the test fails with every
// node's output.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable(t, "no "+bin+" binary: "+err.Error())
		}
	}
	dir := t.TempDir()
	c := &Cluster{}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, format, args...)
		for i, n := range c.nodes {
			fmt.Fprintf(&b, "\n--- node %d (%s) output:\n%s", i, n.addr, n.out.String())
		}
		t.Fatal(b.String())
	}
	for range 3 {
		// Each node also listens on its cluster bus port, chosen free too.
		n, err := startNode(dir, nil, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
		if err != nil {
			fail("starting a cluster node: %v", err)
		}
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		fail("redis-cli --cluster create: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, n := range c.nodes {
			nc := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
			info, err := nc.ClusterInfo(context.Background()).Result()
			nc.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok")
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			fail("the cluster did not reach cluster_state:ok in 30s")
		}
	}
}

// node is one redis-server process of a test's own.
type node struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	out    *logtest.Buffer
}

// startNode starts a redis-server on 127.0.0.1 and returns once that very
// process answers: PING answered by a server whose process id is its own,
// not another test's server that got the port first. The port is ports[0]
// when given; otherwise ports (the client port, and with
// --cluster-enabled the bus port) are picked free, and picked again, up to
// a few times, when the server could not bind one because something took
// it meanwhile. The error quotes the server's output.
func startNode(dir string, ports []string, extra ...string) (*node, error) {
	cluster := slices.Contains(extra, "--cluster-enabled")
	var err error
	for range 5 {
		port, bus := "", ""
		if len(ports) > 0 {
			port = ports[0]
		} else if port, err = freePort(); err != nil {
			return nil, err
		}
		args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
		if cluster {
			if bus, err = freePort(); err != nil {
				return nil, err
			}
			args = append(args, "--cluster-port", bus, "--cluster-config-file", "nodes-"+port+".conf")
		}
		var n *node
		if n, err = runNode(net.JoinHostPort("127.0.0.1", port), append(args, extra...)); err == nil {
			return n, nil
		}
		if len(ports) > 0 {
			return nil, err // the caller's port: it decides whether to wait
		}
	}
	return nil, err
}

// freePort is a port nothing listened on a moment ago (freeport.Addr's).
func freePort() (string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// runNode runs redis-server with args and waits, at most 10 s, for it to
// answer on addr; it fails at once when the server exits first (a port
// taken, say).
func runNode(addr string, args []string) (*node, error) {
	n := &node{addr: addr, cmd: exec.Command("redis-server", args...), exited: make(chan struct{}), out: &logtest.Buffer{}}
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.cmd.Wait(); close(n.exited) }()
	pid := "process_id:" + strconv.Itoa(n.cmd.Process.Pid)
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-n.exited:
			return nil, fmt.Errorf("redis-server %s exited:\n%s", strings.Join(args, " "), n.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		info, err := c.Info(context.Background(), "server").Result()
		if err == nil && strings.Contains(info, pid+"\r\n") {
			return n, nil
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("redis-server %s did not answer in 10s (last: %v):\n%s", strings.Join(args, " "), err, n.out.String())
		}
	}
}

// stop kills the process, as a crash would, and waits for it.
func (n *node) stop() {
	n.cmd.Process.Kill()
	<-n.exited
}

// URL is the cluster as a state URL.
func (c *Cluster) URL() string {
	u := "redis-cluster://" + c.Addrs[0]
	for i, a := range c.Addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// Package redistest gives tests a real Redis: the one CI names in
// SWITCHYARD_TEST_REDIS (default 127.0.0.1:6379) under a key prefix of the
// test's own, a redis-server of the test's own that it can stop and start
// again, or a Redis Cluster of its own.
package redistest

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free port. Without the binary the test
// skips (fails in CI).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "no redis-server binary: "+err.Error())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{Addr: addr, t: t}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on its address, empty.
func (s *Server) Restart() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ping(s.Addr, 100*time.Millisecond) != nil; {
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on port %s did not answer", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server, as a crash would.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Cluster is a Redis Cluster of the test's own: three masters on
// 127.0.0.1, no replicas, keeping nothing on disk, stopped when the test
// ends.
type Cluster struct {
	Addrs []string
	nodes []*exec.Cmd
}

// StartCluster starts a three-node cluster and waits until it serves every
// slot. Without redis-server or redis-cli the test skips (fails in CI).
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
			n.Process.Kill()
			n.Wait()
		}
	})
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+port+".conf", "--cluster-node-timeout", "2000")
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, cmd)
		c.Addrs = append(c.Addrs, addr)
		for deadline := time.Now().Add(5 * time.Second); ping(addr, 100*time.Millisecond) != nil; {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %d on %s did not answer", i, addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer cc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, addr := range c.Addrs {
			nc := redis.NewClient(&redis.Options{Addr: addr})
			info, err := nc.ClusterInfo(context.Background()).Result()
			nc.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok")
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not reach cluster_state:ok")
		}
	}
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

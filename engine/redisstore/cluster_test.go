package redisstore

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/storetest"
	"github.com/switchyard/switchyard/internal/redistest"
)

// On a Redis Cluster every script touches one slot, a route's keys share
// it, and the resync scans every master: the same suites pass, and two
// processes share their records.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	open := func(t *testing.T, prefix string, opts Options) *Store {
		opts.Prefix = prefix
		if opts.Timeout == 0 {
			opts.Timeout = time.Second
		}
		s, err := Open(cluster.URL(), opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		<-s.Ready()
		t.Cleanup(func() { cancel(); <-done; s.Close() })
		return s
	}
	// The cluster is the test's own and goes with it: prefixes need only be
	// distinct.
	fresh := func(t *testing.T) engine.Store { return open(t, "t-"+rand.Text()[:10], Options{}) }
	t.Run("conformance", func(t *testing.T) { storetest.Run(t, fresh) })
	t.Run("engine parity", func(t *testing.T) { storetest.RunEngine(t, fresh) })
	t.Run("pacing", func(t *testing.T) {
		storetest.RunPace(t, func(t *testing.T) func() engine.Store {
			prefix := "t-" + rand.Text()[:10]
			return func() engine.Store { return open(t, prefix, Options{}) }
		})
	})
	t.Run("two processes", func(t *testing.T) {
		a, b := open(t, "shared", Options{}), open(t, "shared", Options{})
		cfg := engine.DefaultConfig()
		var routes []string
		for i := range 20 { // spread over the cluster's slots
			id := "route-" + string(rune('a'+i))
			routes = append(routes, id)
			a.AddRoute(int32(i), id)
			b.AddRoute(int32(i), id)
		}
		for i := range routes {
			a.Update(&cfg, engine.Key{Route: int32(i)}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.ProxyAuth}}, time.Now().UnixNano())
		}
		waitFor(t, "b sees every route a cooled", func() bool {
			for i := range routes {
				if h, _ := b.Read(engine.Key{Route: int32(i)}); h.State != engine.Cooling {
					return false
				}
			}
			return true
		})
		// A third process resyncs them all from the masters.
		c := open(t, "shared", Options{})
		for i, id := range routes {
			c.AddRoute(int32(i), id)
		}
		waitFor(t, "a late process resyncs every route from the cluster", func() bool {
			for i := range routes {
				if h, _ := c.Read(engine.Key{Route: int32(i)}); h.State != engine.Cooling {
					return false
				}
			}
			return true
		})
		if c.Addr() == "" || a.Healthy() != nil {
			t.Fatalf("addr %q, healthy %v", c.Addr(), a.Healthy())
		}
	})
}

package redisstore

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/redistest"
)

// cutter forwards TCP connections to a Redis until cut, refusing them
// until restored on the same port: one process's network path to Redis,
// failing while the others' does not.
type cutter struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener      // guarded by mu; nil while cut
	conns  map[net.Conn]bool // guarded by mu
	wg     sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	c := &cutter{target: target, conns: make(map[net.Conn]bool)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(func() { c.cut(); c.wg.Wait() })
	return c
}

func (c *cutter) serve(ln net.Listener) {
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns[in], c.conns[out] = true, true
			c.mu.Unlock()
			c.wg.Add(2)
			go func() { defer c.wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer c.wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every connection through it.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	for conn := range c.conns {
		conn.Close()
	}
	clear(c.conns)
}

// restore listens again on the same address.
func (c *cutter) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.serve(ln)
}

// cutOffPair returns a store a that reaches Redis through link and one b
// that reaches it directly, both with the routes r0 … r(routes-1).
func cutOffPair(t *testing.T, routes int) (link *cutter, a, b *Store) {
	t.Helper()
	addr := redisAddr(t)
	prefix := testPrefix(t, addr)
	link = newCutter(t, addr)
	a = newStore(t, link.addr, prefix, Options{Resync: time.Hour})
	b = newStore(t, addr, prefix, Options{})
	for _, s := range []*Store{a, b} {
		for i := range routes {
			s.AddRoute(int32(i), fmt.Sprintf("r%d", i))
		}
	}
	return link, a, b
}

// cutOff cuts a off from Redis and makes a call of a's fail, which
// degrades it.
func cutOff(t *testing.T, link *cutter, a *Store) {
	t.Helper()
	link.cut()
	cfg := engine.DefaultConfig()
	a.Update(&cfg, engine.Key{Route: 0}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: engine.OK}}, time.Now().UnixNano())
	waitFor(t, "a degrades", func() bool { return a.Stats().Degraded })
}

// Cut off from Redis, a process keeps serving from its local state and says
// so; when Redis returns, what it changed meanwhile is merged, except where
// another process changed the same record since: newer shared state wins.
func TestOutageAndMerge(t *testing.T) {
	link, a, b := cutOffPair(t, 2)
	cfg := engine.DefaultConfig()
	cfg.MaxRemovedShare = -1
	observe := func(s *Store, route int32, c engine.Class) engine.Change {
		ch, _ := s.Update(&cfg, engine.Key{Route: route}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: c}}, time.Now().UnixNano())
		return ch
	}
	observe(a, 0, engine.OK)
	observe(a, 1, engine.OK)
	waitFor(t, "b sees a's records", func() bool { h, _ := b.Read(engine.Key{Route: 1}); return h.Samples == 1 })

	link.cut()
	// Served from local state: the first failed call degrades the store.
	if ch := observe(a, 0, engine.ProxyAuth); ch.To != engine.Cooling {
		t.Fatalf("a 407 during the outage left r0 %v", ch.To)
	}
	if a.Healthy() == nil || !a.Stats().Degraded || a.Stats().Outages != 1 {
		t.Fatalf("a is not degraded: %v %+v", a.Healthy(), a.Stats())
	}
	if _, ok := a.Lease(engine.LeaseRecord{Route: 1, Taken: time.Now().UnixNano(), Expires: time.Now().Add(time.Minute).UnixNano()}, 1); !ok {
		t.Fatal("a refused a lease during the outage")
	}
	// Both change r1: b's reaches Redis, a's stays local.
	observe(a, 1, engine.ProxyTimeout)
	observe(b, 1, engine.OK)
	observe(b, 1, engine.OK)

	link.restore(t)
	waitFor(t, "a recovers", func() bool { return a.Healthy() == nil })
	// r0, changed by a alone, is merged: b learns it cooled.
	waitFor(t, "b sees a's cooling", func() bool { h, _ := b.Read(engine.Key{Route: 0}); return h.State == engine.Cooling })
	// r1 was changed by b meanwhile: b's record stands, and a takes it.
	h, _ := a.Read(engine.Key{Route: 1})
	if h.Samples != 3 || h.ConsecFail != 0 {
		t.Errorf("a's r1 after the merge: %d samples, %d failures; want b's record (3 samples, no failure)", h.Samples, h.ConsecFail)
	}
	if hb, _ := b.Read(engine.Key{Route: 1}); hb.Samples != 3 {
		t.Errorf("b's r1 was overwritten by a's offline change: %d samples", hb.Samples)
	}
}

// Redis restarted empty (no persistence): records written afterwards still
// reach every process, whose local models remember higher versions of the
// lost ones.
func TestRedisRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, srv.Addr, "restart", Options{Resync: 200 * time.Millisecond})
	b := newStore(t, srv.Addr, "restart", Options{Resync: 200 * time.Millisecond})
	cfg := engine.DefaultConfig()
	for _, s := range []*Store{a, b} {
		s.AddRoute(0, "r0")
	}
	observe := func(c engine.Class) {
		a.Update(&cfg, engine.Key{Route: 0}, engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: c}}, time.Now().UnixNano())
	}
	for range 5 {
		observe(engine.OK)
	}
	waitFor(t, "b sees a's record", func() bool { h, _ := b.Read(engine.Key{Route: 0}); return h.Samples == 5 })
	srv.Stop()
	srv.Restart()
	waitFor(t, "a and b reconnect", func() bool {
		observe(engine.ProxyAuth)
		h, _ := a.Read(engine.Key{Route: 0})
		return a.Healthy() == nil && h.State == engine.Cooling
	})
	waitFor(t, "b takes the record written after the restart", func() bool {
		h, _ := b.Read(engine.Key{Route: 0})
		return h.State == engine.Cooling
	})
}

// A session bound while a process was cut off from Redis is put into the
// shared state when Redis returns: kept where no other process bound it,
// or bound it to the same route; where another bound it to another route,
// it is a conflict for every process, so that neither exit carries it on
// silently.
func TestSessionsBoundOffline(t *testing.T) {
	link, a, b := cutOffPair(t, 2)
	until := time.Now().Add(time.Hour).UnixNano()
	cutOff(t, link, a)
	a.Bind("alone", 0, until)    // nobody else binds it
	a.Bind("agreed", 1, until)   // b binds it alike
	a.Bind("disputed", 0, until) // b binds it elsewhere
	b.Bind("agreed", 1, until+int64(time.Minute))
	b.Bind("disputed", 1, until)

	link.restore(t)
	waitFor(t, "a recovers", func() bool { return a.Healthy() == nil })
	c := newStore(t, b.Addr(), b.opts.Prefix, Options{}) // a process that saw none of it
	c.AddRoute(0, "r0")
	c.AddRoute(1, "r1")
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		id   string
		want int32
	}{
		{"alone", 0},
		{"agreed", 1},
		{"disputed", engine.SessionConflict},
	} {
		for name, s := range map[string]*Store{"a": a, "c": c} {
			if route, ok := s.Session(tc.id, now); !ok || route != tc.want {
				t.Errorf("%s: session %s on %d (%v), want %d", name, tc.id, route, ok, tc.want)
			}
		}
	}
	// b bound "disputed" online and cached it: it must not carry on there.
	waitFor(t, "b drops its binding of the disputed session", func() bool {
		route, _ := b.Session("disputed", now)
		return route == engine.SessionConflict
	})
	if route, ok := b.Session("agreed", now); !ok || route != 1 {
		t.Errorf("b: agreed session on %d (%v), want 1", route, ok)
	}
}

// Leases a process took through Redis and ended while cut off leave
// Redis when it returns: until their expiry they would count against
// every process's max_inflight.
func TestLeasesEndedOfflineLeaveRedis(t *testing.T) {
	link, a, b := cutOffPair(t, 1)
	lease := func(s *Store) (engine.LeaseRecord, bool) {
		now := time.Now()
		return s.Lease(engine.LeaseRecord{Route: 0, Taken: now.UnixNano(), Expires: now.Add(time.Minute).UnixNano()}, 2)
	}
	var ids []uint64
	for range 2 {
		rec, ok := lease(a)
		if !ok {
			t.Fatal("a refused a lease on an idle route")
		}
		ids = append(ids, rec.ID)
	}
	if _, ok := lease(b); ok {
		t.Fatal("b took a third lease on a route with max_inflight 2")
	}

	cutOff(t, link, a)
	for _, id := range ids {
		if _, ok := a.Release(id); !ok {
			t.Fatalf("lease %d was not a's", id)
		}
	}
	link.restore(t)
	waitFor(t, "a recovers", func() bool { return a.Healthy() == nil })
	for i := range 2 {
		if _, ok := lease(b); !ok {
			t.Fatalf("b's lease %d refused: the leases a ended offline still count in Redis", i+1)
		}
	}
}

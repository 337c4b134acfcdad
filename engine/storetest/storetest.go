// Package storetest is the conformance suite for engine.Store
// implementations: the semantics every store must provide, so the memory
// store and a shared store (Redis) are held to one test suite.
package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()

// Run runs the suite. newStore returns an empty store; the suite announces
// routes 0..3 and targets 1..3, with distinct names, to each subtest's own.
func Run(t *testing.T, newStore func(t *testing.T) engine.Store) {
	cfg := engine.DefaultConfig()
	c := &cfg
	fresh := func(t *testing.T) engine.Store {
		s := newStore(t)
		for r := range int32(4) {
			s.AddRoute(r, fmt.Sprintf("route-%d", r))
		}
		for n := int32(1); n <= 3; n++ {
			s.AddTarget(n, fmt.Sprintf("target-%d.example", n))
		}
		return s
	}
	observe := func(class engine.Class) engine.Op {
		return engine.Op{Kind: engine.OpObserve, Obs: engine.Observation{Class: class}}
	}

	t.Run("pairs exist only when created", func(t *testing.T) {
		s := fresh(t)
		pair := engine.Key{Route: 1, Target: 2}
		if _, ok := s.Update(c, pair, observe(engine.OK), t0); ok {
			t.Fatal("update without Create made a pair")
		}
		if _, ok := s.Read(pair); ok {
			t.Fatal("missing pair reads as present")
		}
		op := observe(engine.Blocked)
		op.Create = true
		if _, ok := s.Update(c, pair, op, t0); !ok {
			t.Fatal("Create did not make the pair")
		}
		h, ok := s.Read(pair)
		if !ok || h.Samples != 1 || h.ConsecFail != 1 {
			t.Fatalf("pair %+v after one failure", h)
		}
		n := 0
		s.Pairs(1, func(target int32, h engine.Health) { n++ })
		if n != 1 {
			t.Fatalf("Pairs listed %d records", n)
		}
		evicted := 0
		s.EvictPairs(1, t0+1, func(int32, *engine.Health) { evicted++ })
		if _, ok := s.Read(pair); ok || evicted != 1 {
			t.Fatalf("eviction: evicted %d, still present %v", evicted, ok)
		}
	})

	t.Run("stale generation records evidence but moves nothing", func(t *testing.T) {
		s := fresh(t)
		k := engine.Key{Route: 0}
		var gen uint32
		for i := range cfg.CoolAfter {
			op := observe(engine.ProxyTimeout)
			op.Gen, op.CheckGen = gen, true
			ch, _ := s.Update(c, k, op, t0+int64(i))
			if ch.Changed() {
				gen = ch.Gen
			}
		}
		before, _ := s.Read(k)
		op := observe(engine.OK)
		op.Gen, op.CheckGen = before.Gen-1, true
		if ch, _ := s.Update(c, k, op, t0+100); ch.Changed() {
			t.Fatal("stale success moved state")
		}
		after, _ := s.Read(k)
		if after.Samples != before.Samples+1 || after.State != before.State {
			t.Fatalf("stale outcome: samples %d→%d state %v→%v", before.Samples, after.Samples, before.State, after.State)
		}
	})

	t.Run("wake moves each cooldown exactly once", func(t *testing.T) {
		s := fresh(t)
		k := engine.Key{Route: 2}
		ch, _ := s.Update(c, k, observe(engine.ProxyAuth), t0)
		if ch.To != engine.Cooling {
			t.Fatalf("407 left %v", ch.To)
		}
		var probes atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := engine.Op{Kind: engine.OpWake, Gen: ch.Gen, CheckGen: true}
				if w, _ := s.Update(c, k, op, ch.Until); w.Probe {
					probes.Add(1)
				}
			}()
		}
		wg.Wait()
		if probes.Load() != 1 {
			t.Fatalf("%d wakers issued a probe, want exactly 1", probes.Load())
		}
	})

	t.Run("leases respect max_inflight under concurrency", func(t *testing.T) {
		s := fresh(t)
		const max = 3
		var got atomic.Int32
		var wg sync.WaitGroup
		ids := make(chan uint64, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rec, ok := s.Lease(engine.LeaseRecord{Route: 3, Target: 1, Taken: t0, Expires: t0 + 10}, max); ok {
					got.Add(1)
					ids <- rec.ID
				}
			}()
		}
		wg.Wait()
		close(ids)
		if got.Load() != max || s.Inflight(3) != max {
			t.Fatalf("%d leases granted, in-flight %d, want %d", got.Load(), s.Inflight(3), max)
		}
		first := <-ids
		if _, ok := s.Release(first); !ok {
			t.Fatal("release failed")
		}
		if _, ok := s.Release(first); ok {
			t.Fatal("released twice")
		}
		expired := s.Expired(t0+10, nil)
		if len(expired) != max-1 || s.Inflight(3) != 0 {
			t.Fatalf("expired %d, in-flight %d", len(expired), s.Inflight(3))
		}
		for id := range ids {
			if _, ok := s.Release(id); ok {
				t.Fatal("an expired lease was released")
			}
		}
	})

	t.Run("leases carry the generations they were taken under", func(t *testing.T) {
		s := fresh(t)
		op := observe(engine.RateLimited)
		op.Create = true
		ch, _ := s.Update(c, engine.Key{Route: 1, Target: 3}, op, t0)
		rec, ok := s.Lease(engine.LeaseRecord{Route: 1, Target: 3, Taken: t0, Expires: t0 + 1}, 0)
		if !ok || rec.PairGen != ch.Gen || rec.ID == 0 {
			t.Fatalf("lease %+v, want pair generation %d", rec, ch.Gen)
		}
	})

	t.Run("sessions bind and expire", func(t *testing.T) {
		s := fresh(t)
		s.Bind("abc", 2, t0+10)
		if r, ok := s.Session("abc", t0+9); !ok || r != 2 {
			t.Fatalf("session → %d %v", r, ok)
		}
		if _, ok := s.Session("abc", t0+10); ok {
			t.Fatal("expired binding still live")
		}
		s.ExpireSessions(t0 + 10)
		if _, ok := s.Session("abc", t0); ok {
			t.Fatal("binding survived ExpireSessions")
		}
	})

	t.Run("incident flags flip exactly once", func(t *testing.T) {
		s := fresh(t)
		var opened atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.SetIncident(2, engine.Target5xx, true) {
					opened.Add(1)
				}
			}()
		}
		wg.Wait()
		if opened.Load() != 1 {
			t.Fatalf("%d callers opened the incident", opened.Load())
		}
		if c, ok := s.Incident(2); !ok || c != engine.Target5xx {
			t.Fatalf("incident %v %v", c, ok)
		}
		if s.SetIncident(2, engine.Blocked, false) {
			t.Fatal("closed an incident of another class")
		}
		if !s.SetIncident(2, engine.Target5xx, false) || s.SetIncident(2, engine.Target5xx, false) {
			t.Fatal("close did not flip exactly once")
		}
	})
}

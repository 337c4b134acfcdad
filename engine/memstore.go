package engine

import (
	"sync"
	"sync/atomic"
)

// MemoryStore is the in-process Store: the default, and the reference
// semantics for shared stores. Each route's records sit behind the route's
// own mutex, so there is no global lock.
type MemoryStore struct {
	routes    table[memRoute]
	leases    [leaseShards]leaseShard
	sessions  [sessionShards]sessionShard
	incidents table[atomic.Int32] // by target: 1 + Class of the open incident, 0 when none
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

type memRoute struct {
	mu     sync.Mutex
	global Health            // guarded by mu
	pairs  map[int32]*Health // guarded by mu; created on first pair
	// present has bit n%64 set when pairs may hold target n (guarded by mu):
	// most routes have records for few targets, and this skips the map's
	// cache misses for all the others.
	present  uint64
	inflight atomic.Int32
}

// AddRoute implements HealthStore.
func (s *MemoryStore) AddRoute(slot int32, _ string) {
	for s.routes.len() <= slot {
		s.routes.add(func(int32, *memRoute) {})
	}
}

// AddTarget implements HealthStore; the memory store keys by number.
func (s *MemoryStore) AddTarget(n int32, _ string) {
	for s.incidents.len() <= n {
		s.incidents.add(func(int32, *atomic.Int32) {})
	}
}

// Update implements HealthStore.
func (s *MemoryStore) Update(c *Config, k Key, op Op, now int64) (Change, bool) {
	r := s.routes.get(k.Route)
	if r == nil {
		return Change{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.Global() {
		return r.global.Apply(c, k, op, now), true
	}
	h := r.pair(k.Target)
	if h == nil {
		if !op.Create {
			return Change{}, false
		}
		if r.pairs == nil {
			r.pairs = make(map[int32]*Health)
		}
		h = &Health{Since: now}
		r.pairs[k.Target] = h
		r.present |= presentBit(k.Target)
	}
	return h.Apply(c, k, op, now), true
}

// Read implements HealthStore.
func (s *MemoryStore) Read(k Key) (Health, bool) {
	r := s.routes.get(k.Route)
	if r == nil {
		return Health{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.Global() {
		return r.global, true
	}
	if h := r.pair(k.Target); h != nil {
		return *h, true
	}
	return Health{}, false
}

// pair returns the record for target, or nil; the caller holds r.mu.
func (r *memRoute) pair(target int32) *Health {
	if r.present&presentBit(target) == 0 {
		return nil
	}
	return r.pairs[target]
}

func presentBit(target int32) uint64 { return 1 << (uint32(target) % 64) }

// EvictPairs implements HealthStore.
func (s *MemoryStore) EvictPairs(route int32, before int64, fn func(int32, *Health)) {
	r := s.routes.get(route)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.present = 0
	for t, h := range r.pairs {
		if h.lastTouched() < before {
			fn(t, h)
			delete(r.pairs, t)
		} else {
			r.present |= presentBit(t)
		}
	}
}

// Pairs implements HealthStore.
func (s *MemoryStore) Pairs(route int32, fn func(int32, Health)) {
	r := s.routes.get(route)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, h := range r.pairs {
		fn(t, *h)
	}
}

// Leases are sharded by route so concurrent acquires rarely share a lock.
const leaseShards = 16

type leaseShard struct {
	mu   sync.Mutex
	recs []leaseSlot // guarded by mu
	free []int32     // guarded by mu: indexes of unused recs
}

type leaseSlot struct {
	LeaseRecord
	live bool
}

// A lease id packs the shard (4 bits), the slot index (28 bits) and a
// sequence number (32 bits) so a reused slot never honours an old id.
func leaseID(shard, idx int, seq uint32) uint64 {
	return uint64(seq)<<32 | uint64(idx)<<4 | uint64(shard)
}

// Lease implements LeaseStore.
func (s *MemoryStore) Lease(rec LeaseRecord, maxInflight int32) (LeaseRecord, bool) {
	r := s.routes.get(rec.Route)
	if r == nil {
		return rec, false
	}
	for {
		n := r.inflight.Load()
		if maxInflight > 0 && n >= maxInflight {
			return rec, false
		}
		if r.inflight.CompareAndSwap(n, n+1) {
			break
		}
	}
	r.mu.Lock()
	rec.RouteGen = r.global.Gen
	if p := r.pair(rec.Target); p != nil {
		rec.PairGen = p.Gen
	}
	r.mu.Unlock()
	shard := int(uint32(rec.Route) % leaseShards)
	sh := &s.leases[shard]
	sh.mu.Lock()
	var idx int
	if n := len(sh.free); n > 0 {
		idx = int(sh.free[n-1])
		sh.free = sh.free[:n-1]
	} else {
		idx = len(sh.recs)
		sh.recs = append(sh.recs, leaseSlot{})
	}
	slot := &sh.recs[idx]
	seq := uint32(slot.ID>>32) + 1
	rec.ID = leaseID(shard, idx, seq)
	slot.LeaseRecord, slot.live = rec, true
	sh.mu.Unlock()
	return rec, true
}

// Release implements LeaseStore.
func (s *MemoryStore) Release(id uint64) (LeaseRecord, bool) {
	shard, idx := int(id&(leaseShards-1)), int(uint32(id)>>4)
	sh := &s.leases[shard]
	sh.mu.Lock()
	if idx >= len(sh.recs) || !sh.recs[idx].live || sh.recs[idx].ID != id {
		sh.mu.Unlock()
		return LeaseRecord{}, false
	}
	rec := s.free(sh, idx)
	sh.mu.Unlock()
	return rec, true
}

// free retires lease idx of sh; the caller holds sh.mu.
func (s *MemoryStore) free(sh *leaseShard, idx int) LeaseRecord {
	slot := &sh.recs[idx]
	slot.live = false
	sh.free = append(sh.free, int32(idx))
	if r := s.routes.get(slot.Route); r != nil {
		r.inflight.Add(-1)
	}
	return slot.LeaseRecord
}

// Inflight implements LeaseStore.
func (s *MemoryStore) Inflight(route int32) int32 {
	if r := s.routes.get(route); r != nil {
		return r.inflight.Load()
	}
	return 0
}

// Expired implements LeaseStore.
func (s *MemoryStore) Expired(now int64, dst []LeaseRecord) []LeaseRecord {
	for i := range s.leases {
		sh := &s.leases[i]
		sh.mu.Lock()
		for idx := range sh.recs {
			if sh.recs[idx].live && sh.recs[idx].Expires <= now {
				dst = append(dst, s.free(sh, idx))
			}
		}
		sh.mu.Unlock()
	}
	return dst
}

const sessionShards = 32

type sessionShard struct {
	mu       sync.Mutex
	bindings map[string]binding // guarded by mu
}

type binding struct {
	route int32
	until int64
}

func (s *MemoryStore) sessionShard(id string) *sessionShard {
	return &s.sessions[fnv32(id)%sessionShards]
}

// Session implements SessionStore.
func (s *MemoryStore) Session(id string, now int64) (int32, bool) {
	sh := s.sessionShard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.bindings[id]
	if !ok || b.until <= now {
		return 0, false
	}
	return b.route, true
}

// Bind implements SessionStore.
func (s *MemoryStore) Bind(id string, route int32, until int64) {
	sh := s.sessionShard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.bindings == nil {
		sh.bindings = make(map[string]binding)
	}
	sh.bindings[id] = binding{route: route, until: until}
}

// ExpireSessions implements SessionStore.
func (s *MemoryStore) ExpireSessions(now int64) {
	for i := range s.sessions {
		sh := &s.sessions[i]
		sh.mu.Lock()
		for id, b := range sh.bindings {
			if b.until <= now {
				delete(sh.bindings, id)
			}
		}
		sh.mu.Unlock()
	}
}

// Incident implements IncidentStore.
func (s *MemoryStore) Incident(target int32) (Class, bool) {
	if v := s.incidents.get(target); v != nil {
		if c := v.Load(); c != 0 {
			return Class(c - 1), true
		}
	}
	return 0, false
}

// SetIncident implements IncidentStore.
func (s *MemoryStore) SetIncident(target int32, c Class, open bool) bool {
	v := s.incidents.get(target)
	if v == nil {
		return false
	}
	if open {
		return v.CompareAndSwap(0, int32(c)+1)
	}
	return v.CompareAndSwap(int32(c)+1, 0)
}

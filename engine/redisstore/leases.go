package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

// leaseScript takes a lease on a route with max_inflight: leases whose
// holder let them expire (it died) are dropped first, so a crashed process
// does not hold capacity past its leases' TTL. KEYS[1]: the route's leases,
// a sorted set of lease ids by expiry (ms). ARGV: the time the lease is
// taken (ms, the engine's clock, as the expiries are), max_inflight,
// expiry (ms), lease id, and how long the set must live for this lease (ms).
// The set's own TTL is relative, so it does not depend on the engine's
// clock agreeing with Redis's.
var leaseScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
	return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
	redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1
`)

// leases are this process's leases. Routes without max_inflight need no
// cross-process count, so only leases on routes with one are also recorded
// in Redis; in-flight counts for weights are this process's own.
type leases struct {
	next   atomic.Uint64
	mu     sync.Mutex
	byID   map[uint64]lease // guarded by mu
	counts sync.Map         // route slot → *atomic.Int32
	// orphans are shared leases ended while Redis was out of reach: still
	// counted there, against every process's max_inflight, until removed
	// when it returns (Store.recover). Guarded by mu, which the store also
	// holds to leave degraded: a lease ended meanwhile is either among the
	// orphans recover takes or removed at once.
	orphans []lease
}

type lease struct {
	rec    engine.LeaseRecord
	shared bool // recorded in Redis
}

func (l *leases) init() { l.byID = make(map[uint64]lease) }

func (l *leases) count(route int32) *atomic.Int32 {
	if c, ok := l.counts.Load(route); ok {
		return c.(*atomic.Int32)
	}
	c, _ := l.counts.LoadOrStore(route, new(atomic.Int32))
	return c.(*atomic.Int32)
}

// Lease implements engine.LeaseStore. The generations come from the local
// model: a lease taken under a generation another process has just moved
// past reports as stale, which moves nothing.
func (s *Store) Lease(rec engine.LeaseRecord, maxInflight int32) (engine.LeaseRecord, bool) {
	r := s.route(rec.Route)
	if r == nil {
		return engine.LeaseRecord{}, false
	}
	rec.ID = s.leases.next.Add(1)
	count := s.leases.count(rec.Route)
	shared := false
	switch {
	case maxInflight <= 0:
		count.Add(1)
	case s.health.degraded.Load():
		// Degraded: max_inflight holds for this process alone.
		if !reserve(count, maxInflight) {
			return engine.LeaseRecord{}, false
		}
	default:
		ctx, cancel := s.call()
		ok, err := leaseScript.Run(ctx, s.rdb, []string{s.leaseKey(r.id)},
			rec.Taken/1e6, maxInflight, rec.Expires/1e6, s.leaseMember(rec.ID), leaseKeyTTL(rec).Milliseconds()).Int()
		cancel()
		switch {
		case err != nil:
			s.failed(err)
			if !reserve(count, maxInflight) {
				return engine.LeaseRecord{}, false
			}
		case ok == 0:
			return engine.LeaseRecord{}, false
		default:
			shared = true
			count.Add(1)
		}
	}
	r.mu.Lock()
	rec.RouteGen = r.global.h.Gen
	if p := r.pairs[rec.Target]; p != nil {
		rec.PairGen = p.h.Gen
	}
	r.mu.Unlock()
	s.leases.mu.Lock()
	s.leases.byID[rec.ID] = lease{rec: rec, shared: shared}
	s.leases.mu.Unlock()
	return rec, true
}

// leaseKeyTTL is how long a route's lease set must live for rec: its
// lease's term and a minute's grace for clocks a little apart.
func leaseKeyTTL(rec engine.LeaseRecord) time.Duration {
	return max(time.Duration(rec.Expires-rec.Taken), 0) + time.Minute
}

// reserve takes one of max in-flight places on count, if one is free.
func reserve(count *atomic.Int32, max int32) bool {
	for {
		n := count.Load()
		if n >= max {
			return false
		}
		if count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Store) leaseMember(id uint64) string { return s.origin + ":" + strconv.FormatUint(id, 10) }

// Release implements engine.LeaseStore.
func (s *Store) Release(id uint64) (engine.LeaseRecord, bool) {
	s.leases.mu.Lock()
	l, ok := s.leases.byID[id]
	delete(s.leases.byID, id)
	s.leases.mu.Unlock()
	if !ok {
		return engine.LeaseRecord{}, false
	}
	s.leases.count(l.rec.Route).Add(-1)
	if l.shared {
		s.unshare([]lease{l})
	}
	return l.rec, true
}

// unshare removes leases from Redis. Out of reach, they are kept as
// orphans, removed when it returns.
func (s *Store) unshare(ls []lease) {
	s.leases.mu.Lock()
	degraded := s.health.degraded.Load()
	if degraded {
		s.leases.orphan(ls)
	}
	s.leases.mu.Unlock()
	if degraded {
		return
	}
	if err := s.dropLeases(ls); err != nil {
		// Kept before the store degrades, so the recovery that follows
		// finds them.
		s.leases.mu.Lock()
		s.leases.orphan(ls)
		s.leases.mu.Unlock()
		s.failed(err)
	}
}

// orphan keeps the shared leases of ls as orphans. Caller holds l.mu.
func (l *leases) orphan(ls []lease) {
	for _, x := range ls {
		if x.shared {
			l.orphans = append(l.orphans, x)
		}
	}
}

// dropLeases removes the shared leases of ls from Redis.
func (s *Store) dropLeases(ls []lease) error {
	ctx, cancel := s.call()
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, l := range ls {
		if l.shared {
			pipe.ZRem(ctx, s.leaseKey(s.names.route(l.rec.Route)), s.leaseMember(l.rec.ID))
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Inflight implements engine.LeaseStore: this process's leases on route.
func (s *Store) Inflight(route int32) int32 { return s.leases.count(route).Load() }

// Expired implements engine.LeaseStore for this process's leases.
func (s *Store) Expired(now int64, dst []engine.LeaseRecord) []engine.LeaseRecord {
	var gone []lease
	s.leases.mu.Lock()
	for id, l := range s.leases.byID {
		if l.rec.Expires <= now {
			delete(s.leases.byID, id)
			gone = append(gone, l)
		}
	}
	s.leases.mu.Unlock()
	for _, l := range gone {
		s.leases.count(l.rec.Route).Add(-1)
		dst = append(dst, l.rec)
	}
	if len(gone) > 0 {
		s.unshare(gone)
	}
	return dst
}

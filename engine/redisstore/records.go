package redisstore

import (
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

// record is a health record as the local model keeps it.
type record struct {
	h   engine.Health
	ver int64 // its version in Redis; 0 when Redis has none
	// pending are the successes applied to h here but not yet written:
	// see coalesce.
	pending []pendingOp
}

// pendingOp is an operation applied locally, to apply again on a newer
// record if another process wrote one meanwhile.
type pendingOp struct {
	c   *engine.Config
	op  engine.Op
	now int64
}

// maxPending bounds the successes a record holds before it is written.
const maxPending = 64

// coalesce reports whether op, which made ch of cur, may wait for the next
// flush instead of a round trip now: a success on a healthy record that
// already exists in Redis, moving nothing but evidence. Every failure and
// every transition is written at once, so thresholds stay exact across
// processes; what waits is score drift, by at most Options.Flush
// (docs/design/004-redis-store.md, "Successes wait, failures do not").
func coalesce(cur *record, op engine.Op, ch engine.Change) bool {
	return op.Kind == engine.OpObserve && op.Obs.Class == engine.OK && !op.Obs.Probe &&
		cur != nil && cur.ver != 0 && cur.h.State == engine.Healthy && len(cur.pending) < maxPending &&
		!ch.Changed() && !ch.Probe
}

// routeState is one route's local records. Its mutex is held across the
// compare-and-set of the route's records, so updates of one route from this
// process queue instead of conflicting.
type routeState struct {
	mu     sync.Mutex
	id     string            // immutable
	global record            // guarded by mu
	pairs  map[int32]*record // guarded by mu
}

// casScript writes a record if its version is still the one the caller
// read, then publishes it; otherwise it returns the current one. KEYS[1]:
// the record. ARGV: expected version, new encoding, TTL in ms, channel,
// notification header, the writer's clock in µs.
//
// Versions only grow, and start from the writer's clock: after Redis lost
// its data (a restart without persistence), new versions still exceed the
// ones every process remembers, so their local models take the new records.
var casScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if v ~= ARGV[1] then
	return {0, v, redis.call('HGET', KEYS[1], 'h') or ''}
end
local nv = string.format('%.0f', math.max(tonumber(v) + 1, tonumber(ARGV[6])))
redis.call('HSET', KEYS[1], 'v', nv, 'h', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5] .. nv .. '\0' .. ARGV[2])
return {1, nv}
`)

// AddRoute implements engine.HealthStore. The route's shared records
// arrive with the first resync, or, for a route added while running (a
// reload), with one started at once.
func (s *Store) AddRoute(slot int32, id string) {
	s.names.mu.Lock()
	s.names.routes.set(slot, id)
	s.names.mu.Unlock()
	s.routesMu.Lock()
	for len(s.routes) <= int(slot) {
		s.routes = append(s.routes, nil)
	}
	s.routes[slot] = &routeState{id: id}
	s.routesMu.Unlock()
	select {
	case s.resyncSoon <- struct{}{}:
	default:
	}
}

// AddTarget implements engine.HealthStore. Pairs other processes wrote for
// the target before this one knew it are moved into the local model.
func (s *Store) AddTarget(n int32, name string) {
	s.names.mu.Lock()
	s.names.targets.set(n, name)
	s.names.mu.Unlock()
	s.pendMu.Lock()
	waiting := s.pending[name]
	delete(s.pending, name)
	s.pendMu.Unlock()
	for slot, rec := range waiting {
		s.applyRemote(engine.Key{Route: slot, Target: n}, rec)
	}
	s.announced(name)
}

func (s *Store) route(slot int32) *routeState {
	s.routesMu.RLock()
	defer s.routesMu.RUnlock()
	if int(slot) < len(s.routes) {
		return s.routes[slot]
	}
	return nil
}

// get returns the record at target (0: global), or nil. Caller holds mu.
func (r *routeState) get(target int32) *record {
	if target == 0 {
		return &r.global
	}
	return r.pairs[target]
}

// set stores rec at target. Caller holds mu.
func (r *routeState) set(target int32, rec record) {
	if target == 0 {
		r.global = rec
		return
	}
	if r.pairs == nil {
		r.pairs = make(map[int32]*record)
	}
	r.pairs[target] = &rec
}

// Update implements engine.HealthStore: the transition runs on the record
// as this process knows it and is written only if no other process wrote
// it since; otherwise the newer record is taken and the transition run
// again on it (docs/design/004-redis-store.md, "One rule book"). Degraded,
// it is applied locally and merged on recovery.
func (s *Store) Update(c *engine.Config, k engine.Key, op engine.Op, now int64) (engine.Change, bool) {
	r := s.route(k.Route)
	if r == nil {
		return engine.Change{}, false
	}
	target := s.names.target(k.Target)
	adopted := false
	defer func() {
		if adopted {
			s.notify() // the route's mutex is released by now
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		cur := r.get(k.Target)
		if cur == nil && !op.Create {
			return engine.Change{}, false
		}
		next := record{h: engine.Health{Since: now}}
		if cur != nil {
			next = *cur
		}
		ch := next.h.Apply(c, k, op, now)
		switch {
		case s.health.degraded.Load() || (k.Target != 0 && target == ""):
			next.pending = nil // the whole record is merged on recovery
			s.markDirty(k)
			r.set(k.Target, next)
			return ch, true
		case coalesce(cur, op, ch):
			next.pending = append(next.pending, pendingOp{c: c, op: op, now: now})
			r.set(k.Target, next)
			s.flushes.add(k)
			return ch, true
		}
		won, theirs, err := s.cas(r.id, target, next)
		switch {
		case err != nil:
			s.failed(err)
			s.markDirty(k)
			next.pending = nil
			r.set(k.Target, next)
			return ch, true
		case won:
			next.ver, next.pending = theirs.ver, nil
			r.set(k.Target, next)
			return ch, true
		case theirs.ver == 0:
			// Redis has no record (it expired while idle): write this
			// process's as new.
			s.stats.conflicts.Add(1)
			cur.ver = 0
		default:
			// Another process wrote first: take its record and run the
			// transition again on it.
			s.stats.conflicts.Add(1)
			s.adopt(r, k, cur, theirs)
			adopted = true
		}
	}
}

// adopt replaces cur (nil: none) with theirs, another process's newer
// record, with this process's pending successes applied again on it; the
// engine hears of the difference as a remote change. Caller holds r.mu,
// and calls notify once it has released it.
func (s *Store) adopt(r *routeState, k engine.Key, cur *record, theirs record) {
	old, known := engine.Health{}, cur != nil
	if known {
		old = cur.h
		for _, p := range cur.pending {
			theirs.h.Apply(p.c, k, p.op, p.now)
		}
		theirs.pending = cur.pending
	}
	r.set(k.Target, theirs)
	s.notes.push(k, old, known, theirs.h)
}

// flush writes the records whose successes are waiting (see coalesce).
func (s *Store) flush() {
	for k := range s.flushes.take() {
		r := s.route(k.Route)
		if r == nil {
			continue
		}
		target := s.names.target(k.Target)
		adopted := false
		r.mu.Lock()
		for {
			cur := r.get(k.Target)
			if cur == nil || len(cur.pending) == 0 {
				break
			}
			if s.health.degraded.Load() {
				s.markDirty(k)
				cur.pending = nil
				break
			}
			won, theirs, err := s.cas(r.id, target, *cur)
			if err != nil {
				s.failed(err)
				s.markDirty(k)
				cur.pending = nil
				break
			}
			if won {
				cur.ver, cur.pending = theirs.ver, nil
				break
			}
			s.stats.conflicts.Add(1)
			if theirs.ver == 0 {
				cur.ver = 0
				continue
			}
			s.adopt(r, k, cur, theirs)
			adopted = true
		}
		r.mu.Unlock()
		if adopted {
			s.notify()
		}
	}
}

// keySet is a set of record keys, safe for concurrent use.
type keySet struct {
	mu   sync.Mutex
	keys map[engine.Key]struct{} // guarded by mu
}

func (q *keySet) add(k engine.Key) {
	q.mu.Lock()
	if q.keys == nil {
		q.keys = make(map[engine.Key]struct{})
	}
	q.keys[k] = struct{}{}
	q.mu.Unlock()
}

// take empties the set and returns what it held.
func (q *keySet) take() map[engine.Key]struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := q.keys
	q.keys = nil
	return keys
}

// cas runs casScript for rec; when another process wrote first, theirs is
// the current record (version 0: there is none).
func (s *Store) cas(route, target string, rec record) (won bool, theirs record, err error) {
	enc, err := rec.h.MarshalBinary()
	if err != nil {
		return false, record{}, err
	}
	ttl := s.opts.RouteTTL
	if target != "" {
		ttl = s.opts.PairTTL
	}
	ctx, cancel := s.call()
	defer cancel()
	res, err := casScript.Run(ctx, s.rdb, []string{s.recordKey(route, target)},
		rec.ver, enc, ttl.Milliseconds(), s.channel, s.header('h', route, target), s.opts.Now().UnixMicro()).Slice()
	if err != nil {
		return false, record{}, err
	}
	won, theirs, err = decodeCAS(res)
	if won {
		s.stats.writes.Add(1)
	}
	return won, theirs, err
}

// decodeCAS reads casScript's answer.
func decodeCAS(res []any) (won bool, theirs record, err error) {
	if len(res) < 2 {
		return false, record{}, errBadReply
	}
	won = res[0] == int64(1)
	ver, err := parseVersion(res[1])
	if err != nil {
		return false, record{}, err
	}
	theirs.ver = ver
	if !won && ver != 0 {
		enc, _ := res[2].(string)
		if err := theirs.h.UnmarshalBinary([]byte(enc)); err != nil {
			return false, record{}, err
		}
	}
	return won, theirs, nil
}

// Read implements engine.HealthStore, from the local model.
func (s *Store) Read(k engine.Key) (engine.Health, bool) {
	r := s.route(k.Route)
	if r == nil {
		return engine.Health{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.get(k.Target); rec != nil {
		return rec.h, true
	}
	return engine.Health{}, false
}

// EvictPairs implements engine.HealthStore for the local model; Redis
// expires idle pairs by their own TTL.
func (s *Store) EvictPairs(route int32, before int64, fn func(int32, *engine.Health)) {
	r := s.route(route)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, rec := range r.pairs {
		if max(rec.h.LastSuccess, rec.h.LastFailure, rec.h.Since) < before {
			fn(t, &rec.h)
			delete(r.pairs, t)
		}
	}
}

// Pairs implements engine.HealthStore, from the local model.
func (s *Store) Pairs(route int32, fn func(int32, engine.Health)) {
	r := s.route(route)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, rec := range r.pairs {
		fn(t, rec.h)
	}
}

// applyRemote takes rec, another process's, for k if it is newer than the
// local one, and tells the engine.
func (s *Store) applyRemote(k engine.Key, rec record) {
	r := s.route(k.Route)
	if r == nil {
		return
	}
	r.mu.Lock()
	cur := r.get(k.Target)
	if cur != nil && cur.ver >= rec.ver {
		r.mu.Unlock()
		return
	}
	s.stats.remote.Add(1)
	s.adopt(r, k, cur, rec)
	r.mu.Unlock()
	s.notify()
}

// markDirty remembers that k changed while Redis was out of reach.
func (s *Store) markDirty(k engine.Key) {
	s.dirtyMu.Lock()
	s.dirty[k] = true
	s.dirtyMu.Unlock()
}

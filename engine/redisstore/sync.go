package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

var errBadReply = errors.New("redisstore: unexpected reply from Redis")

// parseVersion reads a record version as a script returns it.
func parseVersion(v any) (int64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseInt(v, 10, 64)
	case int64:
		return v, nil
	}
	return 0, errBadReply
}

// header starts a notification: origin, kind ('h' record, 'i' incident,
// 's' a session bound twice; for shared pacing, pace.go: 'p' a pair's
// limit, 't' a target's, 'w' a wave ban or a pair seen), route and target,
// each ended by NUL; a record's version and encoding, or the rest, follow.
func (s *Store) header(kind byte, route, target string) string {
	return s.origin + "\x00" + string(kind) + "\x00" + route + "\x00" + target + "\x00"
}

// note is a parsed notification.
type note struct {
	origin, route, target string
	kind                  byte
	rest                  string // record: "version\x00encoding"; incident: the class, "" when closed; session: its id; pacing: pace.go
}

func parseNote(payload string) (note, bool) {
	f := strings.SplitN(payload, "\x00", 5)
	if len(f) != 5 || len(f[1]) != 1 {
		return note{}, false
	}
	return note{origin: f[0], kind: f[1][0], route: f[2], target: f[3], rest: f[4]}, true
}

// subscribe subscribes to the change channel and waits, at most
// Options.Timeout, for Redis to confirm. The client resubscribes by itself
// after a disconnect; what was published meanwhile is healed by the resync
// that follows every outage.
func (s *Store) subscribe(ctx context.Context) *redis.PubSub {
	sub := s.rdb.Subscribe(ctx, s.channel)
	confirm, cancel := context.WithTimeout(ctx, max(s.opts.Timeout, time.Second))
	defer cancel()
	if _, err := sub.Receive(confirm); err != nil && ctx.Err() == nil {
		s.failed(err)
	}
	return sub
}

// receive applies other processes' notifications until ctx ends.
func (s *Store) receive(ctx context.Context, sub *redis.PubSub) {
	msgs := sub.Channel()
	defer func() {
		sub.Close()
		// The client's reader may hold a message for msgs, and would wait
		// a minute (its send timeout) to drop it before it sees the close
		// and ends: take what is left.
		for range msgs {
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if n, ok := parseNote(m.Payload); ok && n.origin != s.origin {
				s.applyNote(n)
			}
		}
	}
}

// applyNote applies one notification to the local model.
func (s *Store) applyNote(n note) {
	switch n.kind {
	case 'h':
		verText, enc, ok := strings.Cut(n.rest, "\x00")
		ver, err := strconv.ParseInt(verText, 10, 64)
		var h engine.Health
		if !ok || err != nil || h.UnmarshalBinary([]byte(enc)) != nil {
			return
		}
		s.applyRecord(n.route, n.target, record{h: h, ver: ver})
	case 'i':
		num, ok := s.names.number(n.target)
		if !ok {
			return
		}
		if n.rest == "" {
			s.incidents.Delete(num)
		} else if c, err := engine.ParseClass(n.rest); err == nil {
			s.incidents.Store(num, c)
		}
	case 's':
		s.heardConflict(n.rest)
	case 'p':
		s.heardLimit(n.target, "r:"+n.route, n.rest)
		s.pace.heard.Add(1)
	case 't':
		s.heardLimit(n.target, "t", n.rest)
		s.pace.heard.Add(1)
	case 'w':
		s.heardWave(n)
		s.pace.heard.Add(1)
	}
}

// applyRecord takes another process's record by names. A pair of a target
// this process has not met yet waits in pending until AddTarget.
func (s *Store) applyRecord(route, target string, rec record) {
	slot, ok := s.names.slot(route)
	if !ok {
		return // a route this process was not given
	}
	k := engine.Key{Route: slot}
	if target != "" {
		num, ok := s.names.number(target)
		if !ok {
			s.pendMu.Lock()
			if s.pending[target] == nil {
				s.pending[target] = make(map[int32]record)
			}
			if old, seen := s.pending[target][slot]; !seen || old.ver < rec.ver {
				s.pending[target][slot] = rec
			}
			s.pendMu.Unlock()
			return
		}
		k.Target = num
	}
	s.applyRemote(k, rec)
}

// notifications hands remote changes to the engine's listener. A change
// is queued under its route's mutex, so each key's changes queue in their
// order, and the goroutine that adopted it delivers it once it has
// released that mutex (the listener reads the store), before it returns:
// an Update that took another process's record returns only after the
// engine has followed that record, so the engine follows it before the
// Change that starts from it.
type notifications struct {
	mu    sync.Mutex
	queue []change // guarded by mu
	// delivering serializes deliveries: the listener hears one change at a
	// time, in queue order, whichever goroutine delivers.
	delivering sync.Mutex
}

type change struct {
	k        engine.Key
	old, now engine.Health
	known    bool
}

func (n *notifications) push(k engine.Key, old engine.Health, known bool, now engine.Health) {
	n.mu.Lock()
	n.queue = append(n.queue, change{k: k, old: old, known: known, now: now})
	n.mu.Unlock()
}

// deliver calls fn (nil: nobody listens yet) with every queued change,
// those other goroutines queued included.
func (n *notifications) deliver(fn *func(engine.Key, engine.Health, bool, engine.Health)) {
	n.delivering.Lock()
	defer n.delivering.Unlock()
	for {
		n.mu.Lock()
		batch := n.queue
		n.queue = nil
		n.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, c := range batch {
			if fn != nil {
				(*fn)(c.k, c.old, c.known, c.now)
			}
		}
	}
}

// notify delivers the changes adopt queued. Whoever called adopt calls it
// once it has released the route's mutex.
func (s *Store) notify() { s.notes.deliver(s.listener.Load()) }

// health is the connection's state as the request path sees it.
type health struct {
	degraded atomic.Bool
	since    atomic.Int64  // Unix ns the current outage began
	wake     chan struct{} // immutable; wakes maintain at the start of an outage
}

// failed records a failed Redis call: the first one of an outage degrades
// the store, logged once, and wakes the maintenance loop to watch for
// Redis's return.
func (s *Store) failed(err error) {
	s.stats.errors.Add(1)
	if s.health.degraded.Swap(true) {
		return
	}
	s.health.since.Store(s.opts.Now().UnixNano())
	s.stats.degradedFor.Add(1)
	s.opts.Log.Warn("redis unreachable: serving from local state until it returns", "addr", s.Addr(), "err", err.Error())
	s.wakeMaintain()
}

func (s *Store) wakeMaintain() {
	select {
	case s.health.wake <- struct{}{}:
	default:
	}
}

// maintain writes waiting successes every Options.Flush, resyncs every
// Options.Resync and, while degraded, pings Redis until it answers, then
// merges and resyncs before the store leaves degraded
// (docs/design/004-redis-store.md, "Redis out of reach is not an outage").
func (s *Store) maintain(ctx context.Context) {
	tick := time.NewTicker(s.opts.Resync)
	defer tick.Stop()
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	flush := time.NewTicker(s.opts.Flush)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-flush.C:
			s.flush()
			continue
		case <-tick.C:
			if !s.health.degraded.Load() {
				s.resync(ctx)
			}
		case <-s.resyncSoon:
			if !s.health.degraded.Load() {
				s.resync(ctx)
			}
		case <-s.health.wake:
		case <-retry.C:
		}
		if s.health.degraded.Load() && s.ping(ctx) == nil {
			s.recover(ctx)
		}
	}
}

func (s *Store) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}

// recover ends an outage: records changed locally meanwhile are written
// where no other process changed them since (newer shared state wins over
// the local change), then everything is read again.
func (s *Store) recover(ctx context.Context) {
	s.dirtyMu.Lock()
	dirty := s.dirty
	s.dirty = make(map[engine.Key]bool)
	s.dirtyMu.Unlock()
	for k := range dirty {
		if err := s.merge(k); err != nil {
			s.dirtyMu.Lock()
			for k := range dirty {
				s.dirty[k] = true
			}
			s.dirtyMu.Unlock()
			return // still failing: stay degraded
		}
	}
	if err := s.reconcileSessions(); err != nil {
		return
	}
	if err := s.resync(ctx); err != nil {
		return
	}
	// The leases ended meanwhile leave Redis before the store says it is
	// reachable again (Healthy): until they do, they count against every
	// process's max_inflight. One that ends while they are removed is an
	// orphan too, taken on the next turn; none ends while mu is held.
	for {
		s.leases.mu.Lock()
		orphans := s.leases.orphans
		s.leases.orphans = nil
		if len(orphans) == 0 {
			s.health.degraded.Store(false)
			s.leases.mu.Unlock()
			break
		}
		s.leases.mu.Unlock()
		if err := s.dropLeases(orphans); err != nil {
			s.leases.mu.Lock()
			s.leases.orphan(orphans)
			s.leases.mu.Unlock()
			return // still failing: stay degraded
		}
	}
	s.opts.Log.Info("redis reachable again: shared state resynced", "addr", s.Addr(),
		"outage", time.Duration(s.opts.Now().UnixNano()-s.health.since.Load()).Round(time.Millisecond).String(), "merged", len(dirty))
}

// merge writes k's local record if Redis still has the version it was
// based on; if another process wrote it meanwhile, theirs is kept and
// taken here.
func (s *Store) merge(k engine.Key) error {
	r := s.route(k.Route)
	if r == nil {
		return nil
	}
	target := s.names.target(k.Target)
	if k.Target != 0 && target == "" {
		return nil
	}
	adopted := false
	defer func() {
		if adopted {
			s.notify()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.get(k.Target)
	if cur == nil {
		return nil
	}
	won, theirs, err := s.cas(r.id, target, *cur)
	if err == nil && !won && theirs.ver == 0 {
		// Redis lost the record (restarted empty, or it expired): ours is
		// all there is.
		cur.ver = 0
		won, theirs, err = s.cas(r.id, target, *cur)
	}
	switch {
	case err != nil:
		return err
	case won:
		cur.ver = theirs.ver
	default:
		// Another process wrote it meanwhile: its record wins.
		s.stats.remote.Add(1)
		cur.pending = nil
		s.adopt(r, k, cur, theirs)
		adopted = true
	}
	return nil
}

// resyncBatch is how many records one round trip of a resync reads.
const resyncBatch = 512

// resync reads every record of the deployment and takes those newer than
// the local ones, and every learned pacing limit: it heals notifications
// lost to a disconnect. A cluster is scanned node by node.
func (s *Store) resync(ctx context.Context) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		if err := s.scan(ctx, c); err != nil {
			return err
		}
		return s.scanLimits(ctx, c)
	}
	n := s.pace.beginResync()
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return scan(ctx, node)
		})
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil && ctx.Err() == nil {
		s.failed(err)
	}
	if err == nil {
		s.pace.forget(n)
	}
	return err
}

// scan reads the records c holds, resyncBatch keys a round trip.
func (s *Store) scan(ctx context.Context, c redis.Cmdable) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, s.opts.Prefix+":{*", resyncBatch).Result()
		if err != nil {
			return err
		}
		if err := s.readRecords(ctx, keys); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// readRecords reads the record keys among keys, in one pipeline.
func (s *Store) readRecords(ctx context.Context, keys []string) error {
	type read struct {
		route, target string
		cmd           *redis.SliceCmd
	}
	var reads []read
	pipe := s.rdb.Pipeline()
	for _, key := range keys {
		route, target, ok := s.parseRecordKey(key)
		if !ok {
			continue
		}
		if _, known := s.names.slot(route); !known {
			continue
		}
		reads = append(reads, read{route, target, pipe.HMGet(ctx, key, "v", "h")})
	}
	if len(reads) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	for _, rd := range reads {
		vals, err := rd.cmd.Result()
		if err != nil || len(vals) != 2 || vals[0] == nil || vals[1] == nil {
			continue // expired between the scan and the read
		}
		ver, err := parseVersion(vals[0])
		enc, _ := vals[1].(string)
		var h engine.Health
		if err != nil || h.UnmarshalBinary([]byte(enc)) != nil {
			continue
		}
		s.applyRecord(rd.route, rd.target, record{h: h, ver: ver})
	}
	return nil
}

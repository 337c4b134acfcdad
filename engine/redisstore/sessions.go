package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

// sessions caches the bindings this process has seen, so a sticky request
// reads Redis only the first time this process meets its session.
type sessions struct {
	mu    sync.Mutex
	bound map[string]binding // guarded by mu
}

type binding struct {
	route int32 // engine.SessionConflict for a session found bound twice
	until int64
	// offline marks a binding made while Redis was out of reach, for
	// recover to reconcile with what other processes bound meanwhile.
	offline bool
}

// value is the binding as its session key holds it; a conflict's has no
// route name.
func (s *Store) sessionValue(b binding) string {
	name := ""
	if b.route != engine.SessionConflict {
		name = s.names.route(b.route)
	}
	return name + "\n" + strconv.FormatInt(b.until, 10)
}

// reconcileScript puts a binding made offline into the shared state: set
// when the session is unbound there, kept when bound there to the same
// route (the later deadline wins), and when bound to another route turned
// into a conflict, which every process then answers with
// session_restart_required, and announced, so that the processes holding
// the other binding drop it too. KEYS[1]: the session. ARGV[1]: the
// route's name; ARGV[2]: the binding's deadline, Unix ns; ARGV[3]: the
// key's TTL, ms; ARGV[4]: the channel; ARGV[5]: the conflict's
// notification. Returns 1 when the binding stands, 0 for a conflict.
var reconcileScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local name, untilText = ARGV[1], ARGV[2]
if v then
	local nl = string.find(v, '\n', 1, true)
	local theirs, theirUntil = string.sub(v, 1, nl - 1), string.sub(v, nl + 1)
	if theirs ~= name then
		if tonumber(theirUntil) > tonumber(untilText) then untilText = theirUntil end
		redis.call('SET', KEYS[1], '\n' .. untilText, 'PX', ARGV[3])
		redis.call('PUBLISH', ARGV[4], ARGV[5])
		return 0
	end
	if tonumber(theirUntil) > tonumber(untilText) then return 1 end
end
redis.call('SET', KEYS[1], name .. '\n' .. untilText, 'PX', ARGV[3])
return 1
`)

// unbindScript deletes a session key that still holds the binding this
// process knew, not one another process made since. KEYS[1]: the session.
// ARGV[1]: the binding.
var unbindScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)

func (b *sessions) init() { b.bound = make(map[string]binding) }

// Session implements engine.SessionStore.
func (s *Store) Session(id string, now int64) (int32, bool) {
	s.sessions.mu.Lock()
	b, ok := s.sessions.bound[id]
	s.sessions.mu.Unlock()
	if ok {
		return b.route, b.until > now
	}
	if s.health.degraded.Load() {
		return 0, false
	}
	ctx, cancel := s.call()
	v, err := s.rdb.Get(ctx, s.sessionKey(id)).Result()
	cancel()
	switch {
	case err == redis.Nil:
		return 0, false
	case err != nil:
		s.failed(err)
		return 0, false
	}
	route, untilText, _ := strings.Cut(v, "\n")
	until, err := strconv.ParseInt(untilText, 10, 64)
	slot, known := s.names.slot(route)
	if route == "" {
		slot, known = engine.SessionConflict, true
	}
	if err != nil || !known {
		return 0, false
	}
	s.sessions.mu.Lock()
	s.sessions.bound[id] = binding{route: slot, until: until}
	s.sessions.mu.Unlock()
	return slot, until > now
}

// Bind implements engine.SessionStore. The key outlives the binding by
// Options.SessionGrace; Session compares the binding's own deadline.
func (s *Store) Bind(id string, route int32, until int64) {
	offline := s.health.degraded.Load()
	s.sessions.mu.Lock()
	s.sessions.bound[id] = binding{route: route, until: until, offline: offline}
	s.sessions.mu.Unlock()
	if offline {
		return
	}
	ttl := time.Duration(until-s.opts.Now().UnixNano()) + s.opts.SessionGrace
	ctx, cancel := s.call()
	defer cancel()
	v := s.sessionValue(binding{route: route, until: until})
	if err := s.rdb.Set(ctx, s.sessionKey(id), v, max(ttl, s.opts.SessionGrace)).Err(); err != nil {
		s.failed(err)
	}
}

// ExpireSessions implements engine.SessionStore: the expired bindings this
// process knows are dropped here and in Redis, which expires the others.
func (s *Store) ExpireSessions(now int64) {
	gone := make(map[string]binding)
	s.sessions.mu.Lock()
	for id, b := range s.sessions.bound {
		if b.until <= now {
			delete(s.sessions.bound, id)
			gone[id] = b
		}
	}
	s.sessions.mu.Unlock()
	if len(gone) == 0 || s.health.degraded.Load() {
		return
	}
	// Their keys outlive them by SessionGrace; gone here means gone for all.
	ctx, cancel := s.call()
	defer cancel()
	pipe := s.rdb.Pipeline()
	for id, b := range gone { // EVAL, not EVALSHA: a pipeline cannot load a missing script

		unbindScript.Eval(ctx, pipe, []string{s.sessionKey(id)}, s.sessionValue(b))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		s.failed(err)
	}
}

// reconcileSessions writes the bindings made while Redis was out of reach
// (reconcileScript): a session another process bound to another route
// meanwhile becomes a conflict here and there, so that no process carries
// it on either exit silently (docs/design/004-redis-store.md). It stops
// at the first error, the rest left for the next recovery.
func (s *Store) reconcileSessions() error {
	s.sessions.mu.Lock()
	offline := make(map[string]binding)
	for id, b := range s.sessions.bound {
		if b.offline {
			offline[id] = b
		}
	}
	s.sessions.mu.Unlock()
	now := s.opts.Now().UnixNano()
	for id, b := range offline {
		if b.until <= now || b.route == engine.SessionConflict {
			continue
		}
		ttl := max(time.Duration(b.until-now)+s.opts.SessionGrace, s.opts.SessionGrace)
		ctx, cancel := s.call()
		stands, err := reconcileScript.Run(ctx, s.rdb, []string{s.sessionKey(id)}, s.names.route(b.route), b.until, ttl.Milliseconds(),
			s.channel, s.header('s', "", "")+id).Int()
		cancel()
		if err != nil {
			return err
		}
		s.sessions.mu.Lock()
		if cur, ok := s.sessions.bound[id]; ok && cur == b {
			cur.offline = false
			if stands == 0 {
				cur.route = engine.SessionConflict
				s.opts.Log.Warn("redis reachable again: a session bound while it was out of reach was bound to another route by another gateway; it must restart",
					"session", id)
			}
			s.sessions.bound[id] = cur
		}
		s.sessions.mu.Unlock()
	}
	return nil
}

// heardConflict takes another process's word that session id is bound
// twice: the binding cached here is dropped, so that the next request
// reads the conflict and fails loudly rather than carrying on on its exit.
func (s *Store) heardConflict(id string) {
	s.sessions.mu.Lock()
	delete(s.sessions.bound, id)
	s.sessions.mu.Unlock()
}

var _ engine.SessionStore = (*Store)(nil)

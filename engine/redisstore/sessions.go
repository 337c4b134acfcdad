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
	route int32
	until int64
}

// value is the binding as its session key holds it.
func (s *Store) sessionValue(b binding) string {
	return s.names.route(b.route) + "\n" + strconv.FormatInt(b.until, 10)
}

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
	s.sessions.mu.Lock()
	s.sessions.bound[id] = binding{route: route, until: until}
	s.sessions.mu.Unlock()
	if s.health.degraded.Load() {
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

var _ engine.SessionStore = (*Store)(nil)

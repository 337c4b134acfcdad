package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

// openScript sets a target's incident flag unless one is open, and
// announces it. KEYS[1]: the flag. ARGV: class, TTL (ms), channel,
// notification.
var openScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	redis.call('PUBLISH', ARGV[3], ARGV[4] .. ARGV[1])
	return 1
end
return 0
`)

// closeScript clears a target's incident flag if it is for this class,
// and announces it. KEYS[1]: the flag. ARGV: class, channel, notification.
var closeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[2], ARGV[3])
	return 1
end
return 0
`)

// Incident implements engine.IncidentStore, from the local model.
func (s *Store) Incident(target int32) (engine.Class, bool) {
	if c, ok := s.incidents.Load(target); ok {
		return c.(engine.Class), true
	}
	return 0, false
}

// SetIncident implements engine.IncidentStore: exactly one process flips
// each flag. Degraded, the flag is this process's alone.
func (s *Store) SetIncident(target int32, c engine.Class, open bool) bool {
	name := s.names.target(target)
	if name == "" || s.health.degraded.Load() {
		return s.setLocalIncident(target, c, open)
	}
	ctx, cancel := s.call()
	defer cancel()
	key, header := s.incidentKey(name), s.header('i', "", name)
	var flipped int
	var err error
	if open {
		flipped, err = openScript.Run(ctx, s.rdb, []string{key}, c.String(), s.opts.IncidentTTL.Milliseconds(), s.channel, header).Int()
	} else {
		flipped, err = closeScript.Run(ctx, s.rdb, []string{key}, c.String(), s.channel, header).Int()
	}
	if err != nil {
		s.failed(err)
		return s.setLocalIncident(target, c, open)
	}
	if flipped == 1 {
		s.setLocalIncident(target, c, open)
	}
	return flipped == 1
}

// setLocalIncident flips the local flag, reporting whether it changed.
func (s *Store) setLocalIncident(target int32, c engine.Class, open bool) bool {
	if open {
		_, had := s.incidents.LoadOrStore(target, c)
		return !had
	}
	cur, ok := s.incidents.Load(target)
	if !ok || cur.(engine.Class) != c {
		return false
	}
	return s.incidents.CompareAndDelete(target, c)
}

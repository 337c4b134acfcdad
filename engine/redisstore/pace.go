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

// Shared pacing (engine.PaceSharer; docs/design/004-redis-store.md and
// 005-cost.md). The engine hands its news to SharePace on every Sweep and
// takes back what the store heard since; the store's own loop does the
// I/O, one round per call, so neither a pick nor Sweep waits on Redis. A
// round:
//
//   - writes the limits the engine learned, each by compare-and-set on the
//     one Redis holds, only when it supersedes it (engine.PairLimit's
//     rule), and publishes them; a limit that loses is handed back, so
//     every process ends with the one Redis holds;
//   - in one pipeline: heartbeats, adds this process's sends per pair and
//     bucket to the fleet's, publishes the round's wave bans, and reads
//     the fleet's counts of the targets this process sent to within the
//     window (the current bucket and the last, which others may still add
//     to; older ones once).
//
// Limits and wave bans reach the other processes by pub/sub at once;
// counts and shares with their next round. Degraded, a round sends
// nothing: the limits wait for Redis, counts and bans are dropped (they
// are of the moment), and the engine is told to pace alone.
//
// Keys, a target's under the hash tag of its name:
//
//	<prefix>:pace:live                    sorted set: process → its last round (Redis's clock, ms)
//	<prefix>:pace:{<target>}:lim          hash: "t" → the target's tolerance, "r:<route>" → a pair's rate (TTL RouteTTL)
//	<prefix>:pace:{<target>}:n:<bucket>   hash: "r:<route>\x00<epoch>" → the pair's sends in the bucket, all processes;
//	                                      "o:<process>" → that process's sends to the target (TTL a window and a bit)

// pacing is the store's side of shared pacing.
type pacing struct {
	asked  atomic.Uint64 // SharePace calls
	done   atomic.Uint64 // the calls the last finished round had taken in
	rounds atomic.Uint64 // rounds that reached Redis
	// published counts the notifications this process published, heard
	// those it took from the others.
	published, heard atomic.Uint64
	wake             chan struct{}

	mu  sync.Mutex
	out paceOut // guarded by mu: the engine's news, not yet sent
	in  paceIn  // guarded by mu: the others' news, not yet handed to the engine
	// limits are the limits as Redis holds them, as far as this process
	// knows, by target name; resyncs counts the resyncs begun, so that a
	// target no resync found any more is forgotten.
	limits  map[string]*paceLimits // guarded by mu
	resyncs uint64                 // guarded by mu

	// Owned by the round loop.
	active map[string]int64                      // target → the last bucket this process sent to it
	fleet  map[string]map[int64]map[string]int64 // target → bucket → field → all processes' count, as last read
	own    map[string]map[int64]map[string]int64 // target → bucket → field → this process's part of it
}

// paceOut is the engine's news by names, merged over the calls a round
// has not taken yet.
type paceOut struct {
	now           int64
	window, width time.Duration
	sent          map[countKey]int64
	pairs         map[limitKey]engine.PairLimit
	targets       map[string]engine.TargetLimit
	notes         []string // 'w' notes, ready to publish
}

type countKey struct {
	target, route string
	epoch, bucket int64
}

type limitKey struct{ target, route string }

// paceLimits are one target's limits: field ("t", "r:<route>") →
// encoding, and the last resync that found them or a write since.
type paceLimits struct {
	fields map[string]string
	seen   uint64
}

// paceIn is the others' news by the engine's numbers.
type paceIn struct {
	pairs   map[engine.Key]engine.PairLimit
	targets map[int32]engine.TargetLimit
	bans    []engine.PaceBan
	seen    []engine.PairSeen
	others  []engine.PaceCount // the last round's: replaced, not merged
	shares  []engine.PaceShare
	fleet   int32 // the last round's live processes, this one included; 0: not read
}

func (p *pacing) init() {
	p.wake = make(chan struct{}, 1)
	p.limits = make(map[string]*paceLimits)
	p.active = make(map[string]int64)
	p.fleet = make(map[string]map[int64]map[string]int64)
	p.own = make(map[string]map[int64]map[string]int64)
}

var _ engine.PaceSharer = (*Store)(nil)

// SharePace implements engine.PaceSharer: out waits for the next round,
// and what the rounds and notifications brought since the last call is
// returned. It never waits on Redis.
func (s *Store) SharePace(out engine.PaceNews) engine.PaceNews {
	p := &s.pace
	p.mu.Lock()
	s.takeOut(&out)
	in := engine.PaceNews{Bans: p.in.bans, Seen: p.in.seen, Others: p.in.others, Shares: p.in.shares, Fleet: p.in.fleet}
	for _, l := range p.in.pairs {
		in.Pairs = append(in.Pairs, l)
	}
	for _, l := range p.in.targets {
		in.Targets = append(in.Targets, l)
	}
	p.in = paceIn{}
	p.mu.Unlock()
	if s.health.degraded.Load() {
		in.Alone, in.Others, in.Shares, in.Fleet = true, nil, nil, 0
	}
	p.asked.Add(1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return in
}

// takeOut merges the engine's news into the next round's. Caller holds
// s.pace.mu.
func (s *Store) takeOut(out *engine.PaceNews) {
	o := &s.pace.out
	o.now, o.window, o.width = out.Now, out.Window, out.Width
	if o.sent == nil {
		o.sent = make(map[countKey]int64)
		o.pairs = make(map[limitKey]engine.PairLimit)
		o.targets = make(map[string]engine.TargetLimit)
	}
	if o.width > 0 {
		oldest := o.now/int64(o.width) - int64(o.window/o.width)
		for k := range o.sent {
			if k.bucket <= oldest {
				delete(o.sent, k) // out of the window: nobody reads it any more
			}
		}
		for _, c := range out.Sent {
			route, target := s.names.route(c.Route), s.names.target(c.Target)
			if route != "" && target != "" && c.Bucket > oldest {
				o.sent[countKey{target: target, route: route, epoch: c.Epoch, bucket: c.Bucket}] += int64(c.N)
			}
		}
	}
	for _, l := range out.Pairs {
		if route, target := s.names.route(l.Route), s.names.target(l.Target); route != "" && target != "" {
			o.pairs[limitKey{target, route}] = l // the engine's latest
		}
	}
	for _, l := range out.Targets {
		if target := s.names.target(l.Target); target != "" {
			o.targets[target] = l
		}
	}
	for _, b := range out.Bans {
		if route, target := s.names.route(b.Route), s.names.target(b.Target); route != "" && target != "" {
			o.notes = append(o.notes, s.header('w', route, target)+"b"+join(b.At, int64(b.Sent), int64(b.Most)))
		}
	}
	for _, x := range out.Seen {
		if route, target := s.names.route(x.Route), s.names.target(x.Target); route != "" && target != "" {
			o.notes = append(o.notes, s.header('w', route, target)+"s"+join(x.Banned, x.OK))
		}
	}
}

// paceLoop runs a round each time SharePace asks, until ctx ends.
func (s *Store) paceLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.pace.wake:
			s.paceRound(ctx)
		}
	}
}

// paceRound sends what the engine handed over and reads the fleet's
// counts back.
func (s *Store) paceRound(ctx context.Context) {
	p := &s.pace
	asked := p.asked.Load()
	defer p.done.Store(asked)
	p.mu.Lock()
	out := p.out
	p.out = paceOut{}
	p.mu.Unlock()
	if s.health.degraded.Load() {
		s.requeue(out)
		return
	}
	if err := s.writeLimits(ctx, out); err != nil {
		if ctx.Err() == nil {
			s.failed(err)
		}
		return
	}
	if out.width > 0 {
		if err := s.exchangeCounts(ctx, out); err != nil {
			if ctx.Err() == nil {
				s.failed(err)
			}
			return
		}
		p.rounds.Add(1)
	}
}

// requeue keeps out's limits for the next round that reaches Redis,
// unless the engine handed newer ones since.
func (s *Store) requeue(out paceOut) {
	p := &s.pace
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out.pairs == nil {
		p.out.sent = make(map[countKey]int64)
		p.out.pairs = make(map[limitKey]engine.PairLimit)
		p.out.targets = make(map[string]engine.TargetLimit)
		p.out.now, p.out.window, p.out.width = out.now, out.window, out.width
	}
	for k, l := range out.pairs {
		if _, newer := p.out.pairs[k]; !newer {
			p.out.pairs[k] = l
		}
	}
	for k, l := range out.targets {
		if _, newer := p.out.targets[k]; !newer {
			p.out.targets[k] = l
		}
	}
}

// limitScript writes a field of a target's limits if it still holds what
// the caller last saw, and publishes it; otherwise it returns what it
// holds. KEYS[1]: the limits. ARGV: field, expected (empty for none), new,
// TTL (ms), channel, notification header.
var limitScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then
	return {0, cur}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6] .. ARGV[3])
return {1, ''}
`)

// writeLimits writes out's limits; on a failure the ones not written wait
// for the next round.
func (s *Store) writeLimits(ctx context.Context, out paceOut) error {
	left := out
	left.pairs, left.targets = make(map[limitKey]engine.PairLimit), make(map[string]engine.TargetLimit)
	for k, l := range out.pairs {
		left.pairs[k] = l
	}
	for k, l := range out.targets {
		left.targets[k] = l
	}
	defer func() { s.requeue(left) }()
	for k, l := range out.pairs {
		if err := s.writeLimit(ctx, k.target, "r:"+k.route, encodePair(l)); err != nil {
			return err
		}
		delete(left.pairs, k)
	}
	for target, l := range out.targets {
		if err := s.writeLimit(ctx, target, "t", encodeTarget(l)); err != nil {
			return err
		}
		delete(left.targets, target)
	}
	return nil
}

// writeLimit writes enc to field of target's limits if it supersedes what
// Redis holds there; otherwise what Redis holds goes back to the engine.
func (s *Store) writeLimit(ctx context.Context, target, field, enc string) error {
	p := &s.pace
	key := s.limitKey(target)
	for range 8 { // each conflict is another process's write: a few at most
		p.mu.Lock()
		cur := p.limit(target, field)
		p.mu.Unlock()
		if !supersedes(field, enc, cur) {
			p.mu.Lock()
			s.deliver(target, field, cur)
			p.mu.Unlock()
			return nil
		}
		callCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		kind := byte('p')
		if field == "t" {
			kind = 't'
		}
		res, err := limitScript.Run(callCtx, s.rdb, []string{key}, field, cur, enc,
			s.opts.RouteTTL.Milliseconds(), s.channel, s.header(kind, routeOf(field), target)).Slice()
		cancel()
		if err != nil {
			return err
		}
		if len(res) != 2 {
			return errBadReply
		}
		theirs, _ := res[1].(string)
		p.mu.Lock()
		if res[0] == int64(1) {
			s.cacheLimit(target, field, enc)
			p.mu.Unlock()
			s.stats.writes.Add(1)
			p.published.Add(1)
			return nil
		}
		s.stats.conflicts.Add(1)
		s.cacheLimit(target, field, theirs)
		p.mu.Unlock()
	}
	return nil // left to the next write or resync
}

// exchangeCounts is a round's one pipeline: heartbeat, this process's
// sends added, wave notes published, the fleet's counts read.
func (s *Store) exchangeCounts(ctx context.Context, out paceOut) error {
	p := &s.pace
	width := int64(out.width)
	buckets := int64(out.window / out.width)
	cur := out.now / width
	oldest := cur - buckets // the newest bucket out of the window
	ttl := out.window + 2*out.width + 10*time.Second
	for k := range out.sent {
		p.active[k.target] = max(p.active[k.target], cur)
	}
	for t, b := range p.active {
		if b <= oldest {
			delete(p.active, t)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	live := heartbeatScript.Eval(ctx, pipe, []string{s.opts.Prefix + ":pace:live"}, s.origin, s.opts.PaceLive.Milliseconds())
	type bucketKey struct {
		target string
		bucket int64
	}
	mine := make(map[bucketKey]int64)
	for k, n := range out.sent {
		pipe.HIncrBy(ctx, s.countKey(k.target, k.bucket), countField(k.route, k.epoch), n)
		mine[bucketKey{k.target, k.bucket}] += n
	}
	for k, n := range mine {
		key := s.countKey(k.target, k.bucket)
		pipe.HIncrBy(ctx, key, "o:"+s.origin, n)
		pipe.PExpire(ctx, key, ttl)
	}
	for _, note := range out.notes {
		pipe.Publish(ctx, s.channel, note)
	}
	type read struct {
		target string
		bucket int64
		cmd    *redis.MapStringStringCmd
	}
	var reads []read
	for t := range p.active {
		for b := oldest + 1; b <= cur; b++ {
			// The last bucket may still get what others send late; older
			// ones are read once.
			if b >= cur-1 || p.fleet[t][b] == nil {
				reads = append(reads, read{t, b, pipe.HGetAll(ctx, s.countKey(t, b))})
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	p.published.Add(uint64(len(out.notes)))
	for k, n := range out.sent {
		addCount(p.own, k.target, k.bucket, countField(k.route, k.epoch), n)
	}
	for k, n := range mine {
		addCount(p.own, k.target, k.bucket, "o:"+s.origin, n)
	}
	for _, rd := range reads {
		fields := make(map[string]int64)
		for f, v := range rd.cmd.Val() {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				fields[f] = n
			}
		}
		if p.fleet[rd.target] == nil {
			p.fleet[rd.target] = make(map[int64]map[string]int64)
		}
		p.fleet[rd.target][rd.bucket] = fields
	}
	for _, m := range []map[string]map[int64]map[string]int64{p.fleet, p.own} {
		for t, byBucket := range m {
			for b := range byBucket {
				if b <= oldest {
					delete(byBucket, b)
				}
			}
			if _, on := p.active[t]; !on || len(byBucket) == 0 {
				delete(m, t)
			}
		}
	}
	alive := make(map[string]bool)
	if vals, err := live.StringSlice(); err == nil {
		for _, o := range vals {
			alive[o] = true
		}
	}
	var others []engine.PaceCount
	var shares []engine.PaceShare
	for t := range p.active {
		num, ok := s.names.number(t)
		if !ok {
			continue
		}
		procs := make(map[string]bool)
		for b, fields := range p.fleet[t] {
			for f, n := range fields {
				if origin, ok := strings.CutPrefix(f, "o:"); ok {
					if n > 0 && origin != s.origin && alive[origin] {
						procs[origin] = true
					}
					continue
				}
				route, epoch, ok := parseCountField(f)
				if !ok {
					continue
				}
				slot, known := s.names.slot(route)
				if n -= p.own[t][b][f]; known && n > 0 {
					others = append(others, engine.PaceCount{Route: slot, Target: num, Epoch: epoch, Bucket: b, N: int32(min(n, 1<<31-1))})
				}
			}
		}
		shares = append(shares, engine.PaceShare{Target: num, Procs: int32(1 + len(procs))})
	}
	p.mu.Lock()
	p.in.others, p.in.shares, p.in.fleet = others, shares, int32(len(alive))
	p.mu.Unlock()
	return nil
}

// heartbeatScript notes this process's round on Redis's clock, drops the
// processes silent for longer than the liveness, and lists the others.
// KEYS[1]: the live set. ARGV: process, liveness (ms).
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)

func addCount(m map[string]map[int64]map[string]int64, target string, bucket int64, field string, n int64) {
	if m[target] == nil {
		m[target] = make(map[int64]map[string]int64)
	}
	if m[target][bucket] == nil {
		m[target][bucket] = make(map[string]int64)
	}
	m[target][bucket][field] += n
}

// Keys and fields of shared pacing.

func (s *Store) limitKey(target string) string {
	return s.opts.Prefix + ":pace:" + tag(target) + ":lim"
}

func (s *Store) countKey(target string, bucket int64) string {
	return s.opts.Prefix + ":pace:" + tag(target) + ":n:" + strconv.FormatInt(bucket, 10)
}

// parseLimitKey is limitKey backwards.
func (s *Store) parseLimitKey(key string) (target string, ok bool) {
	rest, ok := strings.CutPrefix(key, s.opts.Prefix+":pace:{")
	if !ok {
		return "", false
	}
	escaped, ok := strings.CutSuffix(rest, "}:lim")
	if !ok {
		return "", false
	}
	return tagUnescaper.Replace(escaped), true
}

func countField(route string, epoch int64) string {
	return "r:" + route + "\x00" + strconv.FormatInt(epoch, 10)
}

func parseCountField(f string) (route string, epoch int64, ok bool) {
	rest, ok := strings.CutPrefix(f, "r:")
	i := strings.LastIndexByte(rest, 0)
	if !ok || i < 0 {
		return "", 0, false
	}
	epoch, err := strconv.ParseInt(rest[i+1:], 10, 64)
	return rest[:i], epoch, err == nil
}

// routeOf is the route of a limit field, "" for the target's.
func routeOf(field string) string {
	if field == "t" {
		return ""
	}
	return strings.TrimPrefix(field, "r:")
}

// join is a 'w' notification's numbers.
func join(vs ...int64) string {
	b := make([]byte, 0, 16*len(vs))
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// Limits as Redis holds them: numbers separated by spaces.

func float(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func encodePair(l engine.PairLimit) string {
	first := "0"
	if l.First {
		first = "1"
	}
	return strings.Join([]string{float(l.Rate), float(l.Ceiling), strconv.FormatInt(l.Cut, 10), strconv.FormatInt(l.Base, 10),
		strconv.FormatInt(l.Epoch, 10), strconv.FormatInt(l.Since, 10), first}, " ")
}

func decodePair(enc string) (engine.PairLimit, bool) {
	f := strings.Fields(enc)
	if len(f) != 7 {
		return engine.PairLimit{}, false
	}
	var l engine.PairLimit
	var errs [6]error
	l.Rate, errs[0] = strconv.ParseFloat(f[0], 64)
	l.Ceiling, errs[1] = strconv.ParseFloat(f[1], 64)
	l.Cut, errs[2] = strconv.ParseInt(f[2], 10, 64)
	l.Base, errs[3] = strconv.ParseInt(f[3], 10, 64)
	l.Epoch, errs[4] = strconv.ParseInt(f[4], 10, 64)
	l.Since, errs[5] = strconv.ParseInt(f[5], 10, 64)
	l.First = f[6] == "1"
	return l, errors.Join(errs[:]...) == nil
}

func encodeTarget(l engine.TargetLimit) string {
	return strings.Join([]string{float(l.Tolerance), strconv.FormatInt(l.Ceiling, 10), strconv.FormatInt(l.At, 10),
		strconv.FormatInt(l.Base, 10), strconv.FormatInt(l.HoldOff, 10)}, " ")
}

func decodeTarget(enc string) (engine.TargetLimit, bool) {
	f := strings.Fields(enc)
	if len(f) != 5 {
		return engine.TargetLimit{}, false
	}
	var l engine.TargetLimit
	var errs [5]error
	l.Tolerance, errs[0] = strconv.ParseFloat(f[0], 64)
	l.Ceiling, errs[1] = strconv.ParseInt(f[1], 10, 64)
	l.At, errs[2] = strconv.ParseInt(f[2], 10, 64)
	l.Base, errs[3] = strconv.ParseInt(f[3], 10, 64)
	l.HoldOff, errs[4] = strconv.ParseInt(f[4], 10, 64)
	return l, errors.Join(errs[:]...) == nil
}

// supersedes reports whether the limit encoded as enc replaces cur ("" for
// none) in field, by the engine's rule. An encoding that does not parse
// loses to anything.
func supersedes(field, enc, cur string) bool {
	if field == "t" {
		l, ok := decodeTarget(enc)
		c, cok := decodeTarget(cur)
		return ok && (!cok || l.Supersedes(c))
	}
	l, ok := decodePair(enc)
	c, cok := decodePair(cur)
	return ok && (!cok || l.Supersedes(c))
}

// cacheLimit records enc as what Redis holds in target's field. Caller
// holds s.pace.mu.
func (s *Store) cacheLimit(target, field, enc string) {
	p := &s.pace
	l := p.limits[target]
	if l == nil {
		l = &paceLimits{fields: make(map[string]string)}
		p.limits[target] = l
	}
	l.fields[field], l.seen = enc, p.resyncs
}

// limit is what Redis holds in target's field, as far as this process
// knows ("" for nothing). Caller holds mu.
func (p *pacing) limit(target, field string) string {
	if l := p.limits[target]; l != nil {
		return l.fields[field]
	}
	return ""
}

// beginResync numbers a resync about to read every limit.
func (p *pacing) beginResync() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resyncs++
	return p.resyncs
}

// forget drops the targets resync n did not find (their keys expired),
// unless written since.
func (p *pacing) forget(n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for target, l := range p.limits {
		if l.seen < n {
			delete(p.limits, target)
		}
	}
}

// heardLimit takes a limit another process wrote (a notification or a
// resync) when it supersedes the one known here, and hands the winner to
// the engine.
func (s *Store) heardLimit(target, field, enc string) {
	p := &s.pace
	p.mu.Lock()
	defer p.mu.Unlock()
	if supersedes(field, enc, p.limit(target, field)) {
		s.cacheLimit(target, field, enc)
	} else if l := p.limits[target]; l != nil {
		l.seen = p.resyncs
	}
	s.deliver(target, field, p.limit(target, field))
}

// deliver hands the limit encoded as enc to the engine, by its numbers,
// if it announced the target and route. Caller holds s.pace.mu.
func (s *Store) deliver(target, field, enc string) {
	num, ok := s.names.number(target)
	if !ok || enc == "" {
		return
	}
	p := &s.pace
	if field == "t" {
		if l, ok := decodeTarget(enc); ok {
			if p.in.targets == nil {
				p.in.targets = make(map[int32]engine.TargetLimit)
			}
			l.Target = num
			p.in.targets[num] = l
		}
		return
	}
	slot, known := s.names.slot(routeOf(field))
	if l, ok := decodePair(enc); ok && known {
		if p.in.pairs == nil {
			p.in.pairs = make(map[engine.Key]engine.PairLimit)
		}
		l.Route, l.Target = slot, num
		p.in.pairs[engine.Key{Route: slot, Target: num}] = l
	}
}

// announced hands the engine the limits known for a target it has just
// announced.
func (s *Store) announced(name string) {
	p := &s.pace
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.limits[name]; l != nil {
		for field, enc := range l.fields {
			s.deliver(name, field, enc)
		}
	}
}

// heardWave takes another process's 'w' notification: a wave ban or a
// pair seen banned or served.
func (s *Store) heardWave(n note) {
	slot, ok := s.names.slot(n.route)
	num, tok := s.names.number(n.target)
	if !ok || !tok || n.rest == "" {
		return
	}
	var vs []int64
	for f := range strings.SplitSeq(n.rest[1:], ",") {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return
		}
		vs = append(vs, v)
	}
	p := &s.pace
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case n.rest[0] == 'b' && len(vs) == 3:
		p.in.bans = append(p.in.bans, engine.PaceBan{Route: slot, Target: num, At: vs[0], Sent: int32(vs[1]), Most: int32(vs[2])})
	case n.rest[0] == 's' && len(vs) == 2:
		p.in.seen = append(p.in.seen, engine.PairSeen{Route: slot, Target: num, Banned: vs[0], OK: vs[1]})
	}
}

// scanLimits reads every target's limits c holds, for a resync.
func (s *Store) scanLimits(ctx context.Context, c redis.Cmdable) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, s.opts.Prefix+":pace:{*}:lim", resyncBatch).Result()
		if err != nil {
			return err
		}
		type read struct {
			target string
			cmd    *redis.MapStringStringCmd
		}
		var reads []read
		pipe := s.rdb.Pipeline()
		for _, key := range keys {
			if target, ok := s.parseLimitKey(key); ok {
				reads = append(reads, read{target, pipe.HGetAll(ctx, key)})
			}
		}
		if len(reads) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			for _, rd := range reads {
				for field, enc := range rd.cmd.Val() {
					s.heardLimit(rd.target, field, enc)
				}
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

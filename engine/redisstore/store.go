// Package redisstore keeps the engine's shared state in Redis
// (docs/design/004-redis-store.md): health records, leases under
// max_inflight, sessions and incident flags, so that many gateway processes
// share one view of the pool.
//
// Selection never waits on Redis: every process keeps a local read model of
// the records, kept fresh by pub/sub notifications (and a periodic full
// resync that heals missed messages); only operations that must be atomic
// across processes go to Redis. A record is written by compare-and-set on
// its version, with the engine's own pure transition (Health.Apply) run on
// the current record: one rule book for every store. When Redis cannot be
// reached the store keeps serving from the local model, marks itself
// degraded, and merges what changed meanwhile when Redis returns, without
// overwriting records another process changed in between.
//
// It is the only package that imports go-redis.
package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/engine"
)

// Options tunes a Store. Zero fields mean the defaults.
type Options struct {
	// Prefix starts every key and the notification channel: one per
	// deployment. Default "switchyard".
	Prefix string
	// Timeout bounds one Redis call on the request path; past it the store
	// degrades to its local model. Default 100ms.
	Timeout time.Duration
	// Resync is the period of the full resync that heals missed
	// notifications. Default 10s.
	Resync time.Duration
	// Flush is how long successes that move nothing but a healthy record's
	// evidence may wait to be written, batched; failures and transitions
	// are written at once. Default 50ms.
	Flush time.Duration
	// PairTTL is how long an idle route×target record lives in Redis, and
	// RouteTTL an idle route record. Defaults 30m and 24h.
	PairTTL, RouteTTL time.Duration
	// SessionGrace keeps a session key in Redis this long past its binding,
	// so that clocks a little apart agree on it. Default 1m.
	SessionGrace time.Duration
	// IncidentTTL bounds an incident flag that nobody closes (its process
	// died). Default 1h.
	IncidentTTL time.Duration
	// Now is the wall clock that key TTLs and record versions read.
	// Default time.Now. Gateways sharing a Redis need clocks in sync (NTP):
	// a lease expires at the time its holder's engine set, judged by the
	// clock of the engine taking the next one.
	Now func() time.Time
	// PaceLive is how long a process counts as sharing the pacing of the
	// targets it sends to after its last exchange (its engine's Sweep,
	// about once a second): a process gone that long leaves its share to
	// the others. Default 3s.
	PaceLive time.Duration
	// Log receives the transitions to and from degraded, once each, and
	// go-redis's own log lines, so that a JSON log stays JSON; nil
	// discards the former and leaves the latter on go-redis's logger. The
	// library has one logger per process: the last New given a Log sets
	// it.
	Log *slog.Logger
}

// DefaultOptions are the defaults Open gives zero fields, defined here
// only: the gateway's config starts from them.
func DefaultOptions() Options {
	return Options{
		Prefix: "switchyard", Timeout: 100 * time.Millisecond, Resync: 10 * time.Second, Flush: 50 * time.Millisecond,
		PairTTL: 30 * time.Minute, RouteTTL: 24 * time.Hour, SessionGrace: time.Minute, IncidentTTL: time.Hour,
		PaceLive: 3 * time.Second,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Prefix == "" {
		o.Prefix = d.Prefix
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.Resync <= 0 {
		o.Resync = d.Resync
	}
	if o.Flush <= 0 {
		o.Flush = d.Flush
	}
	if o.PairTTL <= 0 {
		o.PairTTL = d.PairTTL
	}
	if o.RouteTTL <= 0 {
		o.RouteTTL = d.RouteTTL
	}
	if o.SessionGrace <= 0 {
		o.SessionGrace = d.SessionGrace
	}
	if o.IncidentTTL <= 0 {
		o.IncidentTTL = d.IncidentTTL
	}
	if o.PaceLive <= 0 {
		o.PaceLive = d.PaceLive
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Store is an engine.Store on Redis. Start it with Run; Close stops it.
type Store struct {
	// immutable after New
	rdb     redis.UniversalClient // a *redis.Client or a *redis.ClusterClient
	addr    string                // for logs: the server, or the cluster's first node
	opts    Options
	origin  string // this process's id in notifications: its own are skipped
	channel string

	names names

	routesMu sync.RWMutex
	routes   []*routeState // guarded by routesMu (growth only); by slot

	leases    leases
	sessions  sessions
	incidents sync.Map // target number → engine.Class of the open incident

	notes    notifications
	pace     pacing // shared pacing (pace.go)
	flushes  keySet // records with successes waiting to be written
	listener atomic.Pointer[func(engine.Key, engine.Health, bool, engine.Health)]

	health     health
	dirtyMu    sync.Mutex
	dirty      map[engine.Key]bool // guarded by dirtyMu: records changed while degraded
	stats      stats
	pendMu     sync.Mutex
	pending    map[string]map[int32]record // guarded by pendMu: remote pairs of targets not announced yet, by target name then route slot
	stopOnce   sync.Once
	stop       chan struct{}
	ready      chan struct{} // closed by Run once subscribed and resynced
	resyncSoon chan struct{} // a route was added: resync without waiting for the period
}

var (
	_ engine.Store    = (*Store)(nil)
	_ engine.Notifier = (*Store)(nil)
)

// New returns a store over the client's Redis: a single server
// (*redis.Client) or a Redis Cluster (*redis.ClusterClient; each script
// touches one slot). Nothing is sent until the engine announces routes;
// call Run to receive other processes' changes.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Log != nil {
		redis.SetLogger(goRedisLog{opts.Log})
	}
	opts = opts.withDefaults()
	addr := ""
	switch c := rdb.(type) {
	case *redis.Client:
		addr = c.Options().Addr
	case *redis.ClusterClient:
		addr = "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	s := &Store{
		rdb:        rdb,
		addr:       addr,
		opts:       opts,
		origin:     rand.Text()[:12],
		channel:    opts.Prefix + ":changes",
		dirty:      make(map[engine.Key]bool),
		pending:    make(map[string]map[int32]record),
		stop:       make(chan struct{}),
		ready:      make(chan struct{}),
		resyncSoon: make(chan struct{}, 1),
	}
	s.health.wake = make(chan struct{}, 1)
	s.names.init()
	s.leases.init()
	s.sessions.init()
	s.pace.init()
	return s
}

// goRedisLog writes go-redis's log lines, printf-style text, to a slog
// logger as warnings: they are about connections failing or commands
// adjusted.
type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "from", "go-redis")
}

// Open connects to the Redis at url and returns a store over it:
// redis://[:password@]host:port/db (rediss:// for TLS) for one server, or
// redis-cluster://[:password@]host:port?addr=host2:port2&addr=… (and
// rediss-cluster://) for a Redis Cluster, seeded by those nodes. An
// unreachable server is not an error: the store starts degraded and
// catches up when it answers.
func Open(url string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	// A failed call degrades at once (MaxRetries -1) and the health loop
	// retries. Waiting for a pooled connection is this process's own
	// congestion, not Redis failing: it gets longer before it counts.
	dial, pool := max(opts.Timeout, 500*time.Millisecond), max(10*opts.Timeout, time.Second)
	// The parsers' errors quote the URL, password included: never pass them on.
	if rest, ok := strings.CutPrefix(url, "redis-cluster://"); ok {
		return openCluster("redis://"+rest, opts, dial, pool)
	}
	if rest, ok := strings.CutPrefix(url, "rediss-cluster://"); ok {
		return openCluster("rediss://"+rest, opts, dial, pool)
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, errors.New("redisstore: not a Redis URL (redis://[:password@]host:port/db, or redis-cluster://host:port?addr=host:port)")
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = dial, opts.Timeout, opts.Timeout, pool, -1
	return New(redis.NewClient(o), opts), nil
}

func openCluster(url string, opts Options, dial, pool time.Duration) (*Store, error) {
	o, err := redis.ParseClusterURL(url)
	if err != nil {
		return nil, errors.New("redisstore: not a Redis Cluster URL (redis-cluster://[:password@]host:port?addr=host:port&addr=…)")
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = dial, opts.Timeout, opts.Timeout, pool, -1
	return New(redis.NewClusterClient(o), opts), nil
}

// Addr is the server's address, or the cluster's seed nodes, for logs
// (never the password).
func (s *Store) Addr() string { return s.addr }

// Close stops Run and closes the client.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	return s.rdb.Close()
}

// Listen implements engine.Notifier: fn learns of every record another
// process changed, one change at a time, in the order the changes were
// seen, from the call that took the record (see notifications).
func (s *Store) Listen(fn func(k engine.Key, old engine.Health, known bool, now engine.Health)) {
	s.listener.Store(&fn)
}

// Ready is closed once Run has subscribed to other processes' changes and
// read the shared records of the routes announced so far (or found Redis
// out of reach).
func (s *Store) Ready() <-chan struct{} { return s.ready }

// Run receives other processes' changes, resyncs every Options.Resync and
// watches the connection until ctx ends or Close. Call it once.
func (s *Store) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.paceLoop(ctx) }()
	// Subscribed before the first resync, so no change falls between them;
	// the first resync covers the routes announced so far.
	sub := s.subscribe(ctx)
	select {
	case <-s.resyncSoon:
	default:
	}
	go func() { defer wg.Done(); s.receive(ctx, sub) }()
	s.resync(ctx)
	close(s.ready)
	s.maintain(ctx)
	s.flush() // what waited when the store stopped
	wg.Wait()
}

// call bounds one Redis call on the request path by Options.Timeout.
func (s *Store) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.Timeout)
}

// names maps the engine's slot and target numbers to the stable names keys
// are made of, and back.
type names struct {
	mu      sync.RWMutex
	routes  nameTable // guarded by mu: by slot
	targets nameTable // guarded by mu: by target number
}

func (n *names) init() {
	n.routes.numbers = make(map[string]int32)
	n.targets.numbers = make(map[string]int32)
}

func (n *names) route(slot int32) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.routes.name(slot)
}

func (n *names) target(num int32) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.targets.name(num)
}

func (n *names) slot(id string) (int32, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	slot, ok := n.routes.numbers[id]
	return slot, ok
}

func (n *names) number(name string) (int32, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	num, ok := n.targets.numbers[name]
	return num, ok
}

// nameTable numbers names both ways. The caller guards it.
type nameTable struct {
	byNumber []string
	numbers  map[string]int32
}

func (t *nameTable) set(n int32, name string) {
	for len(t.byNumber) <= int(n) {
		t.byNumber = append(t.byNumber, "")
	}
	t.byNumber[n] = name
	t.numbers[name] = n
}

// name is number n's name, or "".
func (t *nameTable) name(n int32) string {
	if n >= 0 && int(n) < len(t.byNumber) {
		return t.byNumber[n]
	}
	return ""
}

// Keys. A route's records and leases share the hash tag of its id, so each
// script touches one Redis Cluster slot.

// tag is the route id as a hash tag: braces escaped, so an id cannot end
// the tag early.
func tag(id string) string {
	return "{" + tagEscaper.Replace(id) + "}"
}

var (
	tagEscaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

func (s *Store) recordKey(route, target string) string {
	if target == "" {
		return s.opts.Prefix + ":" + tag(route) + ":g"
	}
	return s.opts.Prefix + ":" + tag(route) + ":t:" + target
}

func (s *Store) leaseKey(route string) string { return s.opts.Prefix + ":" + tag(route) + ":leases" }

func (s *Store) sessionKey(id string) string { return s.opts.Prefix + ":s:" + id }

func (s *Store) incidentKey(target string) string { return s.opts.Prefix + ":i:" + target }

// parseRecordKey is recordKey backwards; ok is false for other keys.
func (s *Store) parseRecordKey(key string) (route, target string, ok bool) {
	rest, ok := strings.CutPrefix(key, s.opts.Prefix+":{")
	if !ok {
		return "", "", false
	}
	escaped, rest, ok := strings.Cut(rest, "}:")
	if !ok {
		return "", "", false
	}
	route = tagUnescaper.Replace(escaped)
	switch {
	case rest == "g":
		return route, "", true
	case strings.HasPrefix(rest, "t:") && len(rest) > 2:
		return route, rest[2:], true
	}
	return "", "", false
}

// stats counts what an operator graphs.
type stats struct {
	errors      atomic.Uint64
	writes      atomic.Uint64
	degradedFor atomic.Uint64 // transitions into degraded
	conflicts   atomic.Uint64
	remote      atomic.Uint64
}

// Stats is a snapshot of the store's counters.
type Stats struct {
	Degraded    bool
	Errors      uint64 // failed Redis calls
	Writes      uint64 // records written
	Outages     uint64 // transitions into degraded
	Conflicts   uint64 // compare-and-set retries: another process wrote first
	RemoteNotes uint64 // records changed by other processes, applied here
	PaceRounds  uint64 // exchanges of shared pacing that reached Redis
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Degraded:    s.health.degraded.Load(),
		Errors:      s.stats.errors.Load(),
		Writes:      s.stats.writes.Load(),
		Outages:     s.stats.degradedFor.Load(),
		Conflicts:   s.stats.conflicts.Load(),
		RemoteNotes: s.stats.remote.Load(),
		PaceRounds:  s.pace.rounds.Load(),
	}
}

// Healthy is nil while Redis answers, and says since when it does not.
func (s *Store) Healthy() error {
	if !s.health.degraded.Load() {
		return nil
	}
	since := time.Unix(0, s.health.since.Load())
	return fmt.Errorf("redis at %s unreachable since %s: serving from local state", s.Addr(), since.UTC().Format(time.RFC3339))
}

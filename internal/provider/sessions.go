package provider

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultMax = 1000
	// DefaultTTL is the session lifetime most providers default to (ten
	// minutes at Oxylabs and Decodo, Preset.Source).
	DefaultTTL = 10 * time.Minute
)

// Config bounds the provider sessions of one gateway route.
type Config struct {
	Max  int           // provider sessions kept at most, the least recently used dropped first; 0: DefaultMax
	TTL  time.Duration // a provider session's lifetime from its start; 0: DefaultTTL
	Idle time.Duration // a provider session unused this long is gone; 0: only TTL ends it
}

func (c Config) withDefaults() Config {
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	return c
}

// ErrRestart is a strict request's refusal when its provider session is
// gone (retired or expired): it would go on from another IP.
var ErrRestart = errors.New("the session's provider session is gone")

// Sessions is one gateway route's table of provider sessions, the route's
// sub-exits: a Switchyard session's key → its provider session id and the
// value (the exit) made for it. A session's provider session is made once
// however many requests ask at once, kept until its TTL, its idle timeout
// or a retirement ends it, and then replaced by a new one (Seq + 1) unless
// the request is strict. At most Max are kept. Safe for concurrent use.
type Sessions[V comparable] struct {
	cfg Config // immutable

	mu      sync.Mutex
	byKey   map[string]*entry[V] // guarded by mu
	byValue map[V]*entry[V]      // guarded by mu: the live ones
	lru     entry[V]             // guarded by mu: sentinel of the ring, most recently used next
	stats   Stats                // guarded by mu
}

// entry is one session's provider session, or its tombstone once retired:
// a strict request must find that it is gone rather than start anew.
type entry[V comparable] struct {
	key, id    string
	seq        int
	serial     uint64 // of the live provider session (Ref)
	born, used int64  // unix ns: started (retired, for a tombstone), last used
	retired    bool
	value      V
	prev, next *entry[V]
}

// Sub is a session's provider session as Get hands it out.
type Sub[V comparable] struct {
	ID    string // the provider session id sent in the username
	Seq   int    // 1 for the session's first provider session, then one more for each that replaced a retired or expired one
	Value V
}

// Stats counts what a table did, the evidence of its sub-exits.
type Stats struct {
	Live    int // provider sessions in use now: not retired, expired or evicted yet
	Entries int // kept now, tombstones included
	Minted  int // provider sessions started
	Retired int // ended by a failure through them (Retire)
	Expired int // ended by their TTL or idle timeout
	Evicted int // dropped for room
}

// Ref names one provider session for later, when its value is no longer
// at hand: a late verdict on an attempt through it. Its serial is unique
// in the process, so a Ref names neither the session's successor, nor one
// started anew for its key after an eviction, nor one of another table (a
// reload's). The zero Ref names none.
type Ref struct {
	Key    string
	Serial uint64
}

// serials numbers the provider sessions of all tables.
var serials atomic.Uint64

// NewSessions returns an empty table bounded by c.
func NewSessions[V comparable](c Config) *Sessions[V] {
	s := &Sessions[V]{cfg: c.withDefaults(), byKey: make(map[string]*entry[V]), byValue: make(map[V]*entry[V])}
	s.lru.prev, s.lru.next = &s.lru, &s.lru
	return s
}

// Get returns key's live provider session, making one with mint (passed
// the new Seq) when there is none. A strict request whose provider session
// is gone gets ErrRestart instead. mint runs under the table's lock, so
// that concurrent requests of one session make one provider session: it
// must be quick and do no I/O.
func (s *Sessions[V]) Get(now time.Time, key string, strict bool, mint func(seq int) (id string, v V, err error)) (Sub[V], error) {
	ns := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[key]
	if e != nil && !e.retired && s.expired(e, ns) {
		s.bury(e, ns)
		s.stats.Expired++
	}
	if e != nil && e.retired && ns-e.born >= int64(s.cfg.TTL) {
		// A tombstone is kept one TTL: long enough for a strict client to
		// be told, bounded like everything else.
		s.remove(e)
		e = nil
	}
	switch {
	case e != nil && !e.retired:
		e.used = ns
		s.toFront(e)
		return Sub[V]{ID: e.id, Seq: e.seq, Value: e.value}, nil
	case e != nil && strict:
		return Sub[V]{}, ErrRestart
	}
	seq := 1
	if e != nil {
		seq = e.seq + 1
	}
	id, v, err := mint(seq)
	if err != nil {
		return Sub[V]{}, err
	}
	if e == nil {
		e = &entry[V]{key: key}
		s.byKey[key] = e
		s.toFront(e)
		if len(s.byKey) > s.cfg.Max {
			s.remove(s.lru.prev)
			s.stats.Evicted++
		}
	}
	e.id, e.seq, e.serial, e.value, e.born, e.used, e.retired = id, seq, serials.Add(1), v, ns, ns, false
	s.byValue[v] = e
	s.toFront(e)
	s.stats.Minted++
	return Sub[V]{ID: id, Seq: seq, Value: v}, nil
}

// Retire ends the provider session whose value is v, if it is still
// live: an attempt reporting late through a provider session already
// replaced cannot end its successor. It reports whether it did.
func (s *Sessions[V]) Retire(now time.Time, v V) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byValue[v]
	if e == nil {
		return false
	}
	s.bury(e, now.UnixNano())
	s.stats.Retired++
	return true
}

// RefOf is the Ref of the live provider session whose value is v; ok is
// false when v is not live.
func (s *Sessions[V]) RefOf(v V) (r Ref, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byValue[v]
	if e == nil {
		return Ref{}, false
	}
	return Ref{Key: e.key, Serial: e.serial}, true
}

// Live is the value of the provider session r names, if it is still live
// at now: not retired, expired or dropped. Its use is not a use of the
// session.
func (s *Sessions[V]) Live(now time.Time, r Ref) (v V, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[r.Key]
	if e == nil || e.retired || e.serial != r.Serial || s.expired(e, now.UnixNano()) {
		return v, false
	}
	return e.value, true
}

// Stats is what the table did so far.
func (s *Sessions[V]) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Live, st.Entries = len(s.byValue), len(s.byKey)
	return st
}

// expired reports whether e's TTL or idle timeout has passed. The caller
// holds s.mu.
func (s *Sessions[V]) expired(e *entry[V], ns int64) bool {
	return ns-e.born >= int64(s.cfg.TTL) || s.cfg.Idle > 0 && ns-e.used >= int64(s.cfg.Idle)
}

// bury turns e into a tombstone, letting go of its value. The caller holds
// s.mu.
func (s *Sessions[V]) bury(e *entry[V], ns int64) {
	var zero V
	delete(s.byValue, e.value)
	e.retired, e.value, e.born = true, zero, ns
}

// toFront makes e the most recently used. The caller holds s.mu.
func (s *Sessions[V]) toFront(e *entry[V]) {
	if e.prev != nil {
		e.prev.next, e.next.prev = e.next, e.prev
	}
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

// remove drops e. The caller holds s.mu.
func (s *Sessions[V]) remove(e *entry[V]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.byKey, e.key)
	if !e.retired {
		delete(s.byValue, e.value)
	}
}

// idLen is the length of a minted provider session id: 12 of 32 letters
// and digits, 60 bits, within every preset's limits (Preset.Source).
const idLen = 12

// NewID mints a provider session id: random, letters and digits only.
func NewID() string {
	return strings.ToLower(rand.Text()[:idLen])
}

// maxPassed is the longest client session id passed through as it is.
const maxPassed = 25

// PassedID is the provider session id of a client's session id passed
// through: the id itself when it is letters and digits only and at most 25
// of them (the strictest preset's limit), else a digest of it in hex, so
// that the same client session always reaches the same provider session
// and no client id can add a parameter to the username.
func PassedID(session string) string {
	if len(session) <= maxPassed && Safe(session) {
		return session
	}
	sum := sha256.Sum256([]byte(session))
	return hex.EncodeToString(sum[:maxPassed/2])
}

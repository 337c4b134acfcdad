package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what an Event records.
type EventKind uint8

// The event kinds. Zero is not a kind, so a decoded event without one is
// caught instead of passing for an outcome.
const (
	EventOutcome  EventKind = iota + 1 // an outcome was applied (the input a replay feeds back)
	EventState                         // a route or route×target state changed
	EventScore                         // a score moved by at least the configured step
	EventIncident                      // a target incident opened or closed
	EventTier                          // a target moved to another cost tier

	numEventKinds = iota + 1
)

var eventKindNames = [numEventKinds]string{
	EventOutcome:  "outcome",
	EventState:    "state",
	EventScore:    "score",
	EventIncident: "incident",
	EventTier:     "tier",
}

func (k EventKind) String() string {
	if k != 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return fmt.Sprintf("event_kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k EventKind) MarshalText() ([]byte, error) {
	if k == 0 || int(k) >= len(eventKindNames) {
		return nil, fmt.Errorf("invalid event kind %d", uint8(k))
	}
	return []byte(eventKindNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *EventKind) UnmarshalText(b []byte) error {
	for i, name := range eventKindNames {
		if i != 0 && name == string(b) {
			*k = EventKind(i)
			return nil
		}
	}
	return fmt.Errorf("unknown event kind %q", b)
}

// Event is one entry in the engine's event stream. Outcomes are events too,
// so that a recorded stream can be replayed through a fresh engine. Target is
// "" for route-global events.
type Event struct {
	Time               time.Time
	Kind               EventKind
	Route              string
	Target             string
	From, To           State         // state events
	OldScore, NewScore float64       // score events
	Class              Class         // the triggering outcome's class (outcome, state, score and incident events)
	Latency            time.Duration // outcome events
	RetryAfter         time.Duration // outcome events
	Probe              bool          // the outcome came from a probe
	Stale              bool          // the outcome came from a lease of an older generation: recorded, but it moved no state
	Reason             string        // short human reason for state/incident events, e.g. "4 consecutive failures"
	Rules              string        // version of the rule table in force
	Open               bool          // incident events: opened (true) or closed (false)
	FromTier, ToTier   int           // tier events
}

// eventJSON is the wire form of Event. Durations are float milliseconds so
// that the stream reads naturally and tools need not know Go's nanoseconds; a
// float64 holds every duration under 2^51ns (26 days) exactly to the
// nanosecond. Zero-valued fields are omitted, which for Class and State means
// OK and Candidate are implied by absence.
type eventJSON struct {
	Time         time.Time `json:"time"`
	Kind         EventKind `json:"kind"`
	Route        string    `json:"route"`
	Target       string    `json:"target,omitempty"`
	From         State     `json:"from,omitempty"`
	To           State     `json:"to,omitempty"`
	OldScore     float64   `json:"old_score,omitempty"`
	NewScore     float64   `json:"new_score,omitempty"`
	Class        Class     `json:"class,omitempty"`
	LatencyMS    float64   `json:"latency_ms,omitempty"`
	RetryAfterMS float64   `json:"retry_after_ms,omitempty"`
	Probe        bool      `json:"probe,omitempty"`
	Stale        bool      `json:"stale,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Rules        string    `json:"rules,omitempty"`
	Open         bool      `json:"open,omitempty"`
	FromTier     int       `json:"from_tier,omitempty"`
	ToTier       int       `json:"to_tier,omitempty"`
}

// MarshalJSON implements json.Marshaler. Time is written in UTC.
func (e Event) MarshalJSON() ([]byte, error) {
	return json.Marshal(eventJSON{
		Time:         e.Time.UTC(),
		Kind:         e.Kind,
		Route:        e.Route,
		Target:       e.Target,
		From:         e.From,
		To:           e.To,
		OldScore:     e.OldScore,
		NewScore:     e.NewScore,
		Class:        e.Class,
		LatencyMS:    durationMS(e.Latency),
		RetryAfterMS: durationMS(e.RetryAfter),
		Probe:        e.Probe,
		Stale:        e.Stale,
		Reason:       e.Reason,
		Rules:        e.Rules,
		Open:         e.Open,
		FromTier:     e.FromTier,
		ToTier:       e.ToTier,
	})
}

// UnmarshalJSON implements json.Unmarshaler. Unknown fields are ignored so
// that older readers can replay streams from newer engines.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w eventJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Kind == 0 {
		return errors.New("event has no kind")
	}
	latency, err := msDuration("latency_ms", w.LatencyMS)
	if err != nil {
		return err
	}
	retryAfter, err := msDuration("retry_after_ms", w.RetryAfterMS)
	if err != nil {
		return err
	}
	*e = Event{
		Time:       w.Time.UTC(),
		Kind:       w.Kind,
		Route:      w.Route,
		Target:     w.Target,
		From:       w.From,
		To:         w.To,
		OldScore:   w.OldScore,
		NewScore:   w.NewScore,
		Class:      w.Class,
		Latency:    latency,
		RetryAfter: retryAfter,
		Probe:      w.Probe,
		Stale:      w.Stale,
		Reason:     w.Reason,
		Rules:      w.Rules,
		Open:       w.Open,
		FromTier:   w.FromTier,
		ToTier:     w.ToTier,
	}
	return nil
}

func durationMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msDuration inverts durationMS, rounding to the nearest nanosecond.
func msDuration(field string, ms float64) (time.Duration, error) {
	ns := math.Round(ms * float64(time.Millisecond))
	if ns >= 1<<63 || ns < -(1<<63) {
		return 0, fmt.Errorf("%s %v out of range", field, ms)
	}
	return time.Duration(ns), nil
}

// maxEventLine bounds one line of ReadEvents, so that a corrupt file without
// newlines fails instead of exhausting memory.
const maxEventLine = 1 << 20

// WriteEvents writes events as JSON Lines, one object per line.
func WriteEvents(w io.Writer, events []Event) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range events {
		if err := enc.Encode(events[i]); err != nil {
			return fmt.Errorf("events: event %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// ReadEvents reads JSON Lines written by WriteEvents, skipping blank lines.
// Errors name the 1-based line number ("events:LINE: ...") so a hand-edited
// recording can be fixed.
func ReadEvents(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxEventLine)
	var events []Event
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("events:%d: %w", line, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("events:%d: %w", line+1, err)
	}
	return events, nil
}

// ErrSubscriptionClosed is returned by Next once a closed subscription has
// no buffered events left.
var ErrSubscriptionClosed = errors.New("engine: subscription closed")

// Subscription receives engine events through a bounded ring buffer. The
// engine publishes on its hot path and must never wait for a slow reader, so
// when the buffer is full the oldest event is dropped and counted: a reader
// that falls behind loses history, not the engine's throughput.
type Subscription struct {
	mu      sync.Mutex
	ring    []Event // fixed length = capacity
	head    int     // index of the oldest buffered event
	n       int     // number of buffered events
	dropped uint64
	isDone  atomic.Bool
	wake    chan struct{} // capacity 1: "the ring may have changed"
	done    chan struct{} // closed by Close
	bus     *eventBus     // told when the subscription closes; nil if standalone
	kinds   uint8         // immutable: bit k set for each EventKind k delivered
}

// allKinds is the kinds mask of a subscription that asked for none in
// particular: every event, whatever its kind.
const allKinds = uint8(1<<numEventKinds - 1)

func kindsMask(kinds []EventKind) uint8 {
	if len(kinds) == 0 {
		return allKinds
	}
	var m uint8
	for _, k := range kinds {
		if k > 0 && k < numEventKinds {
			m |= 1 << k
		}
	}
	return m
}

// newSubscription returns a subscription buffering up to capacity events
// (at least 1).
func newSubscription(capacity int) *Subscription {
	return &Subscription{
		kinds: allKinds,
		ring:  make([]Event, max(capacity, 1)),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
}

// publish buffers e without blocking, dropping the oldest event if the
// buffer is full. Events published after Close are discarded.
func (s *Subscription) publish(e Event) {
	s.mu.Lock()
	if s.isDone.Load() {
		s.mu.Unlock()
		return
	}
	if s.n == len(s.ring) {
		s.ring[s.head] = e
		s.head = (s.head + 1) % len(s.ring)
		s.dropped++
	} else {
		s.ring[(s.head+s.n)%len(s.ring)] = e
		s.n++
	}
	s.mu.Unlock()
	s.signal()
}

// signal wakes one waiting Next; a pending wake-up already covers this one.
func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the oldest buffered event, waiting until one is published,
// ctx is done, or the subscription is closed. Buffered events are delivered
// even after Close, like a closed channel's; then Next returns
// ErrSubscriptionClosed.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if s.n > 0 {
			e := s.ring[s.head]
			s.ring[s.head] = Event{} // release the strings for the GC
			s.head = (s.head + 1) % len(s.ring)
			s.n--
			more := s.n > 0
			s.mu.Unlock()
			if more {
				// The single wake-up token may have been taken by this call;
				// pass it on so a concurrent Next does not sleep on a
				// non-empty ring.
				s.signal()
			}
			return e, nil
		}
		closed := s.isDone.Load()
		s.mu.Unlock()
		if closed {
			return Event{}, ErrSubscriptionClosed
		}
		select {
		case <-s.wake:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Poll appends every buffered event to dst, oldest first, without waiting,
// and returns the extended slice.
func (s *Subscription) Poll(dst []Event) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; s.n > 0; s.n-- {
		dst = append(dst, s.ring[s.head])
		s.ring[s.head] = Event{}
		s.head = (s.head + 1) % len(s.ring)
	}
	return dst
}

// Dropped returns the number of events dropped because the buffer was full.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close stops delivery and wakes any waiting Next. It is idempotent; the
// engine forgets closed subscriptions on its next publish or subscribe.
func (s *Subscription) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isDone.Load() {
		return
	}
	s.isDone.Store(true)
	close(s.done)
	if s.bus != nil {
		s.bus.count(s.kinds, -1)
	}
}

func (s *Subscription) closed() bool { return s.isDone.Load() }

// eventBus fans events out to subscriptions. publish costs one atomic load
// when nobody subscribes to the event's kind, so the engine can publish
// unconditionally: a subscriber that wants only state changes puts nothing
// on the acquire/report path. The zero value is ready to use.
type eventBus struct {
	open atomic.Int64                // subscriptions not yet closed
	want [numEventKinds]atomic.Int64 // open subscriptions wanting each kind
	mu   sync.Mutex
	subs []*Subscription
}

// subscribe returns a new subscription buffering up to capacity events of
// the given kinds (all kinds when none are given).
func (b *eventBus) subscribe(capacity int, kinds ...EventKind) *Subscription {
	s := newSubscription(capacity)
	s.bus = b
	s.kinds = kindsMask(kinds)
	b.mu.Lock()
	// Prune here too: while nobody is open, publish returns early and
	// would never prune, so subscribe/Close cycles would grow the list.
	b.subs = append(slices.DeleteFunc(b.subs, (*Subscription).closed), s)
	b.mu.Unlock()
	b.count(s.kinds, 1)
	return s
}

// count adds d to the open counts of a subscription with the kinds mask.
func (b *eventBus) count(kinds uint8, d int64) {
	b.open.Add(d)
	for k := range b.want {
		if kinds&(1<<k) != 0 {
			b.want[k].Add(d)
		}
	}
}

// active reports whether any subscription is open.
func (b *eventBus) active() bool { return b.open.Load() > 0 }

// wants reports whether an open subscription wants events of kind k.
func (b *eventBus) wants(k EventKind) bool {
	return k < numEventKinds && b.want[k].Load() > 0
}

// publish delivers e to every open subscription wanting its kind and
// prunes closed ones. Publishers are serialized, so every subscription sees
// the same order.
func (b *eventBus) publish(e Event) {
	if !b.wants(e.Kind) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = slices.DeleteFunc(b.subs, (*Subscription).closed)
	for _, s := range b.subs {
		if s.kinds&(1<<e.Kind) != 0 {
			s.publish(e)
		}
	}
}

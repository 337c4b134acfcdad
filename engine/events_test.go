package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var eventTime = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

func TestEventKindText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		k    EventKind
		name string
	}{
		{EventOutcome, "outcome"},
		{EventState, "state"},
		{EventScore, "score"},
		{EventIncident, "incident"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := tt.k.MarshalText()
			if err != nil || string(b) != tt.name || tt.k.String() != tt.name {
				t.Fatalf("MarshalText() = %q, %v; String() = %q; want %q", b, err, tt.k.String(), tt.name)
			}
			var k EventKind
			if err := k.UnmarshalText(b); err != nil || k != tt.k {
				t.Fatalf("UnmarshalText(%q) = %v, %v; want %v", b, k, err, tt.k)
			}
		})
	}
	for _, k := range []EventKind{0, numEventKinds, 255} {
		if _, err := k.MarshalText(); err == nil {
			t.Errorf("EventKind(%d).MarshalText() succeeded", k)
		}
		if want := fmt.Sprintf("event_kind(%d)", k); k.String() != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", k, k.String(), want)
		}
	}
	for _, s := range []string{"", "Outcome", "bogus"} {
		var k EventKind
		if err := k.UnmarshalText([]byte(s)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", s)
		}
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		e    Event
	}{
		{"outcome", Event{Time: eventTime, Kind: EventOutcome, Route: "r1", Target: "example.com",
			Class: RateLimited, Latency: 12 * time.Millisecond, RetryAfter: 2 * time.Second, Probe: true, Rules: "v3"}},
		{"outcome ok", Event{Time: eventTime, Kind: EventOutcome, Route: "r1", Class: OK, Latency: 1500 * time.Microsecond}},
		{"outcome stale", Event{Time: eventTime, Kind: EventOutcome, Route: "r1", Class: Blocked, Latency: 250 * time.Microsecond, Stale: true}},
		{"outcome ns latency", Event{Time: eventTime, Kind: EventOutcome, Route: "r1", Latency: 123456789 * time.Nanosecond}},
		{"outcome long latency", Event{Time: eventTime, Kind: EventOutcome, Route: "r1", Latency: 72*time.Hour + time.Microsecond}},
		{"state", Event{Time: eventTime, Kind: EventState, Route: "r1", Target: "example.com",
			From: Healthy, To: Cooling, Class: Blocked, Reason: "4 consecutive failures", Rules: "v3"}},
		{"state global", Event{Time: eventTime, Kind: EventState, Route: "r2", From: Cooling, To: HalfOpen, Reason: "cooldown expired"}},
		{"state to candidate", Event{Time: eventTime, Kind: EventState, Route: "r2", From: Draining, To: Candidate}},
		{"score", Event{Time: eventTime, Kind: EventScore, Route: "r1", OldScore: 0.8125, NewScore: 0.1 + 0.2, Class: TargetTimeout}},
		{"score to zero", Event{Time: eventTime, Kind: EventScore, Route: "r1", OldScore: 0.05}},
		{"incident open", Event{Time: eventTime, Kind: EventIncident, Route: "r1", Target: "example.com",
			Class: Target5xx, Reason: "5xx from 6 routes", Open: true}},
		{"incident closed", Event{Time: eventTime, Kind: EventIncident, Route: "r1", Target: "example.com", Reason: "recovered"}},
		{"zero time empty route", Event{Kind: EventOutcome}},
		{"html in reason", Event{Time: eventTime, Kind: EventState, Route: "r<1>", Reason: `a & "b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			var got Event
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("Unmarshal(%s): %v", b, err)
			}
			if got != tt.e {
				t.Fatalf("round trip of %s:\n got %+v\nwant %+v", b, got, tt.e)
			}
		})
	}
}

func TestEventJSONWire(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	tests := []struct {
		name string
		e    Event
		want string
	}{
		{"outcome", Event{Time: eventTime.In(paris), Kind: EventOutcome, Route: "r1", Target: "example.com",
			Class: RateLimited, Latency: 12500 * time.Microsecond, RetryAfter: 2 * time.Second, Probe: true, Rules: "v3"},
			`{"time":"2026-01-02T03:04:05.123456789Z","kind":"outcome","route":"r1","target":"example.com",` +
				`"class":"rate_limited","latency_ms":12.5,"retry_after_ms":2000,"probe":true,"rules":"v3"}`},
		{"minimal", Event{Time: eventTime, Kind: EventOutcome},
			`{"time":"2026-01-02T03:04:05.123456789Z","kind":"outcome","route":""}`},
		{"state", Event{Time: eventTime, Kind: EventState, Route: "r1", From: Healthy, To: Suspect, Reason: "x", Open: true, Stale: true},
			`{"time":"2026-01-02T03:04:05.123456789Z","kind":"state","route":"r1","from":"` + Healthy.String() +
				`","to":"` + Suspect.String() + `","stale":true,"reason":"x","open":true}`},
		{"score", Event{Time: eventTime, Kind: EventScore, Route: "r1", OldScore: 0.5, NewScore: 0.25},
			`{"time":"2026-01-02T03:04:05.123456789Z","kind":"score","route":"r1","old_score":0.5,"new_score":0.25}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("Marshal =\n%s\nwant\n%s", b, tt.want)
			}
		})
	}
}

func TestEventJSONErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"no kind", `{"time":"2026-01-02T03:04:05Z","route":"r1"}`, "no kind"},
		{"bad kind", `{"kind":"bogus","route":"r1"}`, `unknown event kind "bogus"`},
		{"bad class", `{"kind":"outcome","route":"r1","class":"bogus"}`, `unknown outcome class "bogus"`},
		{"bad state", `{"kind":"state","route":"r1","to":"bogus"}`, `"bogus"`},
		{"bad time", `{"time":"yesterday","kind":"outcome","route":"r1"}`, "yesterday"},
		{"latency overflow", `{"kind":"outcome","route":"r1","latency_ms":1e20}`, "latency_ms"},
		{"retry overflow", `{"kind":"outcome","route":"r1","retry_after_ms":-1e20}`, "retry_after_ms"},
		{"not an object", `[1]`, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var e Event
			err := json.Unmarshal([]byte(tt.in), &e)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal(%s) error = %v, want containing %q", tt.in, err, tt.want)
			}
		})
	}
	for _, e := range []Event{{Route: "no kind"}, {Kind: EventState, To: State(200)}, {Kind: EventOutcome, Class: Class(200)}} {
		if b, err := json.Marshal(e); err == nil {
			t.Errorf("Marshal(%+v) = %s, want error", e, b)
		}
	}
}

func TestWriteReadEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []Event
	}{
		{"none", nil},
		{"one", []Event{{Time: eventTime, Kind: EventOutcome, Route: "r1", Latency: time.Millisecond}}},
		{"mixed", []Event{
			{Time: eventTime, Kind: EventOutcome, Route: "r1", Target: "t", Class: Blocked, Latency: 3 * time.Millisecond},
			{Time: eventTime.Add(time.Microsecond), Kind: EventState, Route: "r1", Target: "t", From: Healthy, To: Cooling, Class: Blocked, Reason: "blocked"},
			{Time: eventTime.Add(2 * time.Microsecond), Kind: EventScore, Route: "r1", OldScore: 1, NewScore: 0.5, Class: Blocked},
			{Time: eventTime.Add(3 * time.Microsecond), Kind: EventIncident, Route: "r1", Target: "t", Open: true, Reason: "line\nbreak"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := WriteEvents(&buf, tt.events); err != nil {
				t.Fatal(err)
			}
			if lines := strings.Count(buf.String(), "\n"); lines != len(tt.events) {
				t.Fatalf("wrote %d lines for %d events:\n%s", lines, len(tt.events), buf.String())
			}
			got, err := ReadEvents(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.events) {
				t.Fatalf("read %d events, wrote %d", len(got), len(tt.events))
			}
			for i := range got {
				if got[i] != tt.events[i] {
					t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], tt.events[i])
				}
			}
		})
	}
}

func TestWriteEventsError(t *testing.T) {
	t.Parallel()
	err := WriteEvents(&bytes.Buffer{}, []Event{{Kind: EventOutcome}, {Route: "no kind"}})
	if err == nil || !strings.Contains(err.Error(), "events: event 1:") {
		t.Fatalf("WriteEvents error = %v, want it to name event 1", err)
	}
}

func TestReadEventsErrors(t *testing.T) {
	t.Parallel()
	ok := `{"kind":"outcome","route":"r1"}`
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"bad json on line 2", ok + "\n{\n" + ok + "\n", "events:2: "},
		{"bad kind after blank line", ok + "\n\n" + `{"kind":"nope","route":"r1"}` + "\n", `events:3: unknown event kind "nope"`},
		{"crlf then bad", ok + "\r\n" + ok + "\r\n" + "x\r\n", "events:3: "},
		{"line too long", ok + "\n" + strings.Repeat(" ", maxEventLine+1), "events:2: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadEvents(strings.NewReader(tt.in))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ReadEvents error = %v, want prefix %q", err, tt.want)
			}
			if got != nil {
				t.Errorf("ReadEvents returned %d events with an error", len(got))
			}
		})
	}
}

// eventRoutes returns the Route of each event, which tests use as a sequence number.
func eventRoutes(events []Event) []string {
	var r []string
	for _, e := range events {
		r = append(r, e.Route)
	}
	return r
}

func TestSubscriptionRing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		capacity    int
		publish     int
		want        string
		wantDropped uint64
	}{
		{capacity: 3, publish: 0, want: ""},
		{capacity: 3, publish: 2, want: "0 1"},
		{capacity: 3, publish: 3, want: "0 1 2"},
		{capacity: 3, publish: 5, want: "2 3 4", wantDropped: 2},
		{capacity: 3, publish: 10, want: "7 8 9", wantDropped: 7},
		{capacity: 0, publish: 3, want: "2", wantDropped: 2},
		{capacity: -5, publish: 1, want: "0"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("cap%d_pub%d", tt.capacity, tt.publish), func(t *testing.T) {
			t.Parallel()
			s := newSubscription(tt.capacity)
			for i := range tt.publish {
				s.publish(Event{Route: fmt.Sprint(i)})
			}
			if got := strings.Join(eventRoutes(s.Poll(nil)), " "); got != tt.want {
				t.Errorf("Poll = %q, want %q", got, tt.want)
			}
			if d := s.Dropped(); d != tt.wantDropped {
				t.Errorf("Dropped = %d, want %d", d, tt.wantDropped)
			}
			if got := s.Poll(nil); len(got) != 0 {
				t.Errorf("second Poll = %v, want empty", eventRoutes(got))
			}
		})
	}
}

func TestSubscriptionPollAppends(t *testing.T) {
	t.Parallel()
	s := newSubscription(4)
	s.publish(Event{Route: "b"})
	s.publish(Event{Route: "c"})
	got := s.Poll([]Event{{Route: "a"}})
	if r := strings.Join(eventRoutes(got), " "); r != "a b c" {
		t.Fatalf("Poll = %q, want %q", r, "a b c")
	}
	// The ring wraps around after being drained.
	for _, r := range []string{"d", "e", "f", "g"} {
		s.publish(Event{Route: r})
	}
	if r := strings.Join(eventRoutes(s.Poll(nil)), " "); r != "d e f g" || s.Dropped() != 0 {
		t.Fatalf("Poll = %q, Dropped = %d; want %q, 0", r, s.Dropped(), "d e f g")
	}
}

func TestSubscriptionNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *Subscription) (Event, error)
		want string // Route of the event, or the error text
	}{
		{"buffered", func(t *testing.T, s *Subscription) (Event, error) {
			s.publish(Event{Route: "a"})
			return s.Next(t.Context())
		}, "a"},
		{"waits for publish", func(t *testing.T, s *Subscription) (Event, error) {
			time.AfterFunc(10*time.Millisecond, func() { s.publish(Event{Route: "late"}) })
			return s.Next(t.Context())
		}, "late"},
		{"canceled while waiting", func(t *testing.T, s *Subscription) (Event, error) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(10*time.Millisecond, cancel)
			return s.Next(ctx)
		}, context.Canceled.Error()},
		{"deadline", func(t *testing.T, s *Subscription) (Event, error) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			return s.Next(ctx)
		}, context.DeadlineExceeded.Error()},
		{"close unblocks", func(t *testing.T, s *Subscription) (Event, error) {
			time.AfterFunc(10*time.Millisecond, s.Close)
			return s.Next(t.Context())
		}, ErrSubscriptionClosed.Error()},
		{"drains after close", func(t *testing.T, s *Subscription) (Event, error) {
			s.publish(Event{Route: "kept"})
			s.Close()
			return s.Next(t.Context())
		}, "kept"},
		{"publish after close discarded", func(t *testing.T, s *Subscription) (Event, error) {
			s.Close()
			s.Close()
			s.publish(Event{Route: "lost"})
			return s.Next(t.Context())
		}, ErrSubscriptionClosed.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSubscription(4)
			e, err := tt.run(t, s)
			got := e.Route
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Next = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSubscriptionClose(t *testing.T) {
	t.Parallel()
	s := newSubscription(2)
	s.publish(Event{Route: "a"})
	s.Close()
	if !s.closed() {
		t.Fatal("closed() = false after Close")
	}
	if _, err := s.Next(t.Context()); err != nil {
		t.Fatalf("Next after Close with a buffered event: %v", err)
	}
	if _, err := s.Next(t.Context()); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next on drained closed subscription: %v, want ErrSubscriptionClosed", err)
	}
}

func TestEventBus(t *testing.T) {
	t.Parallel()
	var b eventBus
	if b.active() {
		t.Fatal("zero eventBus is active")
	}
	b.publish(Event{Route: "nobody"}) // must not panic or block

	s1, s2 := b.subscribe(4), b.subscribe(4)
	if !b.active() {
		t.Fatal("eventBus with subscribers is inactive")
	}
	b.publish(Event{Route: "both"})
	s1.Close()
	if !b.active() {
		t.Fatal("eventBus inactive with one subscriber still open")
	}
	b.publish(Event{Route: "s2 only"})
	if len(b.subs) != 1 {
		t.Errorf("publish kept %d subscriptions, want the 1 open", len(b.subs))
	}
	s2.Close()
	s2.Close()
	if b.active() {
		t.Fatal("eventBus active after all subscriptions closed")
	}
	if got := strings.Join(eventRoutes(s1.Poll(nil)), ","); got != "both" {
		t.Errorf("s1 got %q, want %q", got, "both")
	}
	if got := strings.Join(eventRoutes(s2.Poll(nil)), ","); got != "both,s2 only" {
		t.Errorf("s2 got %q, want %q", got, "both,s2 only")
	}

	// Subscribe/Close cycles without publishes do not grow the list.
	for range 10 {
		b.subscribe(1).Close()
	}
	if len(b.subs) > 1 {
		t.Errorf("eventBus holds %d closed subscriptions", len(b.subs))
	}
}

func TestEventBusConcurrent(t *testing.T) {
	t.Parallel()
	const publishers, perPublisher = 8, 500
	var b eventBus
	slow := b.subscribe(16) // polled in bursts: must drop, not block
	s := b.subscribe(64)

	var readers sync.WaitGroup
	var received int
	readers.Go(func() {
		for {
			if _, err := s.Next(t.Context()); err != nil {
				return
			}
			received++
		}
	})
	var pollers sync.WaitGroup
	var polled int
	stop := make(chan struct{})
	pollers.Go(func() {
		var buf []Event
		for {
			select {
			case <-stop:
				return
			default:
				buf = slow.Poll(buf[:0])
				polled += len(buf)
			}
		}
	})

	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Go(func() {
			for i := range perPublisher {
				b.publish(Event{Kind: EventOutcome, Route: fmt.Sprint(p), Latency: time.Duration(i)})
			}
		})
	}
	pubs.Wait()
	close(stop)
	pollers.Wait()
	s.Close()
	readers.Wait()

	const total = publishers * perPublisher
	if got := uint64(received) + s.Dropped(); got != total {
		t.Errorf("received %d + dropped %d = %d, want %d", received, s.Dropped(), got, total)
	}
	polled += len(slow.Poll(nil))
	if got := uint64(polled) + slow.Dropped(); got != total {
		t.Errorf("polled %d + dropped %d = %d, want %d", polled, slow.Dropped(), got, total)
	}
}

func TestSubscriptionConcurrentReaders(t *testing.T) {
	t.Parallel()
	const events, readers = 2000, 4
	s := newSubscription(events) // large enough that nothing drops
	var mu sync.Mutex
	seen := make(map[time.Duration]int)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for {
				e, err := s.Next(t.Context())
				if err != nil {
					return
				}
				mu.Lock()
				seen[e.Latency]++
				mu.Unlock()
			}
		})
	}
	for i := range events {
		s.publish(Event{Latency: time.Duration(i)})
	}
	s.Close() // readers drain what is left, then stop
	wg.Wait()
	if len(seen) != events {
		t.Fatalf("readers saw %d distinct events, want %d", len(seen), events)
	}
	for l, n := range seen {
		if n != 1 {
			t.Fatalf("event %d delivered %d times", l, n)
		}
	}
}

// Not parallel: AllocsPerRun counts every goroutine's allocations.
func TestPublishAllocs(t *testing.T) {
	e := Event{Time: eventTime, Kind: EventState, Route: "r1", Target: "example.com", From: Healthy, To: Cooling, Reason: "blocked"}
	s := newSubscription(8)
	if n := testing.AllocsPerRun(100, func() { s.publish(e) }); n != 0 {
		t.Errorf("Subscription.publish allocates %v times per call, want 0", n)
	}
	var b eventBus
	b.subscribe(8)
	b.subscribe(2)
	if n := testing.AllocsPerRun(100, func() { b.publish(e) }); n != 0 {
		t.Errorf("eventBus.publish allocates %v times per call, want 0", n)
	}
}

func TestEventBusKinds(t *testing.T) {
	t.Parallel()
	var b eventBus
	states := b.subscribe(8, EventState, EventIncident)
	if b.wants(EventOutcome) || b.wants(EventScore) || !b.wants(EventState) || !b.wants(EventIncident) {
		t.Fatal("wants does not follow the subscribed kinds")
	}
	for _, k := range []EventKind{EventOutcome, EventState, EventScore, EventIncident} {
		b.publish(Event{Kind: k, Route: k.String()})
	}
	if got := strings.Join(eventRoutes(states.Poll(nil)), ","); got != "state,incident" {
		t.Fatalf("got %q, want state,incident", got)
	}
	states.Close()
	if b.wants(EventState) || b.active() {
		t.Fatal("closed subscription still counted")
	}
}

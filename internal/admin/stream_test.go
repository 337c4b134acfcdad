package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// sseEvent is one server-sent event as a client reads it.
type sseEvent struct{ name, data string }

// sseClient reads one /api/events/stream.
type sseClient struct {
	t      *testing.T
	events chan sseEvent // closed when the stream ends
	cancel context.CancelFunc
}

// openStream connects to /api/events/stream with query; the test's cleanup
// hangs up.
func openStream(t *testing.T, f *fixture, query string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.hs.URL+"/api/events/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	c := &sseClient{t: t, events: make(chan sseEvent, 16), cancel: cancel}
	go func() {
		defer close(c.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				if ev.name != "" {
					c.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	t.Cleanup(c.hangUp)
	return c
}

// next returns the next event, failing the test after 5 s.
func (c *sseClient) next() sseEvent {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			c.t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		c.t.Fatal("no event within 5s")
	}
	return sseEvent{}
}

// ended waits up to 5 s for the server to end the stream.
func (c *sseClient) ended() bool {
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// hangUp disconnects and waits for the reader to end.
func (c *sseClient) hangUp() {
	c.cancel()
	for range c.events {
	}
}

// waitStreams waits, boundedly, until n streams are connected.
func waitStreams(t *testing.T, f *fixture, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.streams.count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams connected, want %d", f.srv.streams.count(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStreamDeliversEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	all := openStream(t, f, "")
	onlyCarol := openStream(t, f, "?route="+url.QueryEscape(carol)+"&kind=state")
	waitStreams(t, f, 2)
	for _, id := range []string{bob, carol} {
		if err := f.e.Drain(time.Now(), id); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{bob, carol} {
		ev := all.next()
		var got engine.Event
		if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
			t.Fatalf("%v in %q", err, ev.data)
		}
		if ev.name != "state" || got.Route != want || got.To != engine.Draining || got.Reason == "" || got.Rules == "" {
			t.Errorf("event %s %+v, want %s draining with a reason and the rules", ev.name, got, want)
		}
	}
	if ev := onlyCarol.next(); !strings.Contains(ev.data, `"route":"`+carol+`"`) {
		t.Errorf("the filtered stream got %s", ev.data)
	}
}

func TestStreamClientLeaving(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c := openStream(t, f, "")
	waitStreams(t, f, 1)
	c.hangUp()
	waitStreams(t, f, 0)
	// Events go on being published with nobody to take them.
	if err := f.e.Drain(time.Now(), bob); err != nil {
		t.Fatal(err)
	}
}

func TestStreamRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	if status, _, _ := f.do(t, http.MethodGet, "/api/events/stream?kind=outcome", ""); status != http.StatusBadRequest {
		t.Errorf("kind=outcome: %d, want 400", status)
	}
	if status, _, _ := f.do(t, http.MethodPost, "/api/events/stream", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", status)
	}
	for range maxStreams {
		if _, ok := f.srv.streams.join(eventFilter{}); !ok {
			t.Fatal("refused below the cap")
		}
	}
	if status, _, _ := f.do(t, http.MethodGet, "/api/events/stream", ""); status != http.StatusServiceUnavailable {
		t.Errorf("beyond %d streams: %d, want 503", maxStreams, status)
	}
}

func TestEndStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	c := openStream(t, f, "")
	waitStreams(t, f, 1)
	f.srv.EndStreams()
	if !c.ended() {
		t.Fatal("the stream is still open after EndStreams")
	}
	waitStreams(t, f, 0)
	if status, _, _ := f.do(t, http.MethodGet, "/api/events/stream", ""); status != http.StatusServiceUnavailable {
		t.Errorf("a stream after the end: %d, want 503", status)
	}
}

func TestStreamBuffersAreBounded(t *testing.T) {
	t.Parallel()
	ss := newStreams()
	slow, _ := ss.join(eventFilter{})
	picky, _ := ss.join(eventFilter{target: "b.example"})
	const published = 3 * streamBuffer
	for i := range published {
		ss.publish(engine.Event{Kind: engine.EventState, Route: "r", Target: "a.example", Reason: string(rune('a' + i%26))})
	}
	if n := len(slow.events); n != streamBuffer {
		t.Errorf("a client that never reads holds %d events, want its buffer of %d", n, streamBuffer)
	}
	if n := slow.takeDropped(); n != published-streamBuffer {
		t.Errorf("dropped %d, want %d", n, published-streamBuffer)
	}
	if n := slow.takeDropped(); n != 0 {
		t.Errorf("dropped again %d, want 0 once told", n)
	}
	// The newest are kept: the last published is the last buffered.
	var last engine.Event
	for range streamBuffer {
		last = <-slow.events
	}
	if want := string(rune('a' + (published-1)%26)); last.Reason != want {
		t.Errorf("the newest buffered is %q, want %q", last.Reason, want)
	}
	if len(picky.events) != 0 || picky.takeDropped() != 0 {
		t.Error("a client filtering another target got events")
	}
}

// gatedWriter is a client connection that takes each write only when the
// test lets it: a reader slower than the events.
type gatedWriter struct {
	header http.Header
	gate   chan struct{} // one receive per write
	wrote  chan string   // what each write carried
}

func (g *gatedWriter) Header() http.Header { return g.header }
func (g *gatedWriter) WriteHeader(int)     {}
func (g *gatedWriter) Flush()              {}
func (g *gatedWriter) Write(b []byte) (int, error) {
	<-g.gate
	g.wrote <- string(b)
	return len(b), nil
}

func TestSlowStreamIsToldWhatItMissed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	w := &gatedWriter{header: make(http.Header), gate: make(chan struct{}), wrote: make(chan string, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/events/stream", nil)
	done := make(chan struct{})
	go func() { defer close(done); f.srv.Handler().ServeHTTP(w, req) }()
	w.gate <- struct{}{} // the greeting
	<-w.wrote
	waitStreams(t, f, 1)
	// Event 0 is taken, and its write held while many more are published.
	f.srv.streams.publish(engine.Event{Kind: engine.EventState, Route: bob, Reason: "0"})
	var st *stream
	f.srv.streams.mu.Lock()
	for s := range f.srv.streams.subs {
		st = s
	}
	f.srv.streams.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for len(st.events) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the handler never took event 0")
		}
		time.Sleep(time.Millisecond)
	}
	const published = 3 * streamBuffer
	for i := 1; i <= published; i++ {
		f.srv.streams.publish(engine.Event{Kind: engine.EventState, Route: bob, Reason: strconv.Itoa(i)})
	}
	w.gate <- struct{}{}
	first := <-w.wrote
	w.gate <- struct{}{}
	second := <-w.wrote
	cancel()
	close(w.gate) // later writes pass, and are read until the handler returns
	for ended := false; !ended; {
		select {
		case <-w.wrote:
		case <-done:
			ended = true
		}
	}
	// The buffer kept the newest streamBuffer of the flood. The notices of
	// the rest (one or two: the handler may count mid-flood) come before
	// the oldest kept and add up to what was lost.
	text := first + second
	oldestKept := strings.Index(text, `"reason":"`+strconv.Itoa(published-streamBuffer+1)+`"`)
	var lost int
	for _, m := range regexp.MustCompile(`event: dropped\ndata: (\d+)\n\n`).FindAllStringSubmatchIndex(text, -1) {
		n, _ := strconv.Atoi(text[m[2]:m[3]])
		lost += n
		if m[0] > oldestKept {
			t.Errorf("a notice after the oldest event kept: %q", text)
		}
	}
	if !strings.Contains(first, `"reason":"0"`) || oldestKept < len(first) || lost != published-streamBuffer {
		t.Errorf("writes %q then %q: want event 0, then the oldest kept, told of %d lost (told %d)", first, second, published-streamBuffer, lost)
	}
}

package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/switchyard/switchyard/engine"
)

// Bounds of /api/events/stream: each client has its own buffer, and a
// client that reads slower than events come loses the oldest unsent ones
// (told as a "dropped" event), never the collector's pace or memory.
const (
	streamBuffer = 256
	maxStreams   = 64
)

// eventFilter keeps the events a client asked for; empty fields match
// everything.
type eventFilter struct {
	route, target string
	kind          engine.EventKind // 0: every kind
}

// parseEventFilter reads route, target and kind from the query; kind must
// be state, incident or tier, the kinds the admin keeps.
func parseEventFilter(r *http.Request) (eventFilter, bool) {
	q := r.URL.Query()
	f := eventFilter{route: q.Get("route"), target: q.Get("target")}
	switch q.Get("kind") {
	case "":
	case "state":
		f.kind = engine.EventState
	case "incident":
		f.kind = engine.EventIncident
	case "tier":
		f.kind = engine.EventTier
	default:
		return f, false
	}
	return f, true
}

func (f eventFilter) match(e *engine.Event) bool {
	return (f.route == "" || e.Route == f.route) && (f.target == "" || e.Target == f.target) &&
		(f.kind == 0 || e.Kind == f.kind)
}

// stream is one client of /api/events/stream.
type stream struct {
	filter eventFilter // immutable
	// events is filled by publish and drained by the client's handler;
	// when full, publish drops the oldest event and counts it in dropped.
	events  chan engine.Event
	mu      sync.Mutex
	dropped uint64 // guarded by mu
}

// streams fans the collected events out to the connected clients.
type streams struct {
	mu     sync.Mutex
	subs   map[*stream]struct{} // guarded by mu
	closed bool                 // guarded by mu
	done   chan struct{}        // closed by end: every handler returns
}

func newStreams() *streams {
	return &streams{subs: make(map[*stream]struct{}), done: make(chan struct{})}
}

// join adds a client, or reports false when there are maxStreams already
// or the streams have ended.
func (ss *streams) join(f eventFilter) (*stream, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed || len(ss.subs) >= maxStreams {
		return nil, false
	}
	st := &stream{filter: f, events: make(chan engine.Event, streamBuffer)}
	ss.subs[st] = struct{}{}
	return st, true
}

func (ss *streams) leave(st *stream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.subs, st)
}

// count is how many clients are connected.
func (ss *streams) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.subs)
}

// publish hands e to every client that wants it without ever waiting: a
// full buffer loses its oldest event instead.
func (ss *streams) publish(e engine.Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		if !st.filter.match(&e) {
			continue
		}
		select {
		case st.events <- e:
		default:
			select {
			case <-st.events:
				st.mu.Lock()
				st.dropped++
				st.mu.Unlock()
			default: // the reader took one meanwhile
			}
			// Only publish sends, under ss.mu: there is room now.
			st.events <- e
		}
	}
}

// end makes every stream's handler return, so that the admin listener's
// graceful shutdown need not wait for clients that never hang up; later
// joins are refused. It is idempotent.
func (ss *streams) end() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.closed {
		ss.closed = true
		close(ss.done)
	}
}

// takeDropped returns the events st lost since the last call.
func (st *stream) takeDropped() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.dropped
	st.dropped = 0
	return n
}

// eventStream is GET /api/events/stream: the state and incident events as
// server-sent events (event: state, incident or tier, data: the /api/events
// JSON of one event), filtered by route, target and kind as /api/events
// is. A client too slow for the events gets an event "dropped" whose data
// is how many it missed.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) {
	f, ok := parseEventFilter(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "kind must be state, incident or tier")
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "this connection cannot stream")
		return
	}
	st, ok := s.streams.join(f)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "too many event streams open; try again later")
		return
	}
	defer s.streams.leave(st)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The retry hint makes browsers reconnect after 2 s when the gateway
	// restarts; the comment gets the headers out at once.
	if _, err := w.Write([]byte("retry: 2000\n: connected\n\n")); err != nil {
		return
	}
	flusher.Flush()
	var buf []byte
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.streams.done:
			return
		case e := <-st.events:
			buf = buf[:0]
			if n := st.takeDropped(); n > 0 {
				buf = append(buf, "event: dropped\ndata: "...)
				buf = strconv.AppendUint(buf, n, 10)
				buf = append(buf, "\n\n"...)
			}
			b, err := json.Marshal(apiEvent(e))
			if err != nil {
				continue
			}
			buf = append(buf, "event: "...)
			buf = append(buf, e.Kind.String()...)
			buf = append(buf, "\ndata: "...)
			buf = append(append(buf, b...), "\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

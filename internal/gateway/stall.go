package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
)

// The stall watch. A kept-alive tunnel carries many exchanges, but the
// attempt loop chose its exit once and splice judges only its first. An
// exit that dies under its tunnels (a residential peer gone, a proxy hung)
// stalls every one of them, and each client waits out its own timeout,
// seconds to minutes, where another exit would have answered at once.
//
// A watched tunnel's client side is copied by hand (relayWatched), so each
// burst of the client's is seen, with what the exit's connection had
// received by then (the kernel's count, route.Received: the server's side
// stays spliced in the kernel, where a crawl's bulk flows). The client
// waits from the burst that brings what it sent since the server last
// spoke to stallMinBytes: smaller ones are what a client sends expecting
// no answer (a TLS alert, HTTP/2's acknowledgements and window updates).
//
// Every stallTick the watch looks at the tunnels: one whose client has
// waited longer than the tunnel's deadline (the engine's, as every
// attempt's: docs/design/005-cost.md) for a server silent since, while no
// tunnel through the same exit has heard from its server since either,
// has its exit checked: a new connect through it to the same address,
// with the same deadline. A check that fails is evidence, reported as a
// connect that failed so; when its class is the exit's own (route scope:
// a proxy silent or refusing), each tunnel through the exit that has
// heard nothing from its server since the check began is cut, so that
// its client retries at once, through another exit. An exit that passes
// keeps its tunnels, and the wait is no evidence: the site is slow, or
// the exchange is a long poll's or a websocket's, which cutting, or
// counting against the pair, would break; only a wait that began after
// the check has the exit checked again.
//
// A tunnel through a route that has been drained since it was built (by
// an operator, or by a reload that removed the route) is closed once it
// idles between two exchanges, neither side having spoken for stallIdle:
// a drained route takes no new work, and the client's next request, on a
// new connection, goes through another. The watch runs on the real clock,
// as the kernel's counts do.
type stallWatch struct {
	mu    sync.Mutex
	exits map[*route.Exit]*watchedExit // guarded by mu
	// running is whether the watch's goroutine runs: from the first
	// tunnel watched to the first tick that finds none.
	running bool // guarded by mu
}

// stallTick is how often the watch looks at the tunnels: a syscall a
// tunnel a tick.
const stallTick = 100 * time.Millisecond

// stallCheckEvery spaces the checks of one exit, so that a site slow
// through it does not have it dialled at every tick.
const stallCheckEvery = time.Second

// stallIdle is how long both sides of a tunnel through a drained route
// must have been quiet for it to be closed between two exchanges.
const stallIdle = time.Second

// stallMinBytes is how much a client must have sent since its server last
// spoke to be waiting for an answer: more than a TLS record of HTTP/2
// control frames (acknowledgements, window updates, pings) or an alert.
const stallMinBytes = 64

// watchedExit is an exit's watched tunnels and the state of its check.
type watchedExit struct {
	tunnels  map[*watchedTunnel]struct{}
	checking bool
	checked  time.Time // when its last check began
	passed   time.Time // when its last check that passed began
}

// watchedTunnel is a tunnel the watch looks at.
type watchedTunnel struct {
	upstream net.Conn
	lease    engine.Lease
	exit     *route.Exit
	addr     string // the CONNECT's authority
	cut      func()

	mu sync.Mutex
	// heard is what upstream had received at the client's first burst
	// since the server last spoke, sent what the client has sent since,
	// and spoke when that reached stallMinBytes (zero: not yet).
	heard uint64    // guarded by mu
	sent  int       // guarded by mu
	spoke time.Time // guarded by mu
	last  time.Time // guarded by mu: the client's last burst
}

// watchTunnel returns win's tunnel to addr, which cut ends, added to the
// watch (started if it was idle); nil when the kernel cannot say what its
// connection to the exit receives.
func (g *Gateway) watchTunnel(win *outcome, addr string, cut func()) *watchedTunnel {
	if win.exit == nil || !route.Counted(win.conn) {
		return nil
	}
	t := &watchedTunnel{upstream: win.conn, lease: win.lease, exit: win.exit, addr: addr, cut: cut}
	w := &g.stalls
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.exits == nil {
		w.exits = make(map[*route.Exit]*watchedExit)
	}
	x := w.exits[t.exit]
	if x == nil {
		x = &watchedExit{tunnels: make(map[*watchedTunnel]struct{})}
		w.exits[t.exit] = x
	}
	x.tunnels[t] = struct{}{}
	if !w.running {
		w.running = true
		go g.watchStalls()
	}
	return t
}

// clientSpoke notes a burst of n bytes of t's client's, about to go out.
func (t *watchedTunnel) clientSpoke(n int) {
	heard, _, _ := route.Received(t.upstream)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if heard != t.heard {
		t.heard, t.sent, t.spoke = heard, 0, time.Time{}
	}
	if t.sent += n; t.sent >= stallMinBytes && t.spoke.IsZero() {
		t.spoke = now
	}
	t.last = now
}

// waiting is since when t's client has waited for a server silent since
// (zero: it is not waiting), and how long ago the server last spoke.
func (t *watchedTunnel) waiting() (since time.Time, quiet time.Duration) {
	heard, ago, ok := route.Received(t.upstream)
	if !ok {
		return time.Time{}, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if heard != t.heard {
		return time.Time{}, ago
	}
	return t.spoke, ago
}

// idle reports whether t is between two exchanges: neither side has
// spoken for stallIdle, and the client is not waiting for an answer.
func (t *watchedTunnel) idle(now time.Time) bool {
	heard, ago, ok := route.Received(t.upstream)
	if !ok || ago < stallIdle {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	waiting := heard == t.heard && !t.spoke.IsZero()
	return !waiting && now.Sub(t.last) >= stallIdle
}

// forgetTunnel takes t out of the watch.
func (g *Gateway) forgetTunnel(t *watchedTunnel) {
	w := &g.stalls
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.exits[t.exit]; x != nil {
		delete(x.tunnels, t)
		if len(x.tunnels) == 0 && !x.checking {
			delete(w.exits, t.exit)
		}
	}
}

// watchStalls looks at the watched tunnels every stallTick until none is
// left.
func (g *Gateway) watchStalls() {
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	var due []dueExit
	for range tick.C {
		var ok bool
		if due, ok = g.stalls.due(due[:0], time.Now()); !ok {
			return
		}
		for _, x := range due {
			now := time.Now()
			if g.drained(x.tunnels[0].lease.Route) {
				g.closeIdle(x.tunnels, now)
			}
			if !x.checkable {
				continue
			}
			if t, deadline := g.stalled(x, now); t != nil {
				g.startCheck(t, deadline)
			}
		}
	}
}

// dueExit is an exit the watch looks at: its tunnels, whether it may be
// checked now, and when its last check that passed began.
type dueExit struct {
	tunnels   []*watchedTunnel
	checkable bool
	passed    time.Time
}

// due appends each exit with tunnels to into, and reports false, stopping
// the watch, when no tunnel is watched.
func (w *stallWatch) due(into []dueExit, now time.Time) ([]dueExit, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.exits) == 0 {
		w.running = false
		return into, false
	}
	for _, x := range w.exits {
		if len(x.tunnels) == 0 {
			continue
		}
		tunnels := make([]*watchedTunnel, 0, len(x.tunnels))
		for t := range x.tunnels {
			tunnels = append(tunnels, t)
		}
		checkable := !x.checking && now.Sub(x.checked) >= stallCheckEvery
		into = append(into, dueExit{tunnels, checkable, x.passed})
	}
	return into, true
}

// drained reports whether route id takes no new work: drained, or gone.
func (g *Gateway) drained(id string) bool {
	st, ok := g.engine.RouteGlobal(id)
	return !ok || st.Health.State == engine.Draining
}

// closeIdle closes the tunnels, all through one drained route, that are
// between two exchanges.
func (g *Gateway) closeIdle(tunnels []*watchedTunnel, now time.Time) {
	closed := 0
	for _, t := range tunnels {
		if t.idle(now) {
			t.cut()
			closed++
		}
	}
	if closed == 0 {
		return
	}
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveTunnelsCut(TunnelCutDrained, closed)
	}
	if log := g.cfg.Log; log != nil {
		log.LogAttrs(context.Background(), slog.LevelInfo, "idle tunnels closed: route drained",
			slog.String("route", tunnels[0].lease.Route), slog.Int("tunnels", closed))
	}
}

// Why the watch cut tunnels: the reasons of Observer.ObserveTunnelsCut.
const (
	TunnelCutExitFailed = "exit_failed" // their exit failed a check after a stall
	TunnelCutDrained    = "drained"     // idle, through a route drained since
)

// stalled returns a tunnel of exit x whose client has waited past its
// deadline, since x's last check passed, for a server silent since, when
// no tunnel through x has heard from its server since either; and that
// deadline. Else nil. The deadline is the engine's for the tunnel's lease
// as it knows the route and the site now (the pool had often answered
// nothing when the tunnel was built).
func (g *Gateway) stalled(x dueExit, now time.Time) (*watchedTunnel, time.Duration) {
	waits := make([]time.Duration, len(x.tunnels))
	quiet := time.Duration(1<<63 - 1) // since x last carried a server's byte
	for i, t := range x.tunnels {
		since, q := t.waiting()
		quiet = min(quiet, q)
		if !since.IsZero() && since.After(x.passed) {
			waits[i] = now.Sub(since)
		}
	}
	var longest *watchedTunnel
	var waited time.Duration
	for i, t := range x.tunnels {
		if w := waits[i]; w > waited && w <= quiet {
			longest, waited = t, w
		}
	}
	if longest == nil {
		return nil, 0
	}
	deadline, _ := g.engine.Timing(g.cfg.Now(), longest.lease, g.cfg.AttemptTimeout)
	if deadline <= 0 {
		deadline = g.cfg.AttemptTimeout
	}
	if waited < deadline {
		return nil, 0
	}
	return longest, deadline
}

// startCheck checks t's exit with deadline, unless a check of it began
// meanwhile.
func (g *Gateway) startCheck(t *watchedTunnel, deadline time.Duration) {
	w := &g.stalls
	w.mu.Lock()
	x := w.exits[t.exit]
	if x == nil || x.checking {
		w.mu.Unlock()
		return
	}
	x.checking, x.checked = true, time.Now()
	began := x.checked
	w.mu.Unlock()
	go g.checkExit(t, deadline, began)
}

// checkExit connects through t's exit to t's address, reports a failure
// as evidence, and cuts the exit's silent tunnels when the failure is the
// exit's own.
func (g *Gateway) checkExit(t *watchedTunnel, deadline time.Duration, began time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	o := g.dialTunnel(ctx, t.lease, t.exit, t.addr)
	cancel()
	if o.conn != nil {
		o.conn.Close()
	}
	cut := 0
	if o.class != engine.OK && o.class != engine.Canceled {
		now := g.cfg.Now()
		ev := o.evidence()
		if t.exit.Route().Gateway != nil && retires(ev.Class) {
			ev, _ = g.settle(now, t.lease.Route, t.lease.Target, t.exit, false, ev)
		}
		g.engine.Feedback(now, t.lease.Route, t.lease.Target, ev)
		if g.engine.Config().Rules.Rule(o.class).Scope&engine.ScopeRoute != 0 {
			cut = g.cutSilent(t.exit, time.Since(began))
		}
	}
	w := &g.stalls
	w.mu.Lock()
	if x := w.exits[t.exit]; x != nil {
		x.checking = false
		if o.class == engine.OK {
			x.passed = began
		}
		if len(x.tunnels) == 0 {
			delete(w.exits, t.exit)
		}
	}
	w.mu.Unlock()
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveStallCheck(o.class)
		if cut > 0 {
			g.cfg.Observer.ObserveTunnelsCut(TunnelCutExitFailed, cut)
		}
	}
	if log := g.cfg.Log; log != nil && o.class != engine.OK {
		log.LogAttrs(context.Background(), slog.LevelWarn, "tunnel stalled: exit checked",
			slog.String("route", t.lease.Route), slog.String("target", clip(t.lease.Target, maxLogField)),
			slog.String("class", o.class.String()), slog.Int("tunnels_cut", cut))
	}
}

// cutSilent cuts exit's tunnels that have heard nothing from their server
// for at least since, and returns how many.
func (g *Gateway) cutSilent(exit *route.Exit, since time.Duration) int {
	w := &g.stalls
	w.mu.Lock()
	var tunnels []*watchedTunnel
	if x := w.exits[exit]; x != nil {
		for t := range x.tunnels {
			tunnels = append(tunnels, t)
		}
	}
	w.mu.Unlock()
	cut := 0
	for _, t := range tunnels {
		if _, ago, ok := route.Received(t.upstream); ok && ago >= since {
			t.cut()
			cut++
		}
	}
	return cut
}

// relayWatched copies src to dst by hand, calling spoke with the size of
// each burst before it goes out, until src ends: the client's side of a
// watched tunnel. It reports the bytes copied and the error that ended
// the copy, nil at src's end. Requests are small; what a crawl fetches
// comes back the other way, spliced.
func relayWatched(dst io.Writer, src io.Reader, spoke func(int)) (copied int64, err error) {
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			spoke(n)
			w, werr := dst.Write(buf[:n])
			copied += int64(w)
			if werr != nil {
				return copied, werr
			}
		}
		switch {
		case rerr == io.EOF:
			return copied, nil
		case rerr != nil:
			return copied, rerr
		}
	}
}

package route

import (
	"bufio"
	"container/list"
	"net"
	"slices"
	"sync"
	"time"
)

// TargetConns keeps the idle connections to targets that the gateway opened
// through exits itself (Exit.DialTarget, with TLS on top for https://): the
// requests inside an intercepted TLS connection and the fetch API's
// https:// fetches. A browser keeps its connection to a site for the next
// request; through an exit that costs a tunnel and a TLS handshake, the
// proxy's and the site's round trips, so a crawler's keep-alive must not
// be undone by the gateway in the middle. Connections are kept per route
// and target authority, never shared between routes (a tunnel is its
// exit's), at most max in all however many of them one key holds (32
// workers on one site through one exit keep 32), the least recently used
// closed first, and none idle past idleTimeout. Safe for concurrent use.
type TargetConns struct {
	// Immutable after NewTargetConns.
	max         int
	idleTimeout time.Duration

	mu    sync.Mutex
	byKey map[targetKey][]*TargetConn // guarded by mu: idle ones, most recent last
	lru   *list.List                  // guarded by mu: every idle one, most recent first
}

type targetKey struct{ route, addr string }

// TargetConn is a connection to a target through an exit, read through R,
// which may hold bytes read ahead.
type TargetConn struct {
	net.Conn
	R *bufio.Reader

	key   targetKey
	elem  *list.Element // in lru while idle
	timer *time.Timer   // closes it when idle too long
	puts  uint64        // times put idle: a timer of an earlier idle spell must not close it
}

// targetIdleTimeout is the shared transport's, so that a crawler's
// connection to a site through an exit lasts as one to a proxy would.
const targetIdleTimeout = upstreamIdleTimeout

// NewTargetConns keeps at most max idle connections in all; max ≤ 0 means
// DefaultMaxIdle.
func NewTargetConns(max int) *TargetConns {
	if max <= 0 {
		max = DefaultMaxIdle
	}
	return &TargetConns{max: max, idleTimeout: targetIdleTimeout, byKey: make(map[targetKey][]*TargetConn), lru: list.New()}
}

// NewTargetConn wraps c, just opened through route to addr, for Put.
func NewTargetConn(c net.Conn, route, addr string) *TargetConn {
	return &TargetConn{Conn: c, R: bufio.NewReader(c), key: targetKey{route, addr}}
}

// Get takes an idle connection through route to addr, the most recently
// used, or returns nil.
func (t *TargetConns) Get(route, addr string) *TargetConn {
	k := targetKey{route, addr}
	t.mu.Lock()
	defer t.mu.Unlock()
	idle := t.byKey[k]
	if len(idle) == 0 {
		return nil
	}
	c := idle[len(idle)-1]
	t.forget(c)
	return c
}

// Put keeps c idle for a later Get, closing the least recently used when
// the whole is at its bound, or closes c when it holds bytes no request
// asked for.
func (t *TargetConns) Put(c *TargetConn) {
	if c.R.Buffered() > 0 {
		c.Conn.Close()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.lru.Len() >= t.max {
		old := t.lru.Back().Value.(*TargetConn)
		t.forget(old)
		old.Conn.Close()
	}
	t.byKey[c.key] = append(t.byKey[c.key], c)
	c.elem = t.lru.PushFront(c)
	c.puts++
	spell := c.puts
	c.timer = time.AfterFunc(t.idleTimeout, func() { t.expire(c, spell) })
}

// expire closes c if it is still idle since its put number spell.
func (t *TargetConns) expire(c *TargetConn, spell uint64) {
	t.mu.Lock()
	idle := c.elem != nil && c.puts == spell
	if idle {
		t.forget(c)
	}
	t.mu.Unlock()
	if idle {
		c.Conn.Close()
	}
}

// forget takes idle c out of the pool. The caller holds mu. Get takes a
// key's most recent, the bound and the timeout its oldest: either end of
// the list, which may be long.
func (t *TargetConns) forget(c *TargetConn) {
	idle := t.byKey[c.key]
	i := len(idle) - 1
	if idle[i] != c {
		i = slices.Index(idle, c)
	}
	idle = slices.Delete(idle, i, i+1)
	if len(idle) == 0 {
		delete(t.byKey, c.key)
	} else {
		t.byKey[c.key] = idle
	}
	t.lru.Remove(c.elem)
	c.elem = nil
	c.timer.Stop()
}

// Idle is how many connections are kept idle now.
func (t *TargetConns) Idle() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// CloseIdle closes every idle connection.
func (t *TargetConns) CloseIdle() {
	t.mu.Lock()
	var all []*TargetConn
	for e := t.lru.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*TargetConn))
	}
	for _, c := range all {
		t.forget(c)
	}
	t.mu.Unlock()
	for _, c := range all {
		c.Conn.Close()
	}
}

// Reused records, for an attempt that takes an idle connection, that the
// tunnel was built and the target has spoken on it before: what goes wrong
// from here is the target's.
func (p *Progress) Reused() {
	p.connected.Store(true)
	p.answered.Store(true)
}

// Fresh undoes Reused, for an attempt whose kept connection turned out
// closed and that opens a new one.
func (p *Progress) Fresh() {
	p.connected.Store(false)
	p.answered.Store(false)
}

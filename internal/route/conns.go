package route

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"time"
)

// conn is a connection an Exit made for requests (RoundTrip): to an HTTP
// proxy, which takes absolute-form requests for any target, or a stream
// to one target (Direct, SOCKS5, a tunnel; TLS with the target on top for
// https://). It is read through br, which reads through head, and written
// through bw, and is one request's at a time; between requests it is
// kept idle in a connPool.
type conn struct {
	net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	head headLimit
	key  connKey

	// Guarded by the pool's mu while idle.
	idleSince    time.Time
	newer, older *conn // in the pool's list of every idle connection, most recent first
	above        *conn // in its key's stack, the one put after it
	below        *conn // in its key's stack, the one put before it
}

// Buffer sizes of a conn: a request's head, an answer's head and the
// start of its body fit in one read and one write.
const connBuffer = 4 << 10

// newConn wraps c, just made for key.
func newConn(c net.Conn, key connKey) *conn {
	k := &conn{Conn: c, bw: bufio.NewWriterSize(c, connBuffer), key: key}
	k.head = headLimit{r: c, remain: noHeadLimit}
	k.br = bufio.NewReaderSize(&k.head, connBuffer)
	return k
}

// maxAnswerHead bounds what is read of an answer's head (status line and
// headers, interim answers included): an upstream that never ends its
// headers must not take the gateway's memory. net/http's Transport
// bounds them too (MaxResponseHeaderBytes); this is its server side's
// bound on a request's head.
const maxAnswerHead = 1 << 20

// noHeadLimit is headLimit.remain while a body is read.
const noHeadLimit = math.MaxInt64

// headLimit reads its connection, refusing to read more than remain
// bytes: set to maxAnswerHead while an answer's head is read, to
// noHeadLimit once it is.
type headLimit struct {
	r      io.Reader
	remain int64 // owner: the request the conn carries
}

// errHeadTooLarge is an answer whose head outgrew maxAnswerHead.
var errHeadTooLarge = errors.New("route: an answer's headers are larger than 1 MiB")

func (h *headLimit) Read(p []byte) (int, error) {
	if h.remain <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > h.remain {
		p = p[:h.remain]
	}
	n, err := h.r.Read(p)
	h.remain -= int64(n)
	return n, err
}

// connKey says which requests a connection may carry: those going out
// the same way (the same proxy with the same credentials, or the
// gateway's own connection) to the same place (any target through an
// HTTP proxy; one target and its TLS for a stream to it).
type connKey struct {
	endpoint string // Exit.endpoint: the proxy's URL, credentials included, or "direct"
	addr     string // the target's host:port for a stream to it; "" for an HTTP proxy's connection
	tls      bool   // TLS with the target on top of the stream (https://)
}

// connPool keeps idle connections for the next request of their key: a
// crawler's keep-alive must not be undone by the gateway in the middle,
// and a dial through an exit costs the proxy's round trips, a tunnel's
// and a TLS handshake's. It keeps as many per key as were put back (a
// provider gateway carrying 200 requests at once keeps 200), at most max
// in all, the least recently used closed first whatever its key, and none
// idle past idleTimeout. Safe for concurrent use.
type connPool struct {
	// Immutable after newConnPool.
	max         int
	idleTimeout time.Duration

	mu     sync.Mutex
	top    map[connKey]*conn // guarded by mu: each key's most recent idle connection
	newest *conn             // guarded by mu: the most recently put
	oldest *conn             // guarded by mu: the least recently put
	idle   int               // guarded by mu
	// sweep closes the connections idle past idleTimeout: one timer for
	// the whole pool, not one per connection put back, set while a
	// connection is idle and left to run out when the last is taken (a
	// pool that empties and fills with every request, one client's, makes
	// no timer each time). Guarded by mu; nil when not set.
	sweep *time.Timer
}

func newConnPool(max int, idleTimeout time.Duration) *connPool {
	return &connPool{max: max, idleTimeout: idleTimeout, top: make(map[connKey]*conn)}
}

// get takes key's most recently put idle connection, or returns nil (a
// nil pool keeps none).
func (p *connPool) get(key connKey) *conn {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.top[key]
	if c != nil {
		p.remove(c)
	}
	return c
}

// put keeps c idle, closing the least recently put connection when the
// pool is full, or closes c when it holds bytes no request asked for.
func (p *connPool) put(c *conn) {
	if c.br.Buffered() > 0 {
		c.Close()
		return
	}
	c.idleSince = time.Now()
	p.mu.Lock()
	var out *conn
	if p.idle >= p.max {
		out = p.oldest
		p.remove(out)
	}
	c.below = p.top[c.key]
	if c.below != nil {
		c.below.above = c
	}
	p.top[c.key] = c
	c.older = p.newest
	if p.newest != nil {
		p.newest.newer = c
	} else {
		p.oldest = c
	}
	p.newest = c
	p.idle++
	if p.sweep == nil {
		p.sweep = time.AfterFunc(p.idleTimeout, p.expire)
	}
	p.mu.Unlock()
	if out != nil {
		out.Close()
	}
}

// remove takes idle c out of the pool. The caller holds mu.
func (p *connPool) remove(c *conn) {
	if c.above != nil {
		c.above.below = c.below
	} else if c.below != nil {
		p.top[c.key] = c.below
	} else {
		delete(p.top, c.key)
	}
	if c.below != nil {
		c.below.above = c.above
	}
	if c.newer != nil {
		c.newer.older = c.older
	} else {
		p.newest = c.older
	}
	if c.older != nil {
		c.older.newer = c.newer
	} else {
		p.oldest = c.newer
	}
	c.newer, c.older, c.above, c.below = nil, nil, nil, nil
	p.idle--
}

// expire is the sweep: it closes the connections idle past idleTimeout,
// oldest first, and sets itself for when the oldest left will be, or
// ends when none is left.
func (p *connPool) expire() {
	var out []*conn
	p.mu.Lock()
	now := time.Now()
	for p.oldest != nil && now.Sub(p.oldest.idleSince) >= p.idleTimeout {
		c := p.oldest
		p.remove(c)
		out = append(out, c)
	}
	if p.oldest != nil {
		p.sweep.Reset(p.idleTimeout - now.Sub(p.oldest.idleSince))
	} else {
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, c := range out {
		c.Close()
	}
}

// closeIdle closes the idle connections whose key match says, every one
// when match is nil.
func (p *connPool) closeIdle(match func(connKey) bool) {
	var out []*conn
	p.mu.Lock()
	for c := p.oldest; c != nil; {
		next := c.newer
		if match == nil || match(c.key) {
			p.remove(c)
			out = append(out, c)
		}
		c = next
	}
	p.mu.Unlock()
	for _, c := range out {
		c.Close()
	}
}

// beneath is the TCP connection under c, through the layers an Exit puts
// on it (the count, a tunnel's first bytes, TLS); nil when there is none
// (a test's pipe).
func beneath(c net.Conn) *net.TCPConn {
	for {
		switch in := c.(type) {
		case *net.TCPConn:
			return in
		case *tls.Conn:
			c = in.NetConn()
		case *countedConn:
			c = in.Conn
		case *prefixConn:
			c = in.Conn
		default:
			return nil
		}
	}
}

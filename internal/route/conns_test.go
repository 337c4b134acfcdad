package route

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// pipeConn is a fresh in-memory connection of key; the other end is
// closed with the test.
func pipeConn(t *testing.T, key connKey) *conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return newConn(a, key)
}

// idleCount is how many connections p keeps idle now.
func (p *connPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// closed reports whether c's connection is closed: a pipe refuses
// deadlines once either end is.
func closed(c *conn) bool {
	return c.SetDeadline(time.Time{}) != nil
}

// The pool keeps as many connections per key as were put back, within
// its total: workers on one site through one exit keep one each. At the
// total, the least recently put goes, whichever key it is; get hands out
// a key's most recent.
func TestPoolBoundsOnlyTheTotal(t *testing.T) {
	const capacity = 24
	pool := newConnPool(capacity, time.Minute)
	defer pool.closeIdle(nil)
	busyKey, otherKey := connKey{endpoint: "http://p1", addr: "site:443", tls: true}, connKey{endpoint: "http://p2"}
	other := pipeConn(t, otherKey)
	pool.put(other) // the least recently put from here on
	busy := make([]*conn, capacity-1)
	for i := range busy {
		busy[i] = pipeConn(t, busyKey)
		pool.put(busy[i])
	}
	if got := pool.idleCount(); got != capacity {
		t.Fatalf("%d idle after %d put back, want %d", got, capacity, capacity)
	}
	extra := pipeConn(t, busyKey)
	pool.put(extra)
	if got := pool.idleCount(); got != capacity {
		t.Errorf("%d idle past the total, want %d", got, capacity)
	}
	if !closed(other) {
		t.Error("the least recently put connection, another key's, was kept past the total")
	}
	if pool.get(otherKey) != nil {
		t.Error("the evicted connection's key handed one out")
	}
	want := []*conn{extra}
	for i := len(busy) - 1; i >= 0; i-- {
		want = append(want, busy[i])
	}
	for i, w := range want {
		if got := pool.get(busyKey); got != w {
			t.Fatalf("get %d: not the most recent idle connection", i)
		}
		if closed(w) {
			t.Fatalf("get %d: handed out a closed connection", i)
		}
	}
	if pool.get(busyKey) != nil || pool.idleCount() != 0 {
		t.Errorf("connections left after all were taken: %d idle", pool.idleCount())
	}
}

// Connections idle past the pool's timeout are closed by its one sweep,
// oldest first; those put back since are kept until their own time.
func TestPoolSweepsIdleConnections(t *testing.T) {
	const timeout = 50 * time.Millisecond
	pool := newConnPool(8, timeout)
	defer pool.closeIdle(nil)
	key := connKey{endpoint: "direct", addr: "site:80"}
	first := pipeConn(t, key)
	pool.put(first)
	waitFor(t, func() bool { return closed(first) }, "the first connection to be swept")
	if n := pool.idleCount(); n != 0 {
		t.Fatalf("%d idle once swept, want 0", n)
	}
	second := pipeConn(t, key)
	pool.put(second)
	kept := pool.get(key)
	if kept != second || closed(second) {
		t.Fatal("a connection put back within the timeout was not handed out")
	}
	pool.put(kept) // idle afresh: swept a timeout from now
	waitFor(t, func() bool { return closed(second) }, "the second connection to be swept")
}

// closeIdle closes the idle connections its match names, and no others.
func TestPoolClosesIdleByMatch(t *testing.T) {
	pool := newConnPool(8, time.Minute)
	defer pool.closeIdle(nil)
	mine, theirs := pipeConn(t, connKey{endpoint: "http://a"}), pipeConn(t, connKey{endpoint: "http://b", addr: "x:443"})
	pool.put(mine)
	pool.put(theirs)
	pool.closeIdle(func(k connKey) bool { return k.endpoint == "http://a" })
	if !closed(mine) || closed(theirs) || pool.idleCount() != 1 {
		t.Errorf("closed: mine %v, theirs %v, %d idle; want mine only, 1 idle", closed(mine), closed(theirs), pool.idleCount())
	}
}

// waitFor waits up to 5 s for cond.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// alive tells a kept connection the other end closed from one still open,
// without reading from it.
func TestAlive(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		hangup := make(chan struct{})
		addr := routetest.ServeTCP(t, func(c net.Conn) {
			<-hangup
			c.Close()
		})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		counted := &countedConn{Conn: c, open: new(atomic.Int64)}
		if !alive(counted) {
			t.Fatal("an open connection with nothing to read is taken for closed")
		}
		close(hangup)
		waitFor(t, func() bool { return !alive(counted) }, "the closed connection to be seen closed")
	})
}

// A request that may not be sent twice goes on a kept connection only
// once that shows no sign of having been closed: one the site closed
// while idle is passed over for a fresh one, and the POST is sent once.
func TestPostPassesOverAClosedKeptConnection(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		var posts, conns atomic.Int64
		addr := routetest.ServeTCP(t, func(c net.Conn) {
			conns.Add(1)
			defer c.Close()
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			if strings.HasPrefix(string(buf[:n]), "POST") {
				posts.Add(1)
			}
			// Answered, then closed as a server ends an idle keep-alive
			// connection.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		x, err := NewExit(&Route{ID: "direct", Scheme: Direct}, Dialer{})
		if err != nil {
			t.Fatal(err)
		}
		defer x.dialer.Upstream.CloseIdleConnections()
		send := func(method string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+"/", strings.NewReader("a=1"))
			req.GetBody = nil // a body that cannot be sent again
			resp, err := x.RoundTrip(req, new(Progress))
			if err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		send(http.MethodGet)
		kept := x.dialer.Upstream.pool.get(connKey{endpoint: "direct", addr: addr})
		if kept == nil {
			t.Fatal("the GET's connection was not kept")
		}
		waitFor(t, func() bool { return !alive(kept.Conn) }, "the site's close to arrive")
		x.dialer.Upstream.pool.put(kept)
		send(http.MethodPost)
		if posts.Load() != 1 || conns.Load() != 2 {
			t.Errorf("the site read %d POSTs on %d connections, want 1 on 2", posts.Load(), conns.Load())
		}
	})
}

// A kept connection that got bytes no request asked for is out of step:
// they would be read as the next request's answer, and an HTTP proxy's
// connection carries every site's requests. It is passed over for a fresh
// one, and the next request gets its own answer.
func TestOutOfStepConnectionIsPassedOver(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
		forge := make(chan struct{}) // closed once the first answer is read: the connection is idle
		addr := routetest.ServeTCP(t, func(c net.Conn) {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"+req.URL.Path[1:]) // "one", "two"
				if req.URL.Path == "/one" {
					<-forge
					io.WriteString(c, forged)
				}
			}
		})
		// The site plays an HTTP proxy: the answers come on the connection
		// that carries every site's requests.
		u := &url.URL{Scheme: "http", Host: addr}
		x, err := NewExit(&Route{ID: "proxy", Scheme: HTTP, URL: u}, Dialer{})
		if err != nil {
			t.Fatal(err)
		}
		defer x.dialer.Upstream.CloseIdleConnections()
		get := func(path string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://site.test"+path, nil)
			resp, err := x.RoundTrip(req, new(Progress))
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		if got := get("/one"); got != "one" {
			t.Fatalf("first answer %q", got)
		}
		close(forge)
		kept := x.dialer.Upstream.pool.get(connKey{endpoint: x.wired().endpoint})
		if kept == nil {
			t.Fatal("the first answer's connection was not kept")
		}
		waitFor(t, func() bool { return !alive(kept.Conn) }, "the forged bytes to arrive")
		x.dialer.Upstream.pool.put(kept)
		if got := get("/two"); got != "two" {
			t.Errorf("the next request was answered %q, want its own answer", got)
		}
	})
}

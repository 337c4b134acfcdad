package route_test

import (
	"net"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route"
)

// pipeConn is one end of a fresh in-memory connection, through route to
// addr; the other end is closed with the test.
func pipeConn(t *testing.T, id, addr string) *route.TargetConn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return route.NewTargetConn(a, id, addr)
}

// closed reports whether c's connection is closed: a pipe refuses
// deadlines once either end is.
func closed(c *route.TargetConn) bool {
	return c.SetDeadline(time.Time{}) != nil
}

// TargetConns keeps as many connections per route and site as were put
// back, within its total: workers on one site through one exit keep one
// each. At the total, the least recently used goes, whichever key it is;
// Get hands out a key's most recent.
func TestTargetConnsBoundOnlyTheTotal(t *testing.T) {
	const capacity = 24
	pool := route.NewTargetConns(capacity)
	defer pool.CloseIdle()
	other := pipeConn(t, "r2", "site:443")
	pool.Put(other) // the least recently used from here on
	busy := make([]*route.TargetConn, capacity-1)
	for i := range busy {
		busy[i] = pipeConn(t, "r1", "site:443")
		pool.Put(busy[i])
	}
	if got := pool.Idle(); got != capacity {
		t.Fatalf("%d idle after %d put back, want %d", got, capacity, capacity)
	}
	extra := pipeConn(t, "r1", "site:443")
	pool.Put(extra)
	if got := pool.Idle(); got != capacity {
		t.Errorf("%d idle past the total, want %d", got, capacity)
	}
	if !closed(other) {
		t.Error("the least recently used connection, another key's, was kept past the total")
	}
	if pool.Get("r2", "site:443") != nil {
		t.Error("r2's evicted connection handed out")
	}
	for i, want := range append([]*route.TargetConn{extra}, reversed(busy)...) {
		if got := pool.Get("r1", "site:443"); got != want {
			t.Fatalf("get %d: not the most recent idle connection", i)
		}
		if closed(want) {
			t.Fatalf("get %d: handed out a closed connection", i)
		}
	}
	if pool.Get("r1", "site:443") != nil || pool.Idle() != 0 {
		t.Errorf("connections left after all were taken: %d idle", pool.Idle())
	}
}

func reversed(cs []*route.TargetConn) []*route.TargetConn {
	out := make([]*route.TargetConn, len(cs))
	for i, c := range cs {
		out[len(cs)-1-i] = c
	}
	return out
}

package redistest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A port already taken is no readiness: the server that could not bind
// it is noticed at once, and its own output says why.
func TestTakenPortFailsWithTheServersOutput(t *testing.T) {
	t.Parallel()
	Start(t) // skips without redis-server
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	start := time.Now()
	n, err := startNode(t.TempDir(), []string{port})
	if err == nil {
		n.stop()
		t.Fatal("a redis-server started on a port this test holds")
	}
	if !strings.Contains(err.Error(), "exited") || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
		t.Errorf("error %q, want the server's exit and its output", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to notice the server had exited", d)
	}
}

// Another server answering on the port is not this one: readiness is this
// process answering.
func TestAnotherServersAnswerIsNotReadiness(t *testing.T) {
	t.Parallel()
	other := Start(t)
	_, port, _ := net.SplitHostPort(other.Addr)
	if n, err := startNode(t.TempDir(), []string{port}); err == nil {
		n.stop()
		t.Fatal("startNode took another server's answer for its own")
	}
}

// A server stopped and started again answers on the same address, empty.
func TestRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if err := ping(s.Addr, time.Second); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := ping(s.Addr, 100*time.Millisecond); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Restart()
	if err := ping(s.Addr, time.Second); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
}

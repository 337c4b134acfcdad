package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddr: the addresses are on 127.0.0.1, below the ephemeral range
// where the kernel says what it is, distinct, and free to listen on.
func TestAddr(t *testing.T) {
	start := ephemeralStart()
	seen := map[string]bool{}
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, p, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("Addr() = %q, %v: want 127.0.0.1:port", addr, err)
		}
		if seen[addr] {
			t.Fatalf("%s named twice", addr)
		}
		seen[addr] = true
		port, _ := strconv.Atoi(p)
		if _, _, ok := below(start); ok && port >= start {
			t.Errorf("port %d is in the ephemeral range from %d", port, start)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening on %s: %v", addr, err)
		}
		ln.Close()
	}
}

func TestBelow(t *testing.T) {
	for _, c := range []struct {
		start, lo, hi int
		ok            bool
	}{
		{32768, 32768 - span, 32768, true},
		{10000, 2000, 10000, true},
		{5000, 1024, 5000, false}, // too little room: the kernel's pick instead
		{0, 1024, 0, false},       // unknown
	} {
		lo, hi, ok := below(c.start)
		if ok != c.ok || ok && (lo != c.lo || hi != c.hi) {
			t.Errorf("below(%d) = %d, %d, %v; want %d, %d, %v", c.start, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

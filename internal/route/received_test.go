package route

import (
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// Received counts what a connection received, through the layers an Exit
// puts on it, and knows nothing of a connection with no TCP beneath.
func TestReceived(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, _, ok := Received(nil); ok || Counted(nil) {
			t.Fatal("Received answers off Linux")
		}
		t.Skip("TCP_INFO is Linux's")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if n, _, ok := Received(c); !ok || n != 0 {
		t.Fatalf("before a byte: %d, %v", n, ok)
	}
	io.WriteString(s, "hello")
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	wrapped := &prefixConn{Conn: &countedConn{Conn: c}}
	n, ago, ok := Received(wrapped)
	if !ok || n != 5 || ago > time.Second {
		t.Errorf("through the wrappers, after 5 bytes: %d bytes, last %v ago, %v", n, ago, ok)
	}
	if n, _, ok := Received(tls.Client(c, &tls.Config{})); !ok || n != 5 {
		t.Errorf("beneath TLS: %d, %v", n, ok)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, ok := Received(a); ok || Counted(a) {
		t.Error("a pipe has no TCP beneath, yet Received answers")
	}
	if !Counted(wrapped) {
		t.Error("Counted is false for a TCP connection beneath wrappers")
	}
}

//go:build unix

package route

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether kept connection c may carry the next request:
// nothing waits to be read on it. A closed one has its end of stream
// waiting, or first the TLS alert that says so (close_notify); one out of
// step has bytes no request asked for; an open idle one has nothing, its
// last answer read whole. It looks without reading, one syscall, before
// every reuse (Exit.RoundTrip).
func alive(c net.Conn) bool {
	tcp := beneath(c)
	if tcp == nil {
		return true
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return false
	}
	var peek error
	var b [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		_, _, peek = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // look once, never wait
	}); err != nil {
		return false
	}
	return errors.Is(peek, syscall.EAGAIN) || errors.Is(peek, syscall.EWOULDBLOCK)
}

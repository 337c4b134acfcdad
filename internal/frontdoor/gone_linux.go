package frontdoor

import (
	"errors"
	"os"
	"syscall"
)

// canWatch: a socket can be peeked at here.
const canWatch = true

// gone waits until the connection is readable and reports whether that is
// its end (or an error), not bytes: it peeks, reading nothing. A wait cut
// by a read deadline reports false.
func gone(raw syscall.RawConn) bool {
	var b [1]byte
	ended := false
	err := raw.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false // wait for readability
			case err != nil || n == 0:
				ended = true
			}
			return true
		}
	})
	if err != nil {
		return !errors.Is(err, os.ErrDeadlineExceeded)
	}
	return ended
}

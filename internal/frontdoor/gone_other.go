//go:build !linux

package frontdoor

import "syscall"

// canWatch: without a way here to peek at a socket, a client leaving is
// noticed when the answer to it fails.
const canWatch = false

func gone(syscall.RawConn) bool { return false }

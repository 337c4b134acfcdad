//go:build !linux

package route

import (
	"net"
	"time"
)

// Received cannot ask the kernel what a connection received here: tunnels
// go unwatched (the gateway's stall watch).
func Received(net.Conn) (bytes uint64, ago time.Duration, ok bool) { return 0, 0, false }

// Counted is false here: Received never answers.
func Counted(net.Conn) bool { return false }

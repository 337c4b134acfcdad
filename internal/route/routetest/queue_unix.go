//go:build unix

package routetest

import (
	"net"
	"syscall"
)

// shortenQueue makes ln's accept queue as short as the system allows
// (listen with a backlog of 0), so that a connection or two never
// accepted fill it.
func shortenQueue(ln *net.TCPListener) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), 0) }); err != nil {
		return err
	}
	return lerr
}

//go:build linux

package route

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Received is what c has received, as the kernel counts it (TCP_INFO):
// the bytes, and how long ago the last of them came (to the millisecond;
// since the connection was made when none has), and false when no TCP
// connection can be found beneath c or the kernel will not say. Bytes a
// tunnel splices in the kernel never pass through the gateway; this is
// how it sees whether the far side spoke.
func Received(c net.Conn) (bytes uint64, ago time.Duration, ok bool) {
	tcp := beneath(c)
	if tcp == nil {
		return 0, 0, false
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, 0, false
	}
	return info.Bytes_received, time.Duration(info.Last_data_recv) * time.Millisecond, true
}

// Counted reports whether Received can answer for c, without asking the
// kernel: whether a TCP connection lies beneath it.
func Counted(c net.Conn) bool { return beneath(c) != nil }

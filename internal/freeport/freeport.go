// Package freeport names a 127.0.0.1 address for a child process to listen
// on, chosen before the child starts: a cluster's peers, HAProxy's
// config, a Redis node's port must name it first. A port the kernel hands
// out for port 0 is in its ephemeral range, which every outgoing
// connection draws its local port from too: with tests beside it opening
// thousands of connections, one may take the port between the check and
// the child's bind, and the child fails to start. The ports named here
// are below that range, where the kernel never picks one by itself.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range are drawn from.
const span = 8000

var (
	mu    sync.Mutex
	given = map[int]bool{} // guarded by mu: ports this process named, never named twice
)

// Addr returns a 127.0.0.1 address nothing listened on a moment ago, with
// a port below the kernel's ephemeral range where it knows that range
// (Linux), else one the kernel picks.
func Addr() (string, error) {
	lo, hi, ok := below(ephemeralStart())
	if !ok {
		return kernelPick()
	}
	mu.Lock()
	defer mu.Unlock()
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if given[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // another test's, or another program's
		}
		ln.Close()
		given[port] = true
		return addr, nil
	}
	return "", errors.New("freeport: no free port on 127.0.0.1 below the ephemeral range")
}

// below is the range of ports [lo, hi) drawn from under an ephemeral range
// starting at start, clear of the privileged ports; ok is false when
// there is no room.
func below(start int) (lo, hi int, ok bool) {
	lo, hi = max(start-span, 1024), start
	return lo, hi, hi-lo >= span/2
}

// ephemeralStart is the first port of the kernel's ephemeral range, 0
// when unknown.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return start
}

// kernelPick is a port the kernel picks, free a moment ago.
func kernelPick() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

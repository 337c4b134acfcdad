//go:build unix

package gateway

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time the process has used so far, user and system,
// for benchmarks to report per operation.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

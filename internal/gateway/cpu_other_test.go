//go:build !unix

package gateway

import (
	"testing"
	"time"
)

// cpuTime is unknown here: benchmarks report 0 CPU per operation.
func cpuTime(*testing.B) time.Duration { return 0 }

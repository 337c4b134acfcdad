package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: every
// server, connection and loop a test starts must be stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package logbuf

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: a
// flush timer must not be left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

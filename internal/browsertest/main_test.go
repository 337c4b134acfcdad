package browsertest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: a gateway,
// a fake proxy or the browser's connection left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

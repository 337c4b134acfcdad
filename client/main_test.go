package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

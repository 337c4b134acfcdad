//go:build !unix

package routetest

import (
	"errors"
	"net"
)

// shortenQueue is not available here: StalledPort skips its test.
func shortenQueue(*net.TCPListener) error { return errors.ErrUnsupported }

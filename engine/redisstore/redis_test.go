package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/redistest"
)

// redisAddr is the shared test Redis (see redistest.Addr).
func redisAddr(t testing.TB) string { return redistest.Addr(t) }

// testPrefix is a key prefix of the test's own, cleaned up after it.
func testPrefix(t testing.TB, addr string) string { return redistest.Prefix(t, addr) }

// newStore is a store on the test Redis under prefix, running until the
// test ends.
func newStore(t testing.TB, addr, prefix string, opts Options) *Store {
	t.Helper()
	opts.Prefix = prefix
	if opts.Timeout == 0 {
		opts.Timeout = time.Second // -race on a loaded 2-core machine
	}
	s, err := Open("redis://"+addr+"/0", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	<-s.Ready()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return s
}

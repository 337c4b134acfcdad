package redisstore

import (
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/storetest"
)

// The store passes the conformance suite every engine.Store must.
func TestConformance(t *testing.T) {
	addr := redisAddr(t)
	storetest.Run(t, func(t *testing.T) engine.Store {
		return newStore(t, addr, testPrefix(t, addr), Options{})
	})
}

// The engine's state machine runs on this store as on the memory store.
func TestEngineParity(t *testing.T) {
	addr := redisAddr(t)
	storetest.RunEngine(t, func(t *testing.T) engine.Store {
		return newStore(t, addr, testPrefix(t, addr), Options{})
	})
}

func TestRecordKeys(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{Prefix: "p"})
	tests := []struct{ route, target, key string }{
		{"direct", "", "p:{direct}:g"},
		{"http://h:1~0bfe935e", "example.com", "p:{http://h:1~0bfe935e}:t:example.com"},
		{"id{with}braces%", "t", "p:{id%7Bwith%7Dbraces%25}:t:t"},
	}
	for _, tc := range tests {
		key := s.recordKey(tc.route, tc.target)
		if key != tc.key {
			t.Errorf("recordKey(%q, %q) = %q, want %q", tc.route, tc.target, key, tc.key)
		}
		route, target, ok := s.parseRecordKey(key)
		if !ok || route != tc.route || target != tc.target {
			t.Errorf("parseRecordKey(%q) = %q %q %v", key, route, target, ok)
		}
	}
	for _, key := range []string{"p:{x}:leases", "q:{x}:g", "p:s:abc", "p:{x}:t:"} {
		if _, _, ok := s.parseRecordKey(key); ok {
			t.Errorf("parseRecordKey(%q) accepted", key)
		}
	}
}

// The store shares learned pacing by the PaceSharer promises.
func TestPaceConformance(t *testing.T) {
	addr := redisAddr(t)
	storetest.RunPace(t, func(t *testing.T) func() engine.Store {
		prefix := testPrefix(t, addr)
		return func() engine.Store { return newStore(t, addr, prefix, Options{}) }
	})
}

package engine_test

import (
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) engine.Store { return engine.NewMemoryStore() })
}

func TestMemoryStoreEngine(t *testing.T) {
	storetest.RunEngine(t, func(*testing.T) engine.Store { return engine.NewMemoryStore() })
}

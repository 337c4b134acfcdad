package engine

import (
	"math/rand/v2"
	"sync"
)

// randSource supplies the engine's random numbers.
type randSource interface{ Uint64() uint64 }

// newRandSource returns the runtime's per-thread generator (no lock) or,
// for a nonzero seed, a reproducible one behind a mutex.
func newRandSource(seed uint64) randSource {
	if seed == 0 {
		return runtimeRand{}
	}
	return &seededRand{pcg: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
}

type runtimeRand struct{}

func (runtimeRand) Uint64() uint64 { return rand.Uint64() }

type seededRand struct {
	mu  sync.Mutex
	pcg *rand.PCG // guarded by mu
}

func (s *seededRand) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pcg.Uint64()
}

// unitFloat maps 64 random bits to [0, 1).
func unitFloat(u uint64) float64 { return float64(u>>11) / (1 << 53) }

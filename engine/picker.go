package engine

import "sync/atomic"

// Picker chooses one route among the candidates for a request. The engine
// has already applied hard constraints, exclusions and weights; a Picker
// only decides how to use them, so the simulator can compare policies on
// identical load.
type Picker interface {
	Pick(c *Candidates) (slot int32, ok bool)
}

var (
	_ Picker = WeightedRandom{}
	_ Picker = PowerOfTwo{}
	_ Picker = (*RoundRobin)(nil)
	_ Picker = Random{}
)

// WeightedRandom draws one route with probability proportional to its
// weight for the target: cost^-Sharpness with slow start, suspect and
// static terms (docs/design/005-cost.md).
type WeightedRandom struct{}

// Pick implements Picker.
func (WeightedRandom) Pick(c *Candidates) (int32, bool) {
	slot, _, ok := c.Draw()
	return slot, ok
}

// PowerOfTwo draws two routes by weight and keeps the cheaper, the one
// with the higher weight for the target: Mitzenmacher's power of two
// choices on the expected time to a valid answer, in-flight load included,
// as Finagle's and Envoy's peak-EWMA balancers, but with the two drawn by
// weight rather than uniformly, so a pool half of slow exits rarely offers
// two slow ones.
type PowerOfTwo struct{}

// Pick implements Picker.
func (PowerOfTwo) Pick(c *Candidates) (int32, bool) {
	a, wa, ok := c.Draw()
	if !ok {
		return 0, false
	}
	b, wb, ok := c.Draw()
	if ok && wb > wa {
		return b, true
	}
	return a, true
}

// RoundRobin is the blind baseline: every route matching the hard
// constraints in turn, whatever its health.
type RoundRobin struct {
	next atomic.Uint32
}

// Pick implements Picker.
func (p *RoundRobin) Pick(c *Candidates) (int32, bool) {
	for range maxDraws {
		slot, ok := c.Slot(int(p.next.Add(1) - 1))
		if ok && c.Allowed(slot) {
			return slot, true
		}
	}
	return 0, false
}

// Random is the blind baseline that picks uniformly among routes matching
// the hard constraints, whatever their health.
type Random struct{}

// Pick implements Picker.
func (Random) Pick(c *Candidates) (int32, bool) {
	for range maxDraws {
		slot, ok := c.Slot(int(c.e.rng.Uint64() >> 1))
		if ok && c.Allowed(slot) {
			return slot, true
		}
	}
	return 0, false
}

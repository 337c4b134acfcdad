package engine

import (
	"math"
	"sync"
	"sync/atomic"
)

// numShards is how many independently locked shards a weightIndex spreads
// its slots over: slot s lives in shard s%numShards at position s/numShards.
const numShards = 16

// A tree is rebuilt from its exact weights, in O(size), after
// driftRebuildEvery updates or when its total falls below driftPeakRatio
// times the largest total it has held since the last rebuild. Each update
// rounds by at most about 1e-16 of the sums it touches, so the first bounds
// the drift at about 1e-11 of that peak total, and the second keeps that
// below about 1e-8 of the current total even when weights shrink by orders
// of magnitude (all the heavy routes banned, say).
const (
	driftRebuildEvery = 1 << 16
	driftPeakRatio    = 1.0 / 1024
)

// weightIndex draws route slots with probability proportional to weight.
// Weights change on every request, so both updates and draws must be cheap
// and must not serialize the engine: slots are split over numShards shards,
// each with its own lock, and each shard publishes its totals atomically.
// A draw picks a shard from those totals without any lock, then locks only
// that shard to descend its sum tree, so O(log n) work and no allocation
// (docs/design/003-selection.md).
//
// Every slot has two weights: its eligible weight, and its fallback weight
// used when the pool is in panic or fallback mode. Each has its own trees.
type weightIndex struct {
	eligible atomic.Int64           // slots with a positive eligible weight
	all      atomic.Int64           // slots with a positive fallback weight
	slots    atomic.Int64           // slots set and not removed since: the index's members
	marked   [numMarks]atomic.Int64 // members carrying each mark

	shards [numShards]indexShard
}

// indexShard holds the slots s with s%numShards equal to its index.
type indexShard struct {
	_ [64]byte // keeps neighbouring shards' hot fields off a shared cache line

	mu       sync.Mutex
	seen     []bool           // guarded by mu; member positions (set, not removed since), len(seen) == eligible.sums.size()
	marks    [numMarks][]bool // guarded by mu; positions carrying each mark, each as long as seen
	eligible shardTree        // guarded by mu, except its atomic total
	all      shardTree        // guarded by mu, except its atomic total
}

// shardTree is one sum tree with its drift bookkeeping. The tree's bottom
// level holds the exact weights, which are the source of truth: updates
// store them as given and add the change to the sums above, a draw that
// rounding led to a zero weight is detected, and the sums are periodically
// rebuilt from the weights so drift cannot accumulate.
type shardTree struct {
	sums    sumTree       // guarded by mu
	pos     int           // guarded by mu; positions with a positive weight
	updates int           // guarded by mu; updates since the last rebuild
	peak    float64       // guarded by mu; largest total since the last rebuild
	total   atomic.Uint64 // math.Float64bits of the tree's total, 0 when pos == 0; written under mu
}

func newWeightIndex() *weightIndex { return &weightIndex{} }

// update records slot's current weights and marks, under one lock: w is
// its weight among eligible routes, all its weight when the pool is in
// panic or fallback (every route not drained). Both must be >= 0 and
// finite; NaN, negative and infinite weights count as 0. The index grows
// as needed for new slots; slot must be >= 0.
func (x *weightIndex) update(slot int32, w, all float64, marks [numMarks]bool) {
	s := &x.shards[slot%numShards]
	i := int(slot / numShards)
	s.mu.Lock()
	if i >= len(s.seen) {
		s.eligible.grow(i + 1)
		s.all.grow(i + 1)
		s.seen = append(s.seen, make([]bool, s.eligible.sums.size()-len(s.seen))...)
		for m := range s.marks {
			s.marks[m] = append(s.marks[m], make([]bool, len(s.seen)-len(s.marks[m]))...)
		}
	}
	fresh := !s.seen[i]
	s.seen[i] = true
	de := s.eligible.set(i, sanitizeWeight(w))
	da := s.all.set(i, sanitizeWeight(all))
	var dm [numMarks]int64
	for m, on := range marks {
		if s.marks[m][i] != on {
			s.marks[m][i] = on
			dm[m] = 1
			if !on {
				dm[m] = -1
			}
		}
	}
	s.mu.Unlock()

	if fresh {
		x.slots.Add(1)
	}
	if de != 0 {
		x.eligible.Add(de)
	}
	if da != 0 {
		x.all.Add(da)
	}
	for m, d := range dm {
		if d != 0 {
			x.marked[m].Add(d)
		}
	}
}

// remove takes slot out of the index: both its weights become 0 and it no
// longer counts among the slots, so a label index whose last route lost
// the label reports no slots, as if the label had never been seen. A later
// set makes it a member again. Removing a slot that is not a member does
// nothing.
func (x *weightIndex) remove(slot int32) {
	s := &x.shards[slot%numShards]
	i := int(slot / numShards)
	s.mu.Lock()
	if i >= len(s.seen) || !s.seen[i] {
		s.mu.Unlock()
		return
	}
	s.seen[i] = false
	var was [numMarks]bool
	for m := range s.marks {
		was[m], s.marks[m][i] = s.marks[m][i], false
	}
	de := s.eligible.set(i, 0)
	da := s.all.set(i, 0)
	s.mu.Unlock()

	x.slots.Add(-1)
	for m, on := range was {
		if on {
			x.marked[m].Add(-1)
		}
	}
	if de != 0 {
		x.eligible.Add(de)
	}
	if da != 0 {
		x.all.Add(da)
	}
}

// A mark changes how a member counts for the panic threshold (candidates).
type mark uint8

const (
	// pending: a route not yet checked. It keeps the weights update gives it,
	// but counts neither way: a hundred new routes waiting for their first
	// probe are no sign that the pool is failing.
	pending mark = iota
	// withheld: a route that is judged, and bad, but that panic and the
	// least-bad fallback must not draw either (update gives it no
	// fallback weight): half-open, its recovery is the probe queue's to try, or
	// ejected, proven dead beyond the target. It still counts among the
	// judged routes, or a pool ejecting its routes would never panic.
	withheld
	numMarks
)

// sample draws a slot by weight from the eligible weights (all=false) or the
// fallback weights (all=true). r is a uniform random uint64 supplied by the
// caller (so tests are deterministic). It also returns the slot's two
// weights, read under the same lock. ok is false when the total weight is
// zero.
func (x *weightIndex) sample(r uint64, all bool) (slot int32, w, wAll float64, ok bool) {
	var totals [numShards]float64
	sum := 0.0
	for j := range x.shards {
		totals[j] = math.Float64frombits(x.shards[j].tree(all).total.Load())
		sum += totals[j]
	}
	if sum == 0 {
		return -1, 0, 0, false
	}
	// The top 53 bits give a point in [0, sum); the shard it falls in is the
	// shard drawn, and its offset there, as a fraction of that shard's total,
	// locates the slot inside the shard.
	j, frac := pickShard(&totals, float64(r>>11)*0x1p-53*sum)
	// Concurrent updates may have emptied the shard since its total was
	// read; then the next shard that still has weight is drawn instead.
	for range numShards {
		s := &x.shards[j]
		s.mu.Lock()
		i, found := s.tree(all).draw(frac)
		if found {
			w, wAll = s.eligible.sums.weight(i), s.all.sums.weight(i)
		}
		s.mu.Unlock()
		if found {
			return int32(i*numShards + j), w, wAll, true
		}
		j = (j + 1) % numShards
	}
	return -1, 0, 0, false
}

// total is the sum of the index's weights, eligible or, with all, the
// fallback ones.
func (x *weightIndex) total(all bool) float64 {
	sum := 0.0
	for j := range x.shards {
		sum += math.Float64frombits(x.shards[j].tree(all).total.Load())
	}
	return sum
}

// counts returns the number of slots with a positive eligible weight, with a
// positive fallback weight, and the total slots: members (set and not
// removed since), whatever their weights now. It takes no lock, so the
// three are not a consistent snapshot.
func (x *weightIndex) counts() (eligible, all, slots int) {
	return int(x.eligible.Load()), int(x.all.Load()), int(x.slots.Load())
}

// marks returns the members carrying mark m.
func (x *weightIndex) marks(m mark) int { return int(x.marked[m].Load()) }

// weight returns slot's current weights, (0, 0) for unknown slots.
func (x *weightIndex) weight(slot int32) (w, all float64) {
	if slot < 0 {
		return 0, 0
	}
	s := &x.shards[slot%numShards]
	i := int(slot / numShards)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.seen) {
		return 0, 0
	}
	return s.eligible.sums.weight(i), s.all.sums.weight(i)
}

// pickShard returns the shard whose span of [0, sum of totals) holds target,
// and target's offset into that span as a fraction of the shard's total.
func pickShard(totals *[numShards]float64, target float64) (shard int, frac float64) {
	last := 0
	for j, t := range totals {
		if t <= 0 {
			continue
		}
		if target < t {
			return j, target / t
		}
		target -= t
		last = j
	}
	// Rounding in the running subtraction carried target past the end.
	return last, 1
}

func sanitizeWeight(w float64) float64 {
	if !finitePositive(w) {
		return 0
	}
	return w
}

// finitePositive reports whether v is a positive finite number.
func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 1) }

func (s *indexShard) tree(all bool) *shardTree {
	if all {
		return &s.all
	}
	return &s.eligible
}

// grow makes room for at least n positions. Growing rebuilds the sums, so
// it starts a fresh drift period.
func (t *shardTree) grow(n int) {
	t.sums.grow(n)
	t.updates = 0
	t.peak = 0
	t.publish()
}

// set sets position i's weight to v and returns the change in the number of
// positive positions (-1, 0 or 1).
func (t *shardTree) set(i int, v float64) (dpos int64) {
	old := t.sums.weight(i)
	if v == old {
		return 0
	}
	t.sums.set(i, v)
	switch {
	case old == 0:
		t.pos++
		dpos = 1
	case v == 0:
		t.pos--
		dpos = -1
	}
	if t.updates++; t.updates >= driftRebuildEvery {
		t.rebuild()
	}
	t.publish()
	return dpos
}

// rebuild recomputes the sums from the exact weights, discarding drift.
func (t *shardTree) rebuild() {
	t.sums.rebuild()
	t.updates = 0
	t.peak = 0
}

// publish stores the tree's total for lock-free readers. An empty tree
// publishes exactly 0 whatever drift is left in it, so sample sees a zero
// total rather than chasing rounding residue. A total far below its peak
// (including one that drift has cancelled to zero while weight remains)
// triggers a rebuild first.
func (t *shardTree) publish() {
	total := 0.0
	if t.pos > 0 {
		if total = t.sums.total(); !(total > t.peak*driftPeakRatio) {
			t.rebuild()
			total = t.sums.total()
		}
		t.peak = max(t.peak, total)
	}
	t.total.Store(math.Float64bits(total))
}

// draw returns the position at fraction frac (0 <= frac <= 1) of the tree's
// current total. found is false only when the tree is empty. A draw that
// drift led to a zero weight or past the end rebuilds the tree and looks
// again. Even a fresh tree's rounded sums can miss by an ulp at a boundary;
// then draw takes the first positive position, which a search for 0 cannot
// miss: in a fresh tree a sum over only zero weights is exactly 0, and a sum
// over any positive weight is positive.
func (t *shardTree) draw(frac float64) (i int, found bool) {
	if i, found = t.locate(frac); found || t.pos == 0 {
		return i, found
	}
	t.rebuild()
	t.publish()
	if i, found = t.locate(frac); found {
		return i, found
	}
	return t.locate(0)
}

// locate returns the position at fraction frac of the published total, if
// find landed on a positive exact weight.
func (t *shardTree) locate(frac float64) (int, bool) {
	total := math.Float64frombits(t.total.Load())
	if total == 0 {
		return 0, false
	}
	// frac may have been taken from a total read before a concurrent update;
	// scaling it to the current total keeps the draw in range.
	x := frac * total
	if x >= total {
		x = math.Nextafter(total, 0)
	}
	i := t.sums.find(x)
	if i < t.sums.size() && t.sums.weight(i) > 0 {
		return i, true
	}
	return 0, false
}

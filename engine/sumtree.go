package engine

import "math/bits"

// sumFanout is how many entries of one level a sum tree sums into one entry
// of the level above: 8 float64s, one 64-byte cache line.
const (
	sumFanoutBits = 3
	sumFanout     = 1 << sumFanoutBits
)

// sumMaxLevels bounds a sum tree's height: sumMaxLevels levels of fanout 8
// hold 8^sumMaxLevels = 2^33 positions, more than any int32 slot needs.
const sumMaxLevels = 11

// sumTree holds float64 weights over positions 0..size-1 with partial sums
// in a B-ary tree of fanout 8, so that every level a search or an update
// touches costs one cache line. levels[0] holds the weights themselves, one
// per position; each entry of levels[k] is the sum of a group of 8
// consecutive entries of levels[k-1] (entry i sums entries 8i..8i+7), up to
// levels[top], which has at most 8 entries. The size is zero or a power of
// two of at least 8, so every level below the top is a whole number of
// groups. Each level has its own backing array of a power-of-two length;
// Go's allocator (in practice, not by specification) gives such a
// float64 array an address aligned to its size up to 8 KiB and to a page
// beyond, so each group of 8 is exactly one 64-byte cache line and the
// top (at most 64 bytes) sits within one.
//
// The weights in levels[0] are exact: set stores them as given. The sums
// above them accumulate rounding error as weights are added and subtracted;
// rebuild recomputes them from the weights (see shardTree).
type sumTree struct {
	levels [sumMaxLevels][]float64
	top    int // index of the top level; levels above it are nil
}

// size reports how many positions the tree holds.
func (t *sumTree) size() int { return len(t.levels[0]) }

// weight returns the exact weight at position i (0 <= i < size).
func (t *sumTree) weight(i int) float64 { return t.levels[0][i] }

// set sets the weight at position i (0 <= i < size) to v and adds the
// change to the one entry above it on each level. It returns the old weight.
func (t *sumTree) set(i int, v float64) (old float64) {
	old = t.levels[0][i]
	t.levels[0][i] = v
	d := v - old
	for k := 1; k <= t.top; k++ {
		i >>= sumFanoutBits
		t.levels[k][i] += d
	}
	return old
}

// grow makes room for at least n positions, rounding the size up to a power
// of two (at least 8) so repeated growth is amortized O(1) per position.
// The weights are kept and every sum is recomputed from them in O(size),
// so a grown tree is also a rebuilt one.
func (t *sumTree) grow(n int) {
	if n <= t.size() {
		return
	}
	size := max(sumFanout, 1<<bits.Len(uint(n-1)))
	leaves := make([]float64, size)
	copy(leaves, t.levels[0])
	t.levels = [sumMaxLevels][]float64{0: leaves}
	t.top = 0
	for m := size; m > sumFanout; {
		m >>= sumFanoutBits
		t.top++
		t.levels[t.top] = make([]float64, m)
	}
	t.rebuild()
}

// rebuild recomputes every sum from the weights in O(size). Every entry is
// then a plain sum of non-negative weights, free of the drift left by
// earlier subtractions: exactly 0 over only zero weights, positive over any
// positive one.
func (t *sumTree) rebuild() {
	for k := 1; k <= t.top; k++ {
		lo, hi := t.levels[k-1], t.levels[k]
		for i := range hi {
			s := 0.0
			for _, v := range lo[i*sumFanout : (i+1)*sumFanout] {
				s += v
			}
			hi[i] = s
		}
	}
}

// total returns the sum of all weights as the tree sees it: the sum of the
// top level.
func (t *sumTree) total() float64 {
	s := 0.0
	for _, v := range t.levels[t.top] {
		s += v
	}
	return s
}

// find returns the smallest position whose prefix sum (weights up to and
// including it) exceeds x: it scans the top level, then one group of 8 on
// each level below, subtracting the sums it skips, so O(log8 size) cache
// lines. It returns size when x is not below the top level's sum. Rounding
// (in the sums, or in find's own subtractions) can make a search run off
// the end of a group below the top; it then takes the group's last entry.
// So find can land on a position whose exact weight is zero; callers must
// check.
func (t *sumTree) find(x float64) int {
	i := 0
	top := t.levels[t.top]
	for ; i < len(top); i++ {
		if x < top[i] {
			break
		}
		x -= top[i]
	}
	if i == len(top) {
		return t.size()
	}
	for k := t.top - 1; k >= 0; k-- {
		i <<= sumFanoutBits
		g := t.levels[k][i : i+sumFanout : i+sumFanout]
		j := 0
		for ; j < sumFanout-1; j++ {
			if x < g[j] {
				break
			}
			x -= g[j]
		}
		i += j
	}
	return i
}

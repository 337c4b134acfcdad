package engine

import "math/bits"

// fenwick is a Fenwick (binary indexed) tree of float64 weights over
// positions 0..size-1. Node j (1-based, stored at tree[j-1]) holds the sum of
// the weights at 1-based positions (j-lowbit(j), j]. The size is zero or a
// power of two, so the last node covers everything: total is one load and
// find's descent starts from a single mask.
//
// The tree accumulates rounding error as weights are added and subtracted;
// it does not know the exact weights. Its owner keeps them and calls build to
// start afresh (see shardTree).
type fenwick struct {
	tree []float64
}

// size reports how many positions the tree holds.
func (f *fenwick) size() int { return len(f.tree) }

// add adds delta to the weight at position i (0 <= i < size).
func (f *fenwick) add(i int, delta float64) {
	for j := i + 1; j <= len(f.tree); j += j & -j {
		f.tree[j-1] += delta
	}
}

// grow makes room for at least n positions, rounding the size up to a power
// of two so repeated growth is amortized O(1) per position. Existing nodes
// cover the same ranges at any size, so they are kept; each new node is
// the sum of its children, all of which precede it, in one O(size) pass.
func (f *fenwick) grow(n int) {
	old := len(f.tree)
	if n <= old {
		return
	}
	size := 1 << bits.Len(uint(n-1))
	f.tree = append(f.tree, make([]float64, size-old)...)
	for i := 1; i < size; i++ {
		if j := i + i&-i; j > old && j <= size {
			f.tree[j-1] += f.tree[i-1]
		}
	}
}

// build replaces the contents with the weights w (len(w) <= size; later
// positions become zero) in O(size). Every node is then a plain sum of
// non-negative weights, free of the drift left by earlier subtractions.
func (f *fenwick) build(w []float64) {
	copy(f.tree, w)
	clear(f.tree[len(w):])
	n := len(f.tree)
	for i := 1; i < n; i++ {
		if j := i + i&-i; j <= n {
			f.tree[j-1] += f.tree[i-1]
		}
	}
}

// total returns the sum of all weights as the tree sees it.
func (f *fenwick) total() float64 {
	s := 0.0
	for j := len(f.tree); j > 0; j -= j & -j {
		s += f.tree[j-1]
	}
	return s
}

// find returns the smallest position whose prefix sum (weights up to and
// including it) exceeds x, by descending from the top node in O(log size).
// It returns size when x >= total. Rounding can make it land on a position
// whose exact weight is zero; callers holding exact weights must check.
func (f *fenwick) find(x float64) int {
	n := len(f.tree)
	pos := 0
	for step := n; step > 0; step >>= 1 {
		if next := pos + step; next <= n && f.tree[next-1] <= x {
			pos = next
			x -= f.tree[next-1]
		}
	}
	return pos
}

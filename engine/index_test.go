package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// idxSumTreePrefix sums the tree's weights at positions 0..n-1 the way a
// sum tree is meant to be read: the weights of n's partial group, then the
// partial group above it on each level, so it checks the sums too.
func idxSumTreePrefix(t *sumTree, n int) float64 {
	s := 0.0
	for k := 0; k <= t.top; k++ {
		start := n &^ (sumFanout - 1)
		if k == t.top {
			start = 0
		}
		for _, v := range t.levels[k][start:n] {
			s += v
		}
		n = start >> sumFanoutBits
	}
	return s
}

// idxCheckSumTreeShape checks the level layout: a power-of-two size of at
// least 8 (or 0), each level an eighth of the one below, a top of at most
// 8 entries, and every sum exactly the sum of its group (the tests' weights
// are integers, so the sums are exact whatever their order).
func idxCheckSumTreeShape(t *testing.T, st *sumTree) {
	t.Helper()
	n := st.size()
	if n != 0 && (n < sumFanout || n&(n-1) != 0) {
		t.Fatalf("size %d: want 0 or a power of two >= %d", n, sumFanout)
	}
	if len(st.levels[st.top]) > sumFanout {
		t.Errorf("top level %d has %d entries, want <= %d", st.top, len(st.levels[st.top]), sumFanout)
	}
	for k := range st.levels {
		if k > st.top {
			if st.levels[k] != nil {
				t.Errorf("level %d above the top (%d) is not nil", k, st.top)
			}
			continue
		}
		if k == 0 {
			continue
		}
		lo, hi := st.levels[k-1], st.levels[k]
		if len(hi)*sumFanout != len(lo) {
			t.Errorf("level %d has %d entries over %d below", k, len(hi), len(lo))
			continue
		}
		for i, v := range hi {
			s := 0.0
			for _, w := range lo[i*sumFanout : (i+1)*sumFanout] {
				s += w
			}
			if v != s {
				t.Errorf("levels[%d][%d] = %v, want %v (sum of its group)", k, i, v, s)
			}
		}
	}
}

// idxSparse returns n weights, zero except at the given positions.
func idxSparse(n int, at map[int]float64) []float64 {
	w := make([]float64, n)
	for i, v := range at {
		w[i] = v
	}
	return w
}

func TestSumTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights []float64
	}{
		{"single", []float64{3}},
		{"zeros between", []float64{0, 2, 0, 0, 5, 0, 1}},
		{"leading and trailing zeros", []float64{0, 0, 4, 0, 0}},
		{"one group", []float64{1, 2, 3, 4, 5, 6, 7, 8}},
		{"one past a group", []float64{1, 0, 1, 0, 1, 0, 1, 0, 9}},
		{"all zero", []float64{0, 0, 0}},
		{"two levels", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
		{"group boundaries", idxSparse(65, map[int]float64{7: 1, 8: 2, 15: 3, 56: 4, 63: 5, 64: 6})},
		{"four levels", idxSparse(600, map[int]float64{0: 1, 63: 2, 64: 3, 511: 4, 512: 1, 599: 5})},
		{"only last", idxSparse(1000, map[int]float64{999: 7})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Grow one position at a time so every growth path is taken,
			// setting each weight right after the tree makes room for it.
			var grown sumTree
			for i, w := range tt.weights {
				grown.grow(i + 1)
				if s := grown.size(); s < i+1 {
					t.Fatalf("size %d after grow(%d)", s, i+1)
				}
				if old := grown.set(i, w); old != 0 {
					t.Fatalf("set(%d) on a new position returned old weight %v", i, old)
				}
			}
			// Built: grown once, weights stored, sums rebuilt.
			var built sumTree
			built.grow(len(tt.weights))
			copy(built.levels[0], tt.weights)
			built.rebuild()
			// Updated: every weight moved away and back through set, so the
			// sums above carry every delta.
			var updated sumTree
			updated.grow(len(tt.weights))
			for _, r := range [][2]float64{{2, 6}, {0, 0}, {1, 0}} {
				for i, w := range tt.weights {
					updated.set(i, r[0]*w+r[1])
				}
			}

			for _, tree := range []struct {
				name string
				st   *sumTree
			}{{"grown", &grown}, {"built", &built}, {"updated", &updated}} {
				idxCheckSumTreeShape(t, tree.st)
				sum := 0.0
				for i, w := range tt.weights {
					sum += w
					if got := tree.st.weight(i); got != w {
						t.Errorf("%s: weight(%d) = %v, want %v", tree.name, i, got, w)
					}
					if got := idxSumTreePrefix(tree.st, i+1); got != sum {
						t.Errorf("%s: prefix(%d) = %v, want %v", tree.name, i+1, got, sum)
					}
				}
				if got := tree.st.total(); got != sum {
					t.Errorf("%s: total = %v, want %v", tree.name, got, sum)
				}
				// find(x) is the first position whose prefix sum exceeds x;
				// the weights are integers, so half steps probe both sides of
				// every boundary exactly.
				for x := 0.0; x <= sum+1; x += 0.5 {
					want, prefix := len(tt.weights), 0.0
					for i, w := range tt.weights {
						if prefix += w; prefix > x {
							want = i
							break
						}
					}
					if want == len(tt.weights) {
						want = tree.st.size()
					}
					if got := tree.st.find(x); got != want {
						t.Errorf("%s: find(%v) = %d, want %d", tree.name, x, got, want)
					}
				}
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		var st sumTree
		if st.size() != 0 || st.total() != 0 || st.find(0) != 0 {
			t.Errorf("zero sumTree: size %d, total %v, find(0) %d; want 0, 0, 0", st.size(), st.total(), st.find(0))
		}
	})
}

// idxPublishedTotal sums the shard totals sample reads.
func idxPublishedTotal(x *weightIndex, all bool) float64 {
	s := 0.0
	for j := range x.shards {
		s += math.Float64frombits(x.shards[j].tree(all).total.Load())
	}
	return s
}

// idxCheckDistribution draws n slots and checks them against want (weights
// by slot). A slot of zero weight must never be drawn. For the others, with
// a fixed seed the test is deterministic; the bounds below are set so that a
// correct sampler would fail them with probability about 1e-6 or less:
//   - per slot, a count is binomial with standard deviation
//     sqrt(n p (1-p)) <= sqrt(expected), so 5.5 of them is p < 4e-8 each;
//   - Pearson's chi-square over all positive slots, against the upper 1e-6
//     quantile of chi-square(k-1) (Wilson–Hilferty approximation).
func idxCheckDistribution(t *testing.T, x *weightIndex, all bool, want map[int32]float64, n int, rng *rand.Rand) {
	t.Helper()
	sum := 0.0
	for _, w := range want {
		sum += w
	}
	got := make(map[int32]int)
	for range n {
		slot, _, _, ok := x.sample(rng.Uint64(), all)
		if !ok {
			t.Fatalf("sample(all=%v): ok = false with total weight %v", all, sum)
		}
		got[slot]++
	}
	chi, positive := 0.0, 0
	for slot, c := range got {
		if want[slot] <= 0 {
			t.Errorf("sample(all=%v) drew slot %d (weight %v) %d times", all, slot, want[slot], c)
		}
	}
	for slot, w := range want {
		if w <= 0 {
			continue
		}
		positive++
		exp := float64(n) * w / sum
		d := float64(got[slot]) - exp
		chi += d * d / exp
		if math.Abs(d) > 5.5*math.Sqrt(exp) {
			t.Errorf("slot %d (weight %v): drawn %d times, expected %.0f", slot, w, got[slot], exp)
		}
	}
	if positive < 2 {
		return
	}
	df := float64(positive - 1)
	const z = 4.753 // upper 1e-6 quantile of the standard normal
	h := 2 / (9 * df)
	if crit := df * math.Pow(1-h+z*math.Sqrt(h), 3); chi > crit {
		t.Errorf("chi-square = %.1f over %d slots, want <= %.1f", chi, positive, crit)
	}
}

func TestIndexDistribution(t *testing.T) {
	t.Parallel()
	// 50 slots spread over every shard, with weights 1..50 and some zeros;
	// the fallback weights run the other way with different zeros.
	eligible := map[int32]float64{}
	fallback := map[int32]float64{}
	x := newWeightIndex()
	for i := range int32(50) {
		e, a := float64(i+1), float64(50-i)
		if i%7 == 3 {
			e = 0
		}
		if i%5 == 0 {
			a = 0
		}
		eligible[i], fallback[i] = e, a
		x.set(i, e, a)
	}
	tests := []struct {
		name string
		all  bool
		want map[int32]float64
	}{
		{"eligible", false, eligible},
		{"all", true, fallback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			idxCheckDistribution(t, x, tt.all, tt.want, 500_000, rand.New(rand.NewPCG(1, 2)))
		})
	}
}

func TestIndexSetWeight(t *testing.T) {
	t.Parallel()
	type op struct {
		slot   int32
		w, all float64
	}
	tests := []struct {
		name   string
		ops    []op
		slot   int32
		w, all float64
	}{
		{"unknown slot", nil, 3, 0, 0},
		{"negative slot", []op{{0, 1, 1}}, -1, 0, 0},
		{"beyond capacity", []op{{0, 1, 1}}, 1 << 20, 0, 0},
		{"set", []op{{3, 2, 5}}, 3, 2, 5},
		{"update", []op{{3, 2, 5}, {3, 7, 1}}, 3, 7, 1},
		{"to zero", []op{{3, 2, 5}, {3, 0, 0}}, 3, 0, 0},
		{"to zero and back", []op{{3, 2, 5}, {3, 0, 0}, {3, 4, 6}}, 3, 4, 6},
		{"grow past capacity", []op{{0, 1, 1}, {99_999, 8, 9}}, 99_999, 8, 9},
		{"neighbour untouched", []op{{5, 1, 2}, {21, 3, 4}}, 5, 1, 2},
		{"NaN", []op{{1, math.NaN(), 2}}, 1, 0, 2},
		{"negative", []op{{1, 2, -3}}, 1, 2, 0},
		{"infinite", []op{{1, math.Inf(1), math.Inf(-1)}}, 1, 0, 0},
		{"negative zero", []op{{1, math.Copysign(0, -1), 1}}, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := newWeightIndex()
			for _, o := range tt.ops {
				x.set(o.slot, o.w, o.all)
			}
			w, all := x.weight(tt.slot)
			if w != tt.w || all != tt.all || math.Signbit(w) || math.Signbit(all) {
				t.Errorf("weight(%d) = (%v, %v), want (%v, %v)", tt.slot, w, all, tt.w, tt.all)
			}
		})
	}
}

func TestIndexUpdates(t *testing.T) {
	t.Parallel()
	const slots = 2048
	rng := rand.New(rand.NewPCG(1, 2))
	x := newWeightIndex()
	var model [slots][2]float64
	set := func(slot int32, w, all float64) {
		x.set(slot, w, all)
		model[slot] = [2]float64{w, all}
	}
	// Start small and grow in steps, so slots land beyond each shard's
	// capacity while earlier weights are live.
	for _, n := range []int32{1, 17, 100, slots} {
		for slot := range n {
			if model[slot] == [2]float64{} {
				set(slot, float64(slot%13+1), float64(slot%11))
			}
		}
	}
	// Churn: weights change many times, often to zero and back.
	for range 100_000 {
		slot := rng.Int32N(slots)
		w, all := float64(rng.IntN(20)), float64(rng.IntN(20))
		if rng.IntN(3) == 0 {
			w = 0
		}
		set(slot, w, all)
	}

	wantElig, wantAll := map[int32]float64{}, map[int32]float64{}
	var nElig, nAll int
	var sumElig, sumAll float64
	for slot, m := range model {
		if w, all := x.weight(int32(slot)); w != m[0] || all != m[1] {
			t.Fatalf("weight(%d) = (%v, %v), want (%v, %v)", slot, w, all, m[0], m[1])
		}
		wantElig[int32(slot)], wantAll[int32(slot)] = m[0], m[1]
		sumElig += m[0]
		sumAll += m[1]
		if m[0] > 0 {
			nElig++
		}
		if m[1] > 0 {
			nAll++
		}
	}
	if e, a, s := x.counts(); e != nElig || a != nAll || s != slots {
		t.Errorf("counts() = (%d, %d, %d), want (%d, %d, %d)", e, a, s, nElig, nAll, slots)
	}
	// Integer weights keep every partial sum exact.
	if got := idxPublishedTotal(x, false); got != sumElig {
		t.Errorf("eligible total = %v, want %v", got, sumElig)
	}
	if got := idxPublishedTotal(x, true); got != sumAll {
		t.Errorf("all total = %v, want %v", got, sumAll)
	}
	idxCheckDistribution(t, x, false, wantElig, 500_000, rng)
	idxCheckDistribution(t, x, true, wantAll, 500_000, rng)
}

func TestIndexDrift(t *testing.T) {
	t.Parallel()
	t.Run("random updates", func(t *testing.T) {
		t.Parallel()
		// Weights spanning twelve orders of magnitude make add's running
		// sums round on almost every update. 1e6 updates over 16 shards stay
		// under driftRebuildEvery per tree.
		const slots = 256
		rng := rand.New(rand.NewPCG(1, 2))
		x := newWeightIndex()
		var exact [slots]float64
		weight := func() float64 {
			if rng.IntN(3) == 0 {
				return 0
			}
			return math.Pow(10, -3+12*rng.Float64())
		}
		for range 1_000_000 {
			slot := rng.Int32N(slots)
			w := weight()
			x.set(slot, w, w)
			exact[slot] = w
		}
		check := func(t *testing.T) {
			t.Helper()
			want := map[int32]float64{}
			sum := 0.0
			for slot, w := range exact {
				want[int32(slot)] = w
				sum += w
			}
			// Drift stays below about 1e-8 of the total (see driftPeakRatio).
			if got := idxPublishedTotal(x, false); math.Abs(got-sum) > 1e-8*sum {
				t.Errorf("total = %v, want %v (exact)", got, sum)
			}
			for range 200_000 {
				slot, _, _, ok := x.sample(rng.Uint64(), false)
				if !ok {
					t.Fatal("sample: ok = false")
				}
				if exact[slot] == 0 {
					t.Fatalf("sample drew slot %d of weight 0", slot)
				}
			}
		}
		check(t)
		// Now leave only small weights, smaller than the drift the large
		// ones leave behind in the running sums.
		for slot := range exact {
			w := 0.0
			if slot%8 == 0 {
				w = 1e-3 * float64(slot+1)
			}
			x.set(int32(slot), w, w)
			exact[slot] = w
		}
		check(t)
	})

	// Slots 0, 16, ..., 240 share shard 0 as positions 0, 1, ..., 15. Once
	// position 8 (slot 128) is set the shard's trees hold 16 positions in
	// two levels: the weights, and levels[1] = [sum of positions 0..7, sum
	// of positions 8..15]. The weights are stored exactly; the sums above
	// are not. Around 1e17 floats are 16 apart, so adding and removing 1e17
	// at position 1 leaves a known rounding error in levels[1][0].
	idxDriftedSum := func(w0 float64) float64 {
		big := 1e17
		return (w0 + big) - big
	}
	tests := []struct {
		name string
		w0   float64
		// drifted is levels[1][0] if nothing rebuilt the sums: 1e17+w0
		// rounds to a multiple of 16, so the sum keeps a wrong residue.
		drifted float64
	}{
		// The total falls from 1e17 to 16, far below its peak: rebuilt.
		{"total far below peak", 10, 16},
		// 1e17+1 rounds to 1e17, so zeroing slot 16 cancels slot 0's
		// weight entirely; the shard must not vanish: rebuilt.
		{"cancelled positive weight", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := idxDriftedSum(tt.w0); got != tt.drifted {
				t.Fatalf("(%v+1e17)-1e17 = %v, want %v: the case no longer reproduces", tt.w0, got, tt.drifted)
			}
			x := newWeightIndex()
			x.set(128, 0, 0) // two levels
			x.set(0, tt.w0, tt.w0)
			x.set(16, 1e17, 1e17)
			x.set(16, 0, 0)
			tree := &x.shards[0].eligible
			if tree.sums.top != 1 {
				t.Fatalf("tree has top level %d, want 1", tree.sums.top)
			}
			if tree.updates != 0 {
				t.Errorf("%d updates since the last rebuild, want 0 (rebuilt)", tree.updates)
			}
			if got := tree.sums.levels[1][0]; got != tt.w0 {
				t.Errorf("sum over slots 0..112 = %v, want %v (rebuilt)", got, tt.w0)
			}
			if got := idxPublishedTotal(x, false); got != tt.w0 {
				t.Errorf("total = %v, want %v", got, tt.w0)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 1000 {
				if slot, _, _, ok := x.sample(rng.Uint64(), false); !ok || slot != 0 {
					t.Fatalf("sample = (%d, %v), want (0, true)", slot, ok)
				}
			}
		})
	}

	t.Run("residue on a zero weight", func(t *testing.T) {
		t.Parallel()
		// Slot 128 (position 8, in the second group) keeps the total near
		// 1e17, so zeroing slot 16 leaves 1e17+10 (rounded to 1e17+16)
		// minus 1e17 = 16 in the sum over positions 0..7, where only 10
		// remains.
		x := newWeightIndex()
		x.set(0, 10, 10)
		x.set(128, 1e17, 1e17)
		x.set(16, 1e17, 1e17)
		x.set(16, 0, 0)
		tree := &x.shards[0].eligible
		sum := &tree.sums.levels[1][0]
		if *sum != 16 {
			t.Fatalf("sum over slots 0..112 = %v, want 16 (drift)", *sum)
		}
		// The smallest nonzero r>>11 puts the draw at 2^-53 of the total,
		// about 11.1: inside the first group's sum, past slot 0's 10, so
		// find runs off the group's weights and lands on its last position
		// (slot 112), of weight 0. The draw must rebuild and return slot
		// 128 instead.
		if got := tree.sums.find(0x1p-53 * tree.sums.total()); got != 7 {
			t.Fatalf("find in the residue = %d, want 7: the case no longer reproduces", got)
		}
		if slot, _, _, ok := x.sample(1<<11, false); !ok || slot != 128 {
			t.Errorf("sample = (%d, %v), want (128, true)", slot, ok)
		}
		if *sum != 10 {
			t.Errorf("sum after draw = %v, want 10 (rebuilt)", *sum)
		}
	})

	// Even a tree without drift can miss: one ulp below the total T, the
	// subtractions of find round, and the search runs past every positive
	// weight. The largest r draws exactly there. The trees below are fresh
	// (just grown) and the weights were found by search.
	for _, tt := range []struct {
		name   string
		slot   int32 // the second weighted slot; the first is slot 0
		w0, w1 float64
		find   int // where find(T-ulp) lands
	}{
		// Slots 0 and 16: the top's first sum exceeds T-ulp, but minus
		// slot 0's weight the rest rounds up to slot 16's, so the search
		// runs off the group and lands on its last position, of weight 0.
		{"off a group", 16, 311.026, 586.336, 7},
		// Slots 0 and 144, in different groups: the top's first sum is
		// slot 0's weight; the rest rounds up to the second sum, so the
		// search runs off the top and returns size.
		{"off the top", 144, 188.902, 618.441, 16},
	} {
		t.Run("rounding miss in a fresh tree, "+tt.name, func(t *testing.T) {
			t.Parallel()
			x := newWeightIndex()
			x.set(0, tt.w0, tt.w0)
			x.set(tt.slot, tt.w1, tt.w1)
			x.set(240, 0, 0) // grows to 16 positions: a fresh tree
			tree := &x.shards[0].eligible
			total := tree.sums.total()
			if got := tree.sums.find(math.Nextafter(total, 0)); got != tt.find {
				t.Fatalf("find(T-ulp) = %d, want %d: the case no longer reproduces", got, tt.find)
			}
			if slot, _, _, ok := x.sample(math.MaxUint64, false); !ok || (slot != 0 && slot != tt.slot) {
				t.Errorf("sample = (%d, %v), want slot 0 or %d", slot, ok, tt.slot)
			}
		})
	}
}

func TestIndexCounts(t *testing.T) {
	t.Parallel()
	type op struct {
		slot   int32
		w, all float64
	}
	tests := []struct {
		name                 string
		ops                  []op
		eligible, all, slots int
	}{
		{"empty", nil, 0, 0, 0},
		{"one slot", []op{{0, 1, 1}}, 1, 1, 1},
		{"sparse slots", []op{{9, 1, 1}, {70_000, 1, 0}}, 2, 1, 2},
		{"zero weights count as slots", []op{{4, 0, 0}}, 0, 0, 1},
		{"repeated set counts once", []op{{4, 1, 1}, {4, 2, 2}, {4, 0, 0}}, 0, 0, 1},
		{"eligible only", []op{{0, 1, 0}, {1, 2, 0}}, 2, 0, 2},
		{"fallback only", []op{{0, 0, 1}, {1, 0, 2}}, 0, 2, 2},
		{"update keeps count", []op{{0, 1, 1}, {0, 2, 3}}, 1, 1, 1},
		{"to zero", []op{{0, 1, 1}, {1, 1, 1}, {0, 0, 1}}, 1, 2, 2},
		{"to zero and back", []op{{0, 1, 1}, {0, 0, 0}, {0, 5, 5}}, 1, 1, 1},
		{"invalid weights are zero", []op{{0, math.NaN(), -1}, {1, math.Inf(1), 2}}, 0, 1, 2},
		{"same shard", []op{{0, 1, 1}, {16, 1, 0}, {32, 0, 1}}, 2, 2, 3},
		{"lower slot after higher", []op{{40, 1, 1}, {2, 1, 1}, {40, 3, 3}}, 2, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := newWeightIndex()
			for _, o := range tt.ops {
				x.set(o.slot, o.w, o.all)
			}
			if e, a, s := x.counts(); e != tt.eligible || a != tt.all || s != tt.slots {
				t.Errorf("counts() = (%d, %d, %d), want (%d, %d, %d)", e, a, s, tt.eligible, tt.all, tt.slots)
			}
		})
	}
}

func TestIndexSampleEmpty(t *testing.T) {
	t.Parallel()
	type op struct {
		slot   int32
		w, all float64
	}
	tests := []struct {
		name              string
		ops               []op
		okEligible, okAll bool
	}{
		{"new index", nil, false, false},
		{"all weights zero", []op{{0, 0, 0}, {1, 0, 0}, {100, 0, 0}}, false, false},
		{"zeroed after use", []op{{0, 1, 2}, {17, 3, 4}, {0, 0, 0}, {17, 0, 0}}, false, false},
		{"invalid weights", []op{{0, math.NaN(), math.Inf(1)}, {1, -1, math.Inf(-1)}}, false, false},
		{"fallback only", []op{{0, 0, 1}}, false, true},
		{"eligible only", []op{{0, 1, 0}}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := newWeightIndex()
			for _, o := range tt.ops {
				x.set(o.slot, o.w, o.all)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, r := range []uint64{0, math.MaxUint64, rng.Uint64(), rng.Uint64()} {
				for _, all := range []bool{false, true} {
					want := tt.okEligible
					if all {
						want = tt.okAll
					}
					slot, _, _, ok := x.sample(r, all)
					if ok != want {
						t.Errorf("sample(%#x, all=%v) = (%d, %v), want ok = %v", r, all, slot, ok, want)
					}
					if ok {
						if w, a := x.weight(slot); (all && a <= 0) || (!all && w <= 0) {
							t.Errorf("sample(%#x, all=%v) drew slot %d with weights (%v, %v)", r, all, slot, w, a)
						}
					}
				}
			}
		})
	}
}

func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 8
		iterations = 20_000
		slots      = 512
	)
	x := newWeightIndex()
	var everPositive [slots][2]atomic.Bool // [eligible, all]
	var touched [slots]atomic.Bool
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for i := range iterations {
				// Slots fill in as the test runs, so shards grow while other
				// goroutines draw from them.
				slot := rng.Int32N(min(slots, int32(64+i/8)))
				w, all := float64(rng.IntN(4)), float64(rng.IntN(4))
				// Mark before set: a draw that sees the weight locked the
				// shard after set unlocked it, so it sees the mark too.
				if w > 0 {
					everPositive[slot][0].Store(true)
				}
				if all > 0 {
					everPositive[slot][1].Store(true)
				}
				touched[slot].Store(true)
				x.set(slot, w, all)
				for k, all := range []bool{false, true} {
					if s, _, _, ok := x.sample(rng.Uint64(), all); ok && (s < 0 || s >= slots || !everPositive[s][k].Load()) {
						t.Errorf("sample(all=%v) drew slot %d, never set to a positive weight", all, s)
						return
					}
				}
			}
		})
	}
	wg.Wait()

	var nElig, nAll, nTouched int
	var sumElig, sumAll float64
	for slot := range int32(slots) {
		if touched[slot].Load() {
			nTouched++
		}
		w, all := x.weight(slot)
		if w > 0 {
			nElig++
		}
		if all > 0 {
			nAll++
		}
		sumElig += w
		sumAll += all
	}
	if e, a, s := x.counts(); e != nElig || a != nAll || s != nTouched {
		t.Errorf("counts() = (%d, %d, %d), want (%d, %d, %d)", e, a, s, nElig, nAll, nTouched)
	}
	if got := idxPublishedTotal(x, false); got != sumElig {
		t.Errorf("eligible total = %v, want %v", got, sumElig)
	}
	if got := idxPublishedTotal(x, true); got != sumAll {
		t.Errorf("all total = %v, want %v", got, sumAll)
	}
}

var idxBenchSizes = []int{1000, 100_000}

// idxBenchIndex returns an index of n slots with random positive weights.
func idxBenchIndex(n int) *weightIndex {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newWeightIndex()
	for slot := range int32(n) {
		w := 0.1 + rng.Float64()
		x.set(slot, w, w+1)
	}
	return x
}

func BenchmarkIndexSample(b *testing.B) {
	for _, n := range idxBenchSizes {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			x := idxBenchIndex(n)
			rng := rand.New(rand.NewPCG(3, 4))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, ok := x.sample(rng.Uint64(), false); !ok {
					b.Fatal("sample: ok = false")
				}
			}
		})
	}
}

func BenchmarkIndexSet(b *testing.B) {
	for _, n := range idxBenchSizes {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			x := idxBenchIndex(n)
			rng := rand.New(rand.NewPCG(3, 4))
			b.ReportAllocs()
			for b.Loop() {
				w := 0.1 + rng.Float64()
				x.set(rng.Int32N(int32(n)), w, w+1)
			}
		})
	}
}

// BenchmarkIndexSampleSetParallel models the engine's hot path: every
// acquire draws a slot and then changes its weight (its in-flight count).
func BenchmarkIndexSampleSetParallel(b *testing.B) {
	for _, n := range idxBenchSizes {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			x := idxBenchIndex(n)
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 4))
				for pb.Next() {
					slot, _, _, ok := x.sample(rng.Uint64(), false)
					if !ok {
						b.Error("sample: ok = false")
						return
					}
					w := 0.1 + rng.Float64()
					x.set(slot, w, w+1)
				}
			})
		})
	}
}

// TestIndexMarks: update counts each mark once per member, remove and a
// later update without it take it off, and a non-member is never counted.
func TestIndexMarks(t *testing.T) {
	t.Parallel()
	x := newWeightIndex()
	both := [numMarks]bool{pending: true, withheld: true}
	x.update(1, 1, 1, both)
	x.update(1, 1, 1, both) // again: counted once
	x.update(2, 1, 1, [numMarks]bool{withheld: true})
	if p, w := x.marks(pending), x.marks(withheld); p != 1 || w != 2 {
		t.Fatalf("pending %d, withheld %d; want 1 and 2", p, w)
	}
	x.update(1, 1, 1, [numMarks]bool{})
	x.remove(2)
	x.remove(3) // not a member
	if p, w := x.marks(pending), x.marks(withheld); p != 0 || w != 0 {
		t.Fatalf("after clearing: pending %d, withheld %d; want 0 and 0", p, w)
	}
}

// set records slot's weights without marks, as most tests need.
func (x *weightIndex) set(slot int32, w, all float64) { x.update(slot, w, all, [numMarks]bool{}) }

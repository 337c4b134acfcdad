package engine

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// refHeap is wakeHeap through container/heap, which it must match.
type refHeap []wakeup

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.(wakeup)) }
func (h *refHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// TestWakeHeapOrder checks that wakeHeap pops what container/heap pops, in
// the same order, ties included: the order deadlines are handled in is
// the engine's.
func TestWakeHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h wakeHeap
	var ref refHeap
	for i := range 20000 {
		if rng.IntN(3) > 0 || len(h) == 0 {
			// Few distinct deadlines, so that many tie.
			w := wakeup{at: int64(rng.IntN(50)), key: Key{Route: int32(i)}}
			h.push(w)
			heap.Push(&ref, w)
			continue
		}
		if got, want := h.pop(), heap.Pop(&ref).(wakeup); got != want {
			t.Fatalf("pop %d = %+v, want %+v", i, got, want)
		}
	}
	for len(h) > 0 {
		if got, want := h.pop(), heap.Pop(&ref).(wakeup); got != want {
			t.Fatalf("final pop = %+v, want %+v", got, want)
		}
	}
}

package engine

import (
	"math/bits"
	"sync/atomic"
)

// pairTable holds a target's pairs by route slot, for picks that read it
// on every draw without a lock: an open-addressing table of atomic
// pointers (linear probing, at most half full), which a writer fills in
// place and replaces whole, twice the size, when it would pass half. A
// reader sees a pair either not yet there or whole. Adding n pairs costs
// O(n) in all; the copy-on-write map it replaces copied every pair at
// each addition, O(n²) for a busy target leased through 100k exits.
// Writers hold the targetPace's mu.
type pairTable struct {
	tab atomic.Pointer[pairSlots]
	n   int // guarded by the writers' lock: pairs held
}

// pairSlots is one table; its length is a power of two.
type pairSlots struct {
	slots []atomic.Pointer[pairPace]
	shift uint // 32 - log2(len(slots)), for the Fibonacci hash
}

// home is where route slot's probe starts in t.
func (t *pairSlots) home(slot int32) int {
	return int((uint32(slot) * 0x9E3779B1) >> t.shift)
}

func newPairSlots(size int) *pairSlots {
	return &pairSlots{slots: make([]atomic.Pointer[pairPace], size), shift: uint(32 - bits.TrailingZeros(uint(size)))}
}

// get returns route slot's pair, or nil.
func (pt *pairTable) get(slot int32) *pairPace {
	t := pt.tab.Load()
	if t == nil {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(slot); ; i = (i + 1) & mask {
		if p := t.slots[i].Load(); p == nil || p.slot == slot {
			return p
		}
	}
}

// add adds p, whose slot has no pair yet. Caller holds the writers' lock.
func (pt *pairTable) add(p *pairPace) {
	t := pt.tab.Load()
	if t == nil || 2*(pt.n+1) > len(t.slots) {
		size := 8
		if t != nil {
			size = 2 * len(t.slots)
		}
		next := newPairSlots(size)
		pt.each(func(q *pairPace) { next.put(q) })
		pt.tab.Store(next)
		t = next
	}
	t.put(p)
	pt.n++
}

// put stores p in the first free slot of its probe.
func (t *pairSlots) put(p *pairPace) {
	mask := len(t.slots) - 1
	i := t.home(p.slot)
	for t.slots[i].Load() != nil {
		i = (i + 1) & mask
	}
	t.slots[i].Store(p)
}

// remove drops the pairs gone reports, in one new table. Caller holds the
// writers' lock.
func (pt *pairTable) remove(gone func(*pairPace) bool) {
	var keep []*pairPace
	pt.each(func(p *pairPace) {
		if !gone(p) {
			keep = append(keep, p)
		}
	})
	size := 8
	for 2*len(keep) > size {
		size *= 2
	}
	next := newPairSlots(size)
	for _, p := range keep {
		next.put(p)
	}
	pt.tab.Store(next)
	pt.n = len(keep)
}

// each calls fn with every pair, once; a pair added meanwhile may be
// missed.
func (pt *pairTable) each(fn func(*pairPace)) {
	if t := pt.tab.Load(); t != nil {
		for i := range t.slots {
			if p := t.slots[i].Load(); p != nil {
				fn(p)
			}
		}
	}
}

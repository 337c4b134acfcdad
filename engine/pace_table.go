package engine

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// pairTable holds a target's pairs by route slot, for picks that read it
// on every draw without a lock: an open-addressing table (linear probing,
// at most half full), which a writer fills in place and replaces whole,
// twice the size, when it would pass half. A reader sees a pair either
// not yet there or whole. Adding n pairs costs O(n) in all; the
// copy-on-write map it replaces copied every pair at each addition, O(n²)
// for a busy target leased through 100k exits. Writers of pairs hold the
// targetPace's mu; writers of a cell's free hold its pair's mu.
type pairTable struct {
	tab atomic.Pointer[pairSlots]
	n   int // guarded by the writers' lock: pairs held
}

// pairSlots is one table; its length is a power of two.
type pairSlots struct {
	slots []pairCell
	shift uint // 32 - log2(len(slots)), for the Fibonacci hash
}

// pairCell is a cell of the table. A pick reads a pair of a random route,
// whose record is seldom in cache; the cell keeps beside the pointer what
// the pick needs most often, so that a probe compares keys, and the pick
// learns that the pair owes nothing, in the table's own memory.
type pairCell struct {
	// key is the route slot + 1 (0: empty), stored after p, so a reader
	// that sees the key sees the pair.
	key atomic.Int32
	// free is when, Unix ns, the pair's token bucket is next full at its
	// own rate (0: no rate holds it; freeUnknown: ask the pair). Whoever
	// spends a token or sets the rate publishes it under the pair's mu
	// (targetPace.publish); a rate only grows between those writes, so it
	// is never early. A table built by a grow or a removal starts every
	// cell unknown: a write to the table it replaced may be lost.
	free atomic.Int64
	p    atomic.Pointer[pairPace]
}

// freeUnknown marks a cell whose pair must be asked.
const freeUnknown = math.MaxInt64

// home is where route slot's probe starts in t.
func (t *pairSlots) home(slot int32) int {
	return int((uint32(slot) * 0x9E3779B1) >> t.shift)
}

func newPairSlots(size int) *pairSlots {
	return &pairSlots{slots: make([]pairCell, size), shift: uint(32 - bits.TrailingZeros(uint(size)))}
}

// cell returns route slot's cell, or nil.
func (pt *pairTable) cell(slot int32) *pairCell {
	t := pt.tab.Load()
	if t == nil {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(slot); ; i = (i + 1) & mask {
		switch t.slots[i].key.Load() {
		case 0:
			return nil
		case slot + 1:
			return &t.slots[i]
		}
	}
}

// get returns route slot's pair, or nil.
func (pt *pairTable) get(slot int32) *pairPace {
	if c := pt.cell(slot); c != nil {
		return c.p.Load()
	}
	return nil
}

// add adds p, whose slot has no pair yet, free from free. Caller holds
// the writers' lock.
func (pt *pairTable) add(p *pairPace, free int64) {
	t := pt.tab.Load()
	if t == nil || 2*(pt.n+1) > len(t.slots) {
		size := 8
		if t != nil {
			size = 2 * len(t.slots)
		}
		next := newPairSlots(size)
		pt.each(func(q *pairPace) { next.put(q, freeUnknown) })
		pt.tab.Store(next)
		t = next
	}
	t.put(p, free)
	pt.n++
}

// put stores p in the first free slot of its probe.
func (t *pairSlots) put(p *pairPace, free int64) {
	mask := len(t.slots) - 1
	i := t.home(p.slot)
	for t.slots[i].key.Load() != 0 {
		i = (i + 1) & mask
	}
	t.slots[i].free.Store(free)
	t.slots[i].p.Store(p)
	t.slots[i].key.Store(p.slot + 1)
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
		next.put(p, freeUnknown)
	}
	pt.tab.Store(next)
	pt.n = len(keep)
}

// each calls fn with every pair, once; a pair added meanwhile may be
// missed.
func (pt *pairTable) each(fn func(*pairPace)) {
	if t := pt.tab.Load(); t != nil {
		for i := range t.slots {
			if t.slots[i].key.Load() != 0 {
				fn(t.slots[i].p.Load())
			}
		}
	}
}

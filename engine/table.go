package engine

import (
	"sync"
	"sync/atomic"
)

const chunkBits = 10 // 1024 entries per chunk

// table is an append-only array readable without locks: entries live in
// fixed chunks that never move, and only the small chunk directory is copied
// when it grows, so adding 100k routes one at a time stays linear.
type table[T any] struct {
	mu     sync.Mutex                           // serializes appends
	chunks atomic.Pointer[[]*[1 << chunkBits]T] // directory; replaced on growth
	n      atomic.Int32                         // entries published
}

// add appends a zero entry, lets init fill it (given its index) before it
// is published, and returns its index.
func (t *table[T]) add(init func(int32, *T)) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.n.Load()
	var dir []*[1 << chunkBits]T
	if p := t.chunks.Load(); p != nil {
		dir = *p
	}
	if int(i>>chunkBits) == len(dir) {
		grown := make([]*[1 << chunkBits]T, len(dir)+1)
		copy(grown, dir)
		grown[len(dir)] = new([1 << chunkBits]T)
		dir = grown
		t.chunks.Store(&dir)
	}
	init(i, &dir[i>>chunkBits][i&(1<<chunkBits-1)])
	t.n.Store(i + 1)
	return i
}

// get returns entry i, or nil if it has not been published.
func (t *table[T]) get(i int32) *T {
	if i < 0 || i >= t.n.Load() {
		return nil
	}
	dir := *t.chunks.Load()
	return &dir[i>>chunkBits][i&(1<<chunkBits-1)]
}

func (t *table[T]) len() int32 { return t.n.Load() }

const nameShards = 32

// nameMap maps names to values with one read lock per lookup and no
// allocation (sync.Map would box every string key).
type nameMap[V any] struct {
	shards [nameShards]struct {
		mu sync.RWMutex
		m  map[string]V // guarded by mu
	}
}

func (m *nameMap[V]) shard(name string) int { return int(fnv32(name) % nameShards) }

// fnv32 is FNV-1a, inline so hashing a string never allocates.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func (m *nameMap[V]) load(name string) (V, bool) {
	sh := &m.shards[m.shard(name)]
	sh.mu.RLock()
	v, ok := sh.m[name]
	sh.mu.RUnlock()
	return v, ok
}

// loadOrStore returns the value for name, storing make() first if there is
// none; loaded reports whether it was already there.
func (m *nameMap[V]) loadOrStore(name string, make func() V) (v V, loaded bool) {
	if v, ok := m.load(name); ok {
		return v, true
	}
	sh := &m.shards[m.shard(name)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if v, ok := sh.m[name]; ok {
		return v, true
	}
	if sh.m == nil {
		sh.m = map[string]V{}
	}
	v = make()
	sh.m[name] = v
	return v, false
}

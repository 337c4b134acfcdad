package lookalike

// lru is a map of at most max values that forgets the least recently got
// one to make room, reusing its memory: at capacity, getting a new key
// allocates nothing. Not safe for concurrent use.
type lru[K comparable, V any] struct {
	m    map[K]*node[K, V]
	max  int
	root node[K, V] // root.next is the most recent, root.prev the least
}

type node[K comparable, V any] struct {
	key        K
	val        V
	prev, next *node[K, V]
}

func newLRU[K comparable, V any](max int) lru[K, V] {
	return lru[K, V]{m: make(map[K]*node[K, V]), max: max}
}

// init links the empty list to itself; lazily, as l is a value.
func (l *lru[K, V]) init() {
	if l.root.next == nil {
		l.root.next, l.root.prev = &l.root, &l.root
	}
}

// get returns k's value, a zero one if k was not kept, and makes k the
// most recent.
func (l *lru[K, V]) get(k K) *V {
	l.init()
	n, ok := l.m[k]
	switch {
	case ok:
		l.unlink(n)
	case len(l.m) >= l.max:
		n = l.root.prev
		l.unlink(n)
		delete(l.m, n.key)
		// Zeroed in place: a zero V of the function's own would put a
		// target's ring (2.5 KiB) in its frame, and the attempt's fresh
		// goroutine would copy its stack to grow it on every answer.
		*n = node[K, V]{key: k}
		l.m[k] = n
	default:
		n = &node[K, V]{key: k}
		l.m[k] = n
	}
	n.prev, n.next = &l.root, l.root.next
	l.root.next.prev = n
	l.root.next = n
	return &n.val
}

// peek returns k's value, nil if k is not kept, and changes nothing.
func (l *lru[K, V]) peek(k K) *V {
	if n, ok := l.m[k]; ok {
		return &n.val
	}
	return nil
}

func (l *lru[K, V]) unlink(n *node[K, V]) {
	n.prev.next = n.next
	n.next.prev = n.prev
}

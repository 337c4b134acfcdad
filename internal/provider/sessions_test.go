package provider

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// minter mints ids "p1", "p2"… and counts its calls.
type minter struct{ n atomic.Int32 }

func (m *minter) mint(seq int) (string, *int, error) {
	n := int(m.n.Add(1))
	return fmt.Sprintf("p%d", n), &n, nil
}

func TestSessionsLifecycle(t *testing.T) {
	t.Parallel()
	type step struct {
		at      time.Duration
		key     string
		strict  bool
		retire  bool // retire the key's current provider session instead of a Get
		wantID  string
		wantSeq int
		wantErr error
	}
	for _, tc := range []struct {
		desc  string
		cfg   Config
		steps []step
	}{
		{"kept while in use", Config{TTL: time.Minute}, []step{
			{at: 0, key: "a", wantID: "p1", wantSeq: 1},
			{at: 30 * time.Second, key: "a", wantID: "p1", wantSeq: 1},
			{at: 30 * time.Second, key: "b", wantID: "p2", wantSeq: 1},
		}},
		{"ttl ends it", Config{TTL: time.Minute}, []step{
			{at: 0, key: "a", wantID: "p1", wantSeq: 1},
			{at: time.Minute, key: "a", wantID: "p2", wantSeq: 2},
		}},
		{"idle ends it", Config{TTL: time.Hour, Idle: 10 * time.Second}, []step{
			{at: 0, key: "a", wantID: "p1", wantSeq: 1},
			{at: 9 * time.Second, key: "a", wantID: "p1", wantSeq: 1},
			{at: 19 * time.Second, key: "a", wantID: "p2", wantSeq: 2},
		}},
		{"retired: a new one", Config{}, []step{
			{at: 0, key: "a", wantID: "p1", wantSeq: 1},
			{at: time.Second, key: "a", retire: true},
			{at: 2 * time.Second, key: "a", wantID: "p2", wantSeq: 2},
		}},
		{"retired: strict fails until its tombstone goes", Config{TTL: time.Minute}, []step{
			{at: 0, key: "a", strict: true, wantID: "p1", wantSeq: 1},
			{at: time.Second, key: "a", retire: true},
			{at: 2 * time.Second, key: "a", strict: true, wantErr: ErrRestart},
			{at: 3 * time.Second, key: "a", strict: true, wantErr: ErrRestart},
			{at: 61 * time.Second, key: "a", strict: true, wantID: "p2", wantSeq: 1},
		}},
		{"expired: strict fails", Config{TTL: time.Minute}, []step{
			{at: 0, key: "a", strict: true, wantID: "p1", wantSeq: 1},
			{at: time.Minute, key: "a", strict: true, wantErr: ErrRestart},
		}},
		{"least recently used dropped", Config{Max: 2}, []step{
			{at: 0, key: "a", wantID: "p1", wantSeq: 1},
			{at: 1, key: "b", wantID: "p2", wantSeq: 1},
			{at: 2, key: "a", wantID: "p1", wantSeq: 1},
			{at: 3, key: "c", wantID: "p3", wantSeq: 1}, // b goes
			{at: 4, key: "a", wantID: "p1", wantSeq: 1},
			{at: 5, key: "b", wantID: "p4", wantSeq: 1},
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			s := NewSessions[*int](tc.cfg)
			var m minter
			current := map[string]*int{}
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				if st.retire {
					if !s.Retire(now, current[st.key]) {
						t.Fatalf("step %d: Retire(%s) found nothing", i, st.key)
					}
					if s.Retire(now, current[st.key]) {
						t.Fatalf("step %d: a second Retire(%s) retired again", i, st.key)
					}
					continue
				}
				sub, err := s.Get(now, st.key, st.strict, m.mint)
				if !errors.Is(err, st.wantErr) || err == nil && (sub.ID != st.wantID || sub.Seq != st.wantSeq) {
					t.Fatalf("step %d: Get(%s) = %+v, %v; want %s seq %d, %v", i, st.key, sub, err, st.wantID, st.wantSeq, st.wantErr)
				}
				current[st.key] = sub.Value
			}
		})
	}
}

func TestSessionsRetireOnlyTheCurrent(t *testing.T) {
	t.Parallel()
	s := NewSessions[*int](Config{})
	var m minter
	first, _ := s.Get(t0, "a", false, m.mint)
	s.Retire(t0, first.Value)
	second, _ := s.Get(t0, "a", false, m.mint)
	// A late report of a failure through the first must not end the second.
	if s.Retire(t0, first.Value) {
		t.Fatal("a retired provider session's value retired its successor")
	}
	if again, _ := s.Get(t0, "a", false, m.mint); again.ID != second.ID {
		t.Fatalf("after a stale Retire: %s, want %s", again.ID, second.ID)
	}
	if st := s.Stats(); st.Minted != 2 || st.Retired != 1 || st.Entries != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestSessionsMintOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := NewSessions[*int](Config{})
	var m minter
	const workers = 32
	ids := make([]string, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			sub, err := s.Get(t0, "shared", false, m.mint)
			if err != nil {
				t.Error(err)
			}
			ids[i] = sub.ID
		})
	}
	wg.Wait()
	if n := m.n.Load(); n != 1 {
		t.Fatalf("%d provider sessions minted for one session, want 1", n)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("workers got %q and %q", ids[0], id)
		}
	}
}

// TestSessionsMemory measures what one kept provider session costs the
// table itself (the value it holds is the caller's): go test -run
// SessionsMemory -v ./internal/provider/.
func TestSessionsMemory(t *testing.T) {
	const n = 10_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-session-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewSessions[*int](Config{Max: n})
	one := new(int)
	for _, k := range keys {
		if _, err := s.Get(t0, k, false, func(int) (string, *int, error) { return NewID(), one, nil }); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per provider session in the table (%d kept)", per, s.Stats().Entries)
	if per > 512 {
		t.Fatalf("%.0f bytes per provider session, want at most 512", per)
	}
	runtime.KeepAlive(s)
}

// TestSessionsRef: a Ref names its provider session while it is live and
// none other after: not its successor, not a namesake started anew after
// an eviction, not one of another table.
func TestSessionsRef(t *testing.T) {
	t.Parallel()
	var m minter
	s := NewSessions[*int](Config{Max: 1, TTL: time.Minute})
	ref := func(s *Sessions[*int], key string) (Ref, Sub[*int]) {
		t.Helper()
		sub, err := s.Get(t0, key, false, m.mint)
		r, ok := s.RefOf(sub.Value)
		if err != nil || !ok {
			t.Fatalf("Get(%s) = %+v, %v; RefOf: %v", key, sub, err, ok)
		}
		return r, sub
	}
	first, sub := ref(s, "a")
	if v, live := s.Live(t0, first); !live || v != sub.Value {
		t.Fatalf("Live(%+v) = %v, %v; want %v", first, v, live, sub.Value)
	}
	if _, live := s.Live(t0.Add(time.Minute), first); live {
		t.Fatal("an expired provider session is live by its Ref")
	}
	s.Retire(t0, sub.Value)
	if _, ok := s.RefOf(sub.Value); ok {
		t.Fatal("a retired provider session has a Ref")
	}
	ref(s, "a") // its successor
	evicted, _ := ref(s, "b")
	ref(s, "a")            // evicts b
	_, anew := ref(s, "b") // b anew, seq 1 again
	other, _ := ref(NewSessions[*int](Config{}), "b")
	if anew.Seq != 1 {
		t.Fatalf("b started anew at seq %d, want 1 as before its eviction", anew.Seq)
	}
	for _, tc := range []struct {
		desc string
		ref  Ref
	}{
		{"retired, a successor live", first},
		{"evicted, its key started anew at the same seq", evicted},
		{"another table's", other},
		{"none", Ref{}},
	} {
		if v, live := s.Live(t0, tc.ref); live {
			t.Errorf("%s: Live = %v, want none", tc.desc, v)
		}
	}
}

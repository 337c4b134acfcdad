package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// sink records each write it is given, and signals each on wrote.
type sink struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func newSink() *sink { return &sink{wrote: make(chan struct{}, 1000)} }

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, string(p))
	s.mu.Unlock()
	s.wrote <- struct{}{}
	return len(p), nil
}

func (s *sink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.writes...)
}

// hour is an interval no test waits for.
const hour = time.Hour

func TestLinesAreWrittenTogether(t *testing.T) {
	tests := []struct {
		name  string
		every time.Duration
		lines []string
		end   func(*Writer) error
		want  []string // the writes out, in order
	}{
		{"flushed", hour, []string{"a\n", "b\n", "c\n"}, (*Writer).Flush, []string{"a\nb\nc\n"}},
		{"closed", hour, []string{"a\n", "b\n"}, (*Writer).Close, []string{"a\nb\n"}},
		{"nothing held", hour, nil, (*Writer).Flush, nil},
		{"held by nothing", 0, []string{"a\n", "b\n"}, (*Writer).Flush, []string{"a\n", "b\n"}},
		{"negative interval", -time.Second, []string{"a\n"}, (*Writer).Close, []string{"a\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := newSink()
			w := New(out, tc.every)
			for _, l := range tc.lines {
				if n, err := w.Write([]byte(l)); n != len(l) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", l, n, err)
				}
			}
			if tc.every > 0 && len(out.got()) > 0 {
				t.Fatalf("written out before the interval: %q", out.got())
			}
			if err := tc.end(w); err != nil {
				t.Fatal(err)
			}
			if got := out.got(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("writes out %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIntervalWritesOut(t *testing.T) {
	out := newSink()
	w := New(out, time.Millisecond)
	defer w.Close()
	for round := range 3 { // the timer is armed again after each write out
		line := fmt.Sprintf("line %d\n", round)
		w.Write([]byte(line))
		select {
		case <-out.wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: nothing written out 10 s after a 1 ms interval", round)
		}
		if got := out.got(); got[len(got)-1] != line {
			t.Fatalf("round %d: wrote %q", round, got)
		}
	}
}

func TestFullBufferWritesOutAtOnce(t *testing.T) {
	out := newSink()
	w := New(out, hour)
	line := strings.Repeat("x", 1023) + "\n"
	for range maxHeld / len(line) {
		w.Write([]byte(line))
	}
	got := out.got()
	if len(got) != 1 || len(got[0]) != maxHeld {
		t.Fatalf("%d writes out of %d lines filling the buffer, want 1 of %d bytes", len(got), maxHeld/len(line), maxHeld)
	}
	w.Write([]byte("after\n")) // held again
	if len(out.got()) != 1 {
		t.Fatal("a line after a full buffer went straight out")
	}
	w.Close()
	if got := out.got(); len(got) != 2 || got[1] != "after\n" {
		t.Fatalf("writes out %d, last %q", len(got), got[len(got)-1])
	}
}

func TestAfterCloseLinesGoStraightOut(t *testing.T) {
	out := newSink()
	w := New(out, hour)
	w.Close()
	w.Write([]byte("late\n"))
	if got := out.got(); len(got) != 1 || got[0] != "late\n" {
		t.Fatalf("writes out %q", got)
	}
}

// TestConcurrentLinesStayWhole writes lines from many goroutines, some of
// them filling the buffer: every line is written out once and whole.
func TestConcurrentLinesStayWhole(t *testing.T) {
	out := newSink()
	out.wrote = make(chan struct{}, 1<<16)
	w := New(out, time.Millisecond)
	const writers, lines = 8, 2000
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "writer %d line %d %s\n", g, i, strings.Repeat("-", i%50))
			}
		})
	}
	wg.Wait()
	w.Close()
	seen := map[string]bool{}
	for _, l := range strings.SplitAfter(strings.Join(out.got(), ""), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, "writer ") || !strings.HasSuffix(l, "\n") || seen[l] {
			t.Fatalf("line split or repeated: %q", l)
		}
		seen[l] = true
	}
	if len(seen) != writers*lines {
		t.Fatalf("%d lines written out, want %d", len(seen), writers*lines)
	}
}

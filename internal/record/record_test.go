package record

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// feed applies n outcomes of each route to e, a second apart (with the
// sweep a gateway runs each second), ProxyTimeouts for r0 so that it
// changes state.
func feed(t *testing.T, e *engine.Engine, n int) {
	t.Helper()
	for i := range n {
		now := start.Add(time.Duration(i) * time.Second)
		e.Sweep(now)
		for r := range 3 {
			c := engine.OK
			if r == 0 {
				c = engine.ProxyTimeout
			}
			if err := e.Feedback(now, fmt.Sprintf("r%d", r), "shop.example", engine.Outcome{Class: c, Latency: 50 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Config{UncheckedCandidates: true, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		if err := e.AddRoute(start, engine.RouteSpec{ID: fmt.Sprintf("r%d", r)}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// record runs a Recorder over e while fn feeds it, and stops it.
func record(t *testing.T, e *engine.Engine, path string, maxBytes int64, fn func()) {
	t.Helper()
	r, err := Open(e, path, maxBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	fn()
	cancel()
	<-done
}

// TestRecordingReplays: a recording holds every outcome applied and every
// state change, and replays under the same rules with no difference.
func TestRecordingReplays(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	record(t, e, path, 0, func() { feed(t, e, 20) })
	events, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[engine.EventKind]int{}
	for _, ev := range events {
		kinds[ev.Kind]++
	}
	if kinds[engine.EventOutcome] != 60 || kinds[engine.EventState] == 0 {
		t.Fatalf("recorded %v, want 60 outcomes and some state changes", kinds)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v: want 0600", fi.Mode(), err)
	}
	rep, err := engine.Replay(events, engine.Config{UncheckedCandidates: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcomes != 60 || len(rep.Diffs) != 0 {
		t.Fatalf("replay %d outcomes, diffs %+v; want 60 and none", rep.Outcomes, rep.Diffs)
	}
	// Stricter rules decide differently on the same evidence.
	rep, err = engine.Replay(events, engine.Config{UncheckedCandidates: true, Seed: 1, SuspectAfter: 1, CoolAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) == 0 {
		t.Fatal("cooling after one failure changed no decision")
	}
}

// TestRecordingRotates: past its size the file moves to FILE.1 and a new
// one starts; Load reads both, in order, and a second rotation replaces
// FILE.1, so a recording stays within two files.
func TestRecordingRotates(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	record(t, e, path, 4<<10, func() { feed(t, e, 40) })
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	for _, p := range []string{path, path + ".1"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 8<<10 {
			t.Fatalf("%s: %v, %v; want at most about the rotation size", p, fi.Size(), err)
		}
	}
	events, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(events); i++ {
		if events[i].Time.Before(events[i-1].Time) {
			t.Fatalf("event %d at %v before %v: files read out of order", i, events[i].Time, events[i-1].Time)
		}
	}
	if last := events[len(events)-1]; !last.Time.Equal(start.Add(39 * time.Second)) {
		t.Fatalf("last event at %v, want the last outcome's time", last.Time)
	}
}

// TestRecordingAppends: a recording reopened goes on after what is there.
func TestRecordingAppends(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	record(t, e, path, 0, func() { feed(t, e, 2) })
	record(t, e, path, 0, func() { feed(t, e, 2) })
	events, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := 0
	for _, ev := range events {
		if ev.Kind == engine.EventOutcome {
			outcomes++
		}
	}
	if outcomes != 12 {
		t.Fatalf("%d outcomes, want 12 (6 per recording)", outcomes)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing recording loaded")
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("{\"kind\":\"outcome\"}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil {
		t.Fatal("a corrupt recording loaded")
	}
}

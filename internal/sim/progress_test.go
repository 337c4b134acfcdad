package sim

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *fakeClock) set(d time.Duration) { c.ns.Store(int64(d)) }

func TestProgressTimeline(t *testing.T) {
	t.Parallel()
	type step struct {
		at   time.Duration // since the start
		add  int
		want string // what this Add writes
	}
	tests := []struct {
		desc     string
		terminal bool
		label    string
		total    int
		steps    []step
	}{
		{
			desc: "silent for two seconds, then at most every 100ms", terminal: true, label: "run", total: 100,
			steps: []step{
				{at: 0, add: 1},
				{at: time.Second, add: 9},
				{at: 2 * time.Second, add: 10}, // not yet more than two seconds
				{at: 2050 * time.Millisecond, add: 5, want: "\rrun [=======                       ]  25% 25/100 ETA 6s"},
				{at: 2100 * time.Millisecond, add: 5}, // throttled
				{at: 2150 * time.Millisecond, add: 0}, // throttled: exactly 100ms
				{at: 2200 * time.Millisecond, add: 20, want: "\rrun [===============               ]  50% 50/100 ETA 2s"},
				{at: 4 * time.Second, add: 50, want: "\rrun [==============================] 100% 100/100 ETA 0s"},
			},
		},
		{
			desc: "shorter line is padded over the old one", terminal: true, label: "x", total: 1000,
			steps: []step{
				{at: 3 * time.Second, add: 1, want: "\rx [                              ]   0% 1/1000 ETA 49m57s"},
				{at: 4 * time.Second, add: 999, want: "\rx [==============================] 100% 1000/1000 ETA 0s" + " "},
			},
		},
		{
			desc: "100% only when done", terminal: true, label: "r", total: 350,
			steps: []step{{at: 3 * time.Second, add: 349, want: "\rr [============================= ]  99% 349/350 ETA 0s"}},
		},
		{
			desc: "not a terminal: nothing", terminal: false, label: "run", total: 10,
			steps: []step{{at: 3 * time.Second, add: 1}, {at: 10 * time.Second, add: 9}},
		},
		{
			desc: "nothing to count: nothing", terminal: true, label: "run", total: 0,
			steps: []step{{at: 3 * time.Second, add: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var clock fakeClock
			var b bytes.Buffer
			p := newProgress(&b, tt.label, tt.total, clock.now, tt.terminal)
			for _, s := range tt.steps {
				b.Reset()
				clock.set(s.at)
				p.Add(s.add)
				if got := b.String(); got != s.want {
					t.Errorf("at %v: wrote %q, want %q", s.at, got, s.want)
				}
			}
		})
	}
}

func TestProgressFinish(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		draw bool // whether a line is on screen before Finish
		want string
	}{
		{desc: "clears a drawn line", draw: true, want: "\r" + strings.Repeat(" ", len("l [                              ]  10% 1/10 ETA 27s")) + "\r"},
		{desc: "short run: nothing to clear", draw: false, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var clock fakeClock
			var b bytes.Buffer
			p := newProgress(&b, "l", 10, clock.now, true)
			if tt.draw {
				clock.set(3 * time.Second)
			}
			p.Add(1)
			b.Reset()
			p.Finish()
			if got := b.String(); got != tt.want {
				t.Errorf("Finish wrote %q, want %q", got, tt.want)
			}
			b.Reset()
			clock.set(time.Hour)
			p.Add(1)
			p.Finish()
			if b.Len() != 0 {
				t.Errorf("wrote %q after Finish", b.String())
			}
		})
	}
}

func TestNewProgressTerminal(t *testing.T) {
	t.Parallel()
	file, err := os.CreateTemp(t.TempDir(), "progress")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tests := []struct {
		desc string
		w    io.Writer
	}{
		{"buffer", &bytes.Buffer{}},
		{"regular file", file},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var clock fakeClock
			if p := NewProgress(tt.w, "l", 10, clock.now); p.enabled {
				t.Error("enabled on a writer that is not a terminal")
			}
		})
	}
}

func TestProgressNil(t *testing.T) {
	t.Parallel()
	var p *Progress
	p.Add(1)
	p.Finish()
}

// TestProgressConcurrent checks, under -race, that workers may share one
// Progress and that every task is counted.
func TestProgressConcurrent(t *testing.T) {
	t.Parallel()
	const workers, tasks = 8, 1000
	var clock fakeClock
	var b bytes.Buffer
	p := newProgress(&b, "l", workers*tasks, clock.now, true)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range tasks {
				clock.set(time.Duration(i) * 10 * time.Millisecond)
				p.Add(1)
			}
		})
	}
	wg.Wait()
	if got := p.done.Load(); got != workers*tasks {
		t.Errorf("counted %d tasks, want %d", got, workers*tasks)
	}
	if !strings.HasPrefix(b.String(), "\rl [") {
		t.Errorf("no line drawn: %q", b.String())
	}
	p.Finish()
}

func TestFormatETA(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59*time.Second + 600*time.Millisecond, "1m00s"},
		{90 * time.Second, "1m30s"},
		{59*time.Minute + 59*time.Second, "59m59s"},
		{time.Hour + 39*time.Minute + 57*time.Second, "1h40m"},
		{26 * time.Hour, "26h00m"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := formatETA(tt.d); got != tt.want {
				t.Errorf("formatETA(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

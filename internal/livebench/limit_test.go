package livebench

import (
	"testing"
	"time"
)

// t0 is the start of every test timeline.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

func TestBucket(t *testing.T) {
	t.Parallel()
	// A bucket of 4/s, burst 4, on a timeline: each step takes or asks
	// for the wait at its instant.
	type step struct {
		at       time.Duration
		take     bool          // take (true) or ask the wait (false)
		wantOK   bool          // take's result
		wantWait time.Duration // wait's result
	}
	tests := []struct {
		desc  string
		steps []step
	}{
		{desc: "burst then empty", steps: []step{
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: false},
			{at: 0, wantWait: 250 * time.Millisecond},
		}},
		{desc: "refills at the rate", steps: []step{
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 0, take: true, wantOK: true},
			{at: 100 * time.Millisecond, take: true, wantOK: false},
			{at: 250 * time.Millisecond, take: true, wantOK: true},
			{at: 250 * time.Millisecond, take: true, wantOK: false},
		}},
		{desc: "never above burst", steps: []step{
			{at: 10 * time.Second, wantWait: 0},
			{at: 10 * time.Second, take: true, wantOK: true},
			{at: 10 * time.Second, take: true, wantOK: true},
			{at: 10 * time.Second, take: true, wantOK: true},
			{at: 10 * time.Second, take: true, wantOK: true},
			{at: 10 * time.Second, take: true, wantOK: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			b := newBucket(4, 4)
			for i, s := range tt.steps {
				if s.take {
					if got := b.take(at(s.at)); got != s.wantOK {
						t.Fatalf("step %d: take at %v = %v, want %v", i, s.at, got, s.wantOK)
					}
				} else if got := b.wait(at(s.at)); got != s.wantWait {
					t.Fatalf("step %d: wait at %v = %v, want %v", i, s.at, got, s.wantWait)
				}
			}
		})
	}
}

func TestBucketReserveGoesIntoDebt(t *testing.T) {
	t.Parallel()
	b := newBucket(4, 1)
	b.reserve(t0) // the one token
	if w := b.wait(t0); w != 250*time.Millisecond {
		t.Fatalf("after the token: wait %v, want 250ms", w)
	}
	b.reserve(t0) // promised at t0+250ms
	if w := b.wait(t0); w != 500*time.Millisecond {
		t.Fatalf("after a reservation: wait %v, want 500ms", w)
	}
}

func TestBurstWindow(t *testing.T) {
	t.Parallel()
	// Three arrivals allowed within a second.
	tests := []struct {
		desc     string
		arrivals []time.Duration
		want     []bool // tripped, per arrival
		waitAt   time.Duration
		wantWait time.Duration
	}{
		{
			desc:     "three in a second are fine, the fourth trips",
			arrivals: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond},
			want:     []bool{false, false, false, true},
			waitAt:   300 * time.Millisecond, wantWait: 800 * time.Millisecond, // oldest of the last three is at 100ms
		},
		{
			desc:     "spread over more than the window never trips",
			arrivals: []time.Duration{0, 400 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond, 1600 * time.Millisecond},
			want:     []bool{false, false, false, false, false},
			waitAt:   1700 * time.Millisecond, wantWait: 100 * time.Millisecond,
		},
		{
			desc:     "not full: no wait",
			arrivals: []time.Duration{0, 10 * time.Millisecond},
			want:     []bool{false, false},
			waitAt:   20 * time.Millisecond, wantWait: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w := newBurstWindow(3, time.Second)
			for i, a := range tt.arrivals {
				if got := w.arrive(at(a)); got != tt.want[i] {
					t.Fatalf("arrival %d at %v: tripped %v, want %v", i, a, got, tt.want[i])
				}
			}
			if got := w.wait(at(tt.waitAt)); got != tt.wantWait {
				t.Fatalf("wait at %v = %v, want %v", tt.waitAt, got, tt.wantWait)
			}
		})
	}
}

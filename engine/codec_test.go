package engine

import (
	"testing"
	"time"
)

func TestHealthBinaryRoundTrip(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	h := Health{State: Healthy}
	now := t0
	for i := range 40 {
		now += int64(700 * time.Millisecond)
		cl := OK
		if i%3 == 0 {
			cl = ProxyTimeout
		}
		h.observe(Observation{Class: cl, Latency: time.Duration(i) * time.Millisecond, Jitter: 0.3}, ScopeRoute, &c, now)
	}
	h.observe(Observation{Class: ProxyAuth}, ScopeRoute, &c, now)
	h.SlowStart, h.Ejections, h.ProbeOK = true, 2, 1
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != healthSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), healthSize)
	}
	var got Health
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Fatalf("round trip changed the record:\n%+v\n%+v", h, got)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append([]byte{9}, b[1:]...)} {
		if err := got.UnmarshalBinary(bad); err == nil {
			t.Errorf("decoded %d bad bytes", len(bad))
		}
	}
}

func FuzzHealthUnmarshal(f *testing.F) {
	var h Health
	b, _ := h.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Health
		if h.UnmarshalBinary(data) != nil {
			return
		}
		again, _ := h.MarshalBinary()
		var h2 Health
		if err := h2.UnmarshalBinary(again); err != nil || h2 != h {
			t.Fatalf("re-encoding changed the record: %v", err)
		}
	})
}

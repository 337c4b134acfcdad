package engine

import (
	"testing"
	"time"
)

// ReadyIn is the sooner of the pool's typical latency (a route at
// max_inflight frees a slot when a request ends) and the earliest
// cooldown's end, and unknown before either exists.
func TestReadyIn(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	e, err := New(Config{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := e.AddRoute(t0, RouteSpec{ID: id, MaxInflight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if d, ok := e.ReadyIn(t0); ok {
		t.Fatalf("ReadyIn = %v with nothing known, want unknown", d)
	}

	// The first answer sets the typical latency.
	if err := e.Feedback(t0, "a", "", Outcome{Class: OK, Latency: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if d, ok := e.ReadyIn(t0); !ok || d != 3*time.Second {
		t.Fatalf("ReadyIn = %v, %v; want the typical latency, 3s", d, ok)
	}

	// b cools for about its 10s base (jittered over the upper half, so at
	// least 5s); a cooldown ending sooner than the latency would win.
	for range 2 {
		if err := e.Feedback(t0, "b", "", Outcome{Class: ProxyConnectFailed}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := e.Route("b")
	if st.Health.State != Cooling {
		t.Fatalf("b is %v, want cooling", st.Health.State)
	}
	until := st.Health.UntilTime()
	if d, ok := e.ReadyIn(t0); !ok || d != 3*time.Second {
		t.Fatalf("ReadyIn = %v, %v; want 3s, sooner than b's cooldown (%v)", d, ok, until.Sub(t0))
	}
	late := until.Add(-time.Second)
	if d, ok := e.ReadyIn(late); !ok || d != time.Second {
		t.Fatalf("ReadyIn a second before b's cooldown ends = %v, %v; want 1s", d, ok)
	}
}

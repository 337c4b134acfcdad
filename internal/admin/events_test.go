package admin

import (
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func TestRecentEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		capacity int
		added    int // events r0, r1, … added in order
		limit    int
		want     string // routes of the events returned
	}{
		{"empty", 3, 0, 10, "[]"},
		{"partly full", 3, 2, 10, "[r1 r0]"},
		{"full", 3, 3, 10, "[r2 r1 r0]"},
		{"wrapped drops the oldest", 3, 5, 10, "[r4 r3 r2]"},
		{"limit", 3, 5, 2, "[r4 r3]"},
		{"capacity one", 1, 4, 10, "[r3]"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			r := newRecentEvents(tc.capacity)
			for i := range tc.added {
				r.add(engine.Event{Kind: engine.EventState, Route: fmt.Sprintf("r%d", i)})
			}
			var got []string
			for _, e := range r.newest(tc.limit) {
				got = append(got, e.Route)
			}
			if s := fmt.Sprint(got); s != tc.want {
				t.Errorf("newest(%d) = %s, want %s", tc.limit, s, tc.want)
			}
		})
	}
}

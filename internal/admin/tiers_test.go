package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// A target escalated to a costlier tier is listed by /api/targets with its
// reason and counted by /metrics, beside what the tiers spent.
func TestTargetTiers(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(-time.Second)
	f, list := newListFixture(t, "http://192.0.2.1:80\nhttp://192.0.2.2:80\nhttp://192.0.2.3:80 tier=1 price_per_request=0.5\n",
		engine.Config{Seed: 1, UncheckedCandidates: true}, at, Options{})
	e := f.e
	f.m.ObserveSpend(1, 0.5)
	f.m.ObserveSpend(1, 0.25)
	if _, err := e.Acquire(at, engine.Request{Target: "tickets.example"}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // the cheap tier refused at the site, a full window of answers
		if err := e.Feedback(at, list[i%2].ID, "tickets.example", engine.Outcome{Class: engine.Blocked}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitEvents(t, 3) // two pairs cooled, one tier event

	_, _, body := f.do(t, "GET", "/api/events?kind=tier", "")
	if !strings.Contains(string(body), `"from_tier":0,`) || !strings.Contains(string(body), `"to_tier":1`) || !strings.Contains(string(body), `"target":"tickets.example"`) {
		t.Errorf("GET /api/events?kind=tier: %s, want the move from tier 0 to 1", body)
	}

	var got struct {
		Tiers []tierJSON `json:"tiers"`
	}
	f.getJSON(t, "/api/targets", &got)
	if len(got.Tiers) != 1 || got.Tiers[0].Target != "tickets.example" || got.Tiers[0].Tier != 1 ||
		got.Tiers[0].Until == nil || !strings.Contains(got.Tiers[0].Reason, "blocked") {
		t.Fatalf("tiers %+v, want tickets.example on tier 1 with a reason and an end", got.Tiers)
	}
	_, _, body = f.do(t, "GET", "/metrics", "")
	for _, want := range []string{`switchyard_targets_escalated{tier="1"} 1`, `switchyard_spend_total{tier="1"} 0.75`} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

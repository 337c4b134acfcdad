package sim

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// recordedEngine is the engine policy with its users' attempts and its
// budget's answers recorded.
type recordedEngine struct {
	*enginePolicy
	picks    []recordedPick
	requests []time.Duration // client requests counted
	hedges   []time.Duration // hedges the budget granted
}

type recordedPick struct {
	at    time.Duration
	route int
}

func newRecordedEngine(t *testing.T, w World, s EngineSettings) *recordedEngine {
	t.Helper()
	p, err := NewEnginePolicy(w, s, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	return &recordedEngine{enginePolicy: p.(*enginePolicy)}
}

func (p *recordedEngine) Pick(now time.Time, target int, session string, avoid []int) (Attempt, bool) {
	a, ok := p.enginePolicy.Pick(now, target, session, avoid)
	if ok {
		p.picks = append(p.picks, recordedPick{at: now.Sub(Epoch), route: a.Route})
	}
	return a, ok
}

func (p *recordedEngine) Request(now time.Time) {
	p.requests = append(p.requests, now.Sub(Epoch))
	p.enginePolicy.Request(now)
}

func (p *recordedEngine) Hedge(now time.Time) bool {
	ok := p.enginePolicy.Hedge(now)
	if ok {
		p.hedges = append(p.hedges, now.Sub(Epoch))
	}
	return ok
}

// defaultEngine is the "switchyard" policy's settings for a scenario.
func defaultEngine(sc *Scenario) EngineSettings {
	s := EngineSettings{Budget: engine.DefaultBudget(), AttemptTimeout: sc.AttemptTimeout}
	s.Engine.Seed = sc.Seed
	return s
}

// TestBlackholeLeavesRotation: under the default engine, an exit that
// takes requests and never answers is out of rotation within 3 s of load
// when the client gives a request 3 s and the gateway would wait 30 s for
// an attempt: from then on it gets almost none of the users' attempts.
// TCP checks cannot tell (it accepts connections): only the deadlines and
// the clients' late cancels can.
func TestBlackholeLeavesRotation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc         string
		fast, silent int
		from         time.Duration // when the silent routes go silent
	}{
		{desc: "one of three", fast: 2, silent: 1},
		{desc: "ten of sixty", fast: 50, silent: 10},
		{desc: "half the pool, under load", fast: 15, silent: 15, from: 8 * time.Second},
	}
	for _, tt := range tests {
		for _, seed := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/seed %d", tt.desc, seed), func(t *testing.T) {
				t.Parallel()
				src := fmt.Sprintf(`duration = "15s"
seed = %d
workers = 16
client_timeout = "3s"
attempt_timeout = "30s"
[[targets]]
name = "shop"
weight = 2
[[targets]]
name = "news"
[[routes]]
name = "fast"
count = %d
latency = "150ms"
[[routes]]
name = "silent"
count = %d
latency = "150ms"
[[routes.behaviours]]
kind = "blackhole"
from = "%s"
`, seed, tt.fast, tt.silent, tt.from)
				sc, err := ParseScenario("blackhole.toml", []byte(src))
				if err != nil {
					t.Fatal(err)
				}
				w := sc.World()
				p := newRecordedEngine(t, w, defaultEngine(sc))
				Run(w, p, sc.load(), nil)
				out := tt.from + 3*time.Second
				var before, after, total int
				for _, pk := range p.picks {
					silent := pk.route >= tt.fast
					switch {
					case pk.at < tt.from:
					case pk.at < out:
						if silent {
							before++
						}
					default:
						total++
						if silent {
							after++
						}
					}
				}
				if before == 0 {
					t.Fatalf("the silent routes got no attempt in the first 3 s: nothing to detect")
				}
				if share := float64(after) / float64(total); share > 0.01 {
					t.Errorf("from %v on, the silent routes got %d of %d attempts (%.2f%%), want under 1%%", out, after, total, 100*share)
				}
			})
		}
	}
}

// TestEngineCancelAfterDeadline: a client's cancel reaches the engine as
// proxy_timeout when the attempt had passed its lease's deadline, and as
// canceled, no evidence, before it (Lease.Canceled;
// docs/design/007-attempts.md).
func TestEngineCancelAfterDeadline(t *testing.T) {
	t.Parallel()
	w := scriptWorld{okIn(100 * ms), okIn(100 * ms)}
	tests := []struct {
		desc    string
		warm    bool // the target's answer times are known: the deadline is short
		elapsed func(deadline time.Duration) time.Duration
		want    engine.Class
	}{
		{"before the deadline", true, func(d time.Duration) time.Duration { return d - ms }, engine.Canceled},
		{"at the deadline", true, func(d time.Duration) time.Duration { return d }, engine.ProxyTimeout},
		{"after the deadline", true, func(d time.Duration) time.Duration { return 3 * d }, engine.ProxyTimeout},
		{"nothing known: the deadline is the attempt timeout", false, func(time.Duration) time.Duration { return 3 * time.Second }, engine.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := newRecordedEngine(t, w, EngineSettings{Engine: engine.Config{Seed: 1}, Budget: engine.DefaultBudget(), AttemptTimeout: 30 * time.Second})
			now := Epoch
			if tt.warm {
				for range 40 {
					a, ok := p.Pick(now, 0, "", nil)
					if !ok {
						t.Fatal("no route")
					}
					now = now.Add(100 * ms)
					p.Report(now, a.Ticket, okIn(100*ms))
				}
			}
			events := p.e.Subscribe(16, engine.EventOutcome)
			a, ok := p.Pick(now, 0, "", nil)
			if !ok {
				t.Fatal("no route")
			}
			deadline := p.leases[a.Ticket].Deadline
			if tt.warm != (deadline < time.Duration(float64(30*time.Second)*0.5)) {
				t.Fatalf("lease deadline %v", deadline)
			}
			elapsed := tt.elapsed(deadline)
			p.Report(now.Add(elapsed), a.Ticket, Result{Class: engine.Canceled, Latency: elapsed})
			got := events.Poll(nil)
			if len(got) != 1 || got[0].Class != tt.want || got[0].Route != w.RouteID(a.Route) {
				t.Fatalf("a cancel after %v with a %v deadline: engine saw %+v, want one %v", elapsed, deadline, got, tt.want)
			}
		})
	}
}

// TestEngineHedgeBudget: with the engine's own deadlines and hedge delays
// on a pool with a long latency tail, hedges go out, every one of them
// granted by the gateway's budget, which never lets them beyond its share
// of the last 10 s of requests.
func TestEngineHedgeBudget(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario("tail.toml", []byte(`duration = "30s"
workers = 16
[[targets]]
name = "shop"
[[routes]]
name = "tail"
count = 20
latency = "200ms"
jitter = 0.9
`))
	if err != nil {
		t.Fatal(err)
	}
	w := sc.World()
	settings := defaultEngine(sc)
	p := newRecordedEngine(t, w, settings)
	s := Run(w, p, sc.load(), nil)
	if len(p.hedges) == 0 {
		t.Fatal("no hedge granted: nothing tested")
	}
	if s.Hedges > len(p.hedges) {
		t.Errorf("%d hedges made, %d granted", s.Hedges, len(p.hedges))
	}
	// The budget's window: the requests and hedges of the last ten whole
	// seconds, this one included.
	window := func(at time.Duration, of []time.Duration) (n int) {
		sec := at / time.Second
		for _, x := range of {
			if x <= at && sec-x/time.Second < 10 {
				n++
			}
		}
		return n
	}
	for _, at := range p.hedges {
		hedges, requests := window(at, p.hedges), window(at, p.requests)
		if limit := math.Floor(settings.Budget.HedgeRatio * float64(requests)); float64(hedges) > limit {
			t.Fatalf("at %v: %d hedges in the window of %d requests, over the %g share", at, hedges, requests, settings.Budget.HedgeRatio)
		}
	}
	if limit := 2 * settings.Budget.HedgeRatio * float64(len(p.requests)); float64(s.Hedges) > limit {
		t.Errorf("%d hedges for %d requests over the run", s.Hedges, len(p.requests))
	}
}

package sim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// fakeWorld has routes 0..n-1; the first dead ones refuse connections
// from deadFrom on, and route n-1 is banned on target 1.
type fakeWorld struct {
	n, dead  int
	deadFrom time.Duration
}

func (f fakeWorld) Routes() int             { return f.n }
func (f fakeWorld) Targets() int            { return 2 }
func (f fakeWorld) RouteID(r int) string    { return "r" + string(rune('a'+r)) }
func (f fakeWorld) TargetName(t int) string { return []string{"a.example", "b.example"}[t] }
func (f fakeWorld) Bad(r, t int, now time.Duration) bool {
	return (r < f.dead && now >= f.deadFrom) || (r == f.n-1 && t == 1)
}
func (f fakeWorld) Attempt(r, t int, now time.Duration, rng *rand.Rand) Result {
	switch {
	case r < f.dead && now >= f.deadFrom:
		return Result{Class: engine.ProxyConnectFailed, Latency: 2 * time.Millisecond}
	case r == f.n-1 && t == 1:
		return Result{Class: engine.Blocked, Latency: 50 * time.Millisecond}
	}
	return Result{Class: engine.OK, Latency: time.Duration(80+rng.IntN(40)) * time.Millisecond}
}
func (f fakeWorld) Check(r int, now time.Duration) Result {
	if r < f.dead && now >= f.deadFrom {
		return Result{Class: engine.ProxyConnectFailed, Latency: 2 * time.Millisecond}
	}
	return Result{Class: engine.OK, Latency: time.Millisecond}
}
func (f fakeWorld) Faults() []Fault {
	var dead []int
	for r := range f.dead {
		dead = append(dead, r)
	}
	return []Fault{
		{Name: "dead", Routes: dead, Target: -1, Start: f.deadFrom},
		{Name: "ban", Routes: []int{f.n - 1}, Target: 1},
	}
}

func testLoad() Load {
	return Load{Seed: 3, Tasks: 4000, Workers: 8, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
		ClientTimeout: 10 * time.Second, ClientAttempts: 1, TaskDeadline: 30 * time.Second}
}

func newTestEngine(t *testing.T, w World, cfg engine.Config, blind bool) Policy {
	t.Helper()
	cfg.Seed = 7
	p, err := NewEnginePolicy(w, EngineSettings{Engine: cfg, Budget: engine.DefaultBudget(), AttemptTimeout: testLoad().AttemptTimeout, Blind: blind}, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunIsDeterministic(t *testing.T) {
	t.Parallel()
	w := fakeWorld{n: 10, dead: 3, deadFrom: 10 * time.Second}
	a := Run(w, newTestEngine(t, w, engine.Config{}, false), testLoad(), nil)
	b := Run(w, newTestEngine(t, w, engine.Config{}, false), testLoad(), nil)
	a.AttemptsPerSecond, b.AttemptsPerSecond = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different runs:\n%+v\n%+v", a, b)
	}
}

func TestRunMeasures(t *testing.T) {
	t.Parallel()
	w := fakeWorld{n: 10, dead: 3, deadFrom: 10 * time.Second}
	load := testLoad()
	sw := Run(w, newTestEngine(t, w, engine.Config{}, false), load, nil)
	rr := Run(w, newTestEngine(t, w, engine.Config{Picker: &engine.RoundRobin{}}, true), load, nil)
	for _, s := range []Summary{sw, rr} {
		if s.Tasks != load.Tasks || s.Completed > s.Tasks || s.Attempts < s.Completed {
			t.Fatalf("inconsistent counts: %+v", s)
		}
		if s.P50ms <= 0 || s.P50ms > s.P95ms || s.P95ms > s.P99ms {
			t.Errorf("percentiles %v %v %v", s.P50ms, s.P95ms, s.P99ms)
		}
		if len(s.Series) == 0 {
			t.Error("no series")
		}
	}
	if !(sw.WastedAttempts*3 < rr.WastedAttempts) {
		t.Errorf("wasted: engine %d, round-robin %d", sw.WastedAttempts, rr.WastedAttempts)
	}
	if !(sw.AttemptsPerCompleted < rr.AttemptsPerCompleted) {
		t.Errorf("attempts per task: engine %.3f, round-robin %.3f", sw.AttemptsPerCompleted, rr.AttemptsPerCompleted)
	}
	if sw.DetectMs < 0 || sw.DetectMs > 20000 {
		t.Errorf("engine detect %v ms", sw.DetectMs)
	}
	if rr.DetectMs >= 0 {
		t.Errorf("round-robin detected the dead routes in %v ms", rr.DetectMs)
	}
}

func TestEventQueueOrder(t *testing.T) {
	t.Parallel()
	var q eventQueue
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 500 {
		q.push(event{at: time.Duration(rng.IntN(50)), worker: i})
	}
	var last event
	for i := 0; len(q.items) > 0; i++ {
		ev := q.pop()
		if i > 0 && (ev.at < last.at || (ev.at == last.at && ev.seq < last.seq)) {
			t.Fatalf("event %+v after %+v", ev, last)
		}
		last = ev
	}
}

func TestRunSessions(t *testing.T) {
	t.Parallel()
	w := fakeWorld{n: 10, dead: 3, deadFrom: 10 * time.Second}
	load := testLoad()
	load.SessionTasks = 5
	s := Run(w, newTestEngine(t, w, engine.Config{MaxRemovedShare: -1}, false), load, nil)
	// Sessions bound to the routes that die must restart; the rest keep
	// their exit.
	if s.SessionRestarts == 0 || s.SessionRestarts > load.Tasks/load.SessionTasks {
		t.Fatalf("%d session restarts for %d sessions", s.SessionRestarts, load.Tasks/load.SessionTasks)
	}
	if s.CompletionRate < 0.99 {
		t.Fatalf("completion %.3f with sessions", s.CompletionRate)
	}
}

// TestSeries: the plot's buckets cover the run and no more, the last cut
// short where the run ends, and their throughput adds up to the tasks
// completed.
func TestSeries(t *testing.T) {
	t.Parallel()
	w := fakeWorld{n: 10, dead: 3, deadFrom: 4 * time.Second}
	tests := []struct {
		desc   string
		load   func(*Load)
		wantAt []time.Duration // nil: only the last is checked, against the run's end
	}{
		{"a duration of whole buckets", func(l *Load) { l.Duration, l.Tasks = 15*time.Second, 0 },
			[]time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}},
		{"a duration ending mid-bucket", func(l *Load) { l.Duration, l.Tasks = 12*time.Second, 0 },
			[]time.Duration{5 * time.Second, 10 * time.Second, 12 * time.Second}},
		{"a task count", func(l *Load) { l.Tasks = 700 }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := testLoad()
			tt.load(&load)
			s := Run(w, newTestEngine(t, w, engine.Config{}, false), load, nil)
			var at []time.Duration
			completed, from := 0.0, time.Duration(0)
			for _, p := range s.Series {
				at = append(at, p.At)
				completed += p.Throughput * (p.At - from).Seconds()
				from = p.At
			}
			if tt.wantAt != nil && !slices.Equal(at, tt.wantAt) {
				t.Errorf("buckets end at %v, want %v", at, tt.wantAt)
			}
			if end := time.Duration(s.SimulatedSeconds * float64(time.Second)); (at[len(at)-1] - end).Abs() > time.Microsecond {
				t.Errorf("last bucket ends at %v, the run at %v", at[len(at)-1], end)
			}
			if math.Abs(completed-float64(s.Completed)) > 1e-6 {
				t.Errorf("the buckets' throughput adds up to %.3f tasks, %d completed", completed, s.Completed)
			}
		})
	}
}

// recorder records a policy's picks and probes, by route.
type recorder struct {
	Policy
	picks  map[int][]time.Duration // when the route was picked
	probes map[int][]probed
}

// probed is a probe a recorder saw go to the world.
type probed struct {
	at     time.Duration // when it was sent
	target int
	res    Result
}

func newRecorder(p Policy) *recorder {
	return &recorder{Policy: p, picks: map[int][]time.Duration{}, probes: map[int][]probed{}}
}

func (r *recorder) Pick(now time.Time, target int, session string, avoid []int) (Attempt, bool) {
	a, ok := r.Policy.Pick(now, target, session, avoid)
	if ok {
		r.picks[a.Route] = append(r.picks[a.Route], now.Sub(Epoch))
	}
	return a, ok
}

func (r *recorder) Tick(now time.Time, probe Prober) {
	r.Policy.Tick(now, func(route, target int, done func(time.Time, Result)) {
		probe(route, target, func(at time.Time, res Result) {
			r.probes[route] = append(r.probes[route], probed{now.Sub(Epoch), target, res})
			done(at, res)
		})
	})
}

// Routes that join the list mid-run are neither picked nor probed before
// they join, by any policy, and every policy takes them up once they have.
func TestRoutesJoinMidRun(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario("joins.toml", []byte(`
duration = "1m"
workers = 8
[[targets]]
name = "site.example"
[[routes]]
name = "old"
count = 4
latency = "400ms"
[[routes]]
name = "new"
count = 4
latency = "100ms"
joins = "20s"
`))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := sc.jobs(Options{Policies: PolicyNames()})
	if err != nil {
		t.Fatal(err)
	}
	const joins = 20 * time.Second
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			t.Parallel()
			w := sc.World()
			p, err := j.build(w)
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder(p)
			Run(w, rec, sc.load(), nil)
			used := 0
			for route := 4; route < 8; route++ {
				if picks := rec.picks[route]; len(picks) > 0 {
					used++
					if picks[0] < joins {
						t.Errorf("picked %s at %v, before it joined at %v", w.RouteID(route), picks[0], joins)
					}
				}
				if probes := rec.probes[route]; len(probes) > 0 && probes[0].at < joins {
					t.Errorf("probed %s at %v, before it joined at %v", w.RouteID(route), probes[0].at, joins)
				}
			}
			// glider's fastest keeps to the one exit that checked fastest.
			if want := 4; used < want && (j.name != "fastest" || used == 0) {
				t.Errorf("%d of the 4 new routes picked after they joined", used)
			}
		})
	}
}

// A blind baseline (round_robin, random) checks an exit as a plain
// rotator would, by a TCP connect, not the gateway's tunnel: the engine
// it runs on would otherwise keep the silent and 407 exits out for it.
func TestBlindBaselinesCheckByTCP(t *testing.T) {
	t.Parallel()
	sc, err := Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration = 30 * time.Second
	for _, blind := range []bool{true, false} {
		w := sc.World()
		p, err := NewEnginePolicy(w, EngineSettings{Engine: engine.Config{Seed: 1, Picker: &engine.RoundRobin{}}, Budget: engine.DefaultBudget(), AttemptTimeout: sc.AttemptTimeout, Blind: blind}, Epoch)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder(p)
		Run(w, rec, sc.load(), nil)
		tcp, neutral := 0, 0
		for _, probes := range rec.probes {
			for _, pr := range probes {
				switch pr.target {
				case tcpCheck:
					tcp++
				case NeutralTarget:
					neutral++
				}
			}
		}
		if blind && (tcp == 0 || neutral != 0) || !blind && (tcp != 0 || neutral == 0) {
			t.Errorf("blind %v: %d TCP checks and %d neutral probes of exits", blind, tcp, neutral)
		}
	}
}

// The engine's neutral probes without a probe URL are what the gateway's
// are (internal/probe): a tunnel asked of the exit, from the candidate
// check on, which a blackholed proxy never answers and one refusing the
// credentials answers 407. A silent or 407 exit takes none of users'
// traffic once any exit has passed its check.
func TestNeutralProbesAskForATunnel(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario("probes.toml", []byte(`
duration = "10m"
workers = 16
client_timeout = "3s"
[[targets]]
name = "site.example"
[[routes]]
name = "fast"
count = 2
latency = "100ms"
[[routes]]
name = "silent"
[[routes.behaviours]]
kind = "blackhole"
[[routes]]
name = "auth"
[[routes.behaviours]]
kind = "auth"
`))
	if err != nil {
		t.Fatal(err)
	}
	w := sc.World()
	p, err := NewEnginePolicy(w, EngineSettings{Engine: engine.Config{Seed: 7}, Budget: engine.DefaultBudget(), AttemptTimeout: sc.AttemptTimeout}, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(p)
	Run(w, rec, sc.load(), nil)
	// Until a fast exit's check has answered, no route is checked, and the
	// engine falls back to the candidates (a gateway just started).
	checked := Never
	for route := range 2 {
		for _, pr := range rec.probes[route] {
			if pr.target == NeutralTarget {
				checked = min(checked, pr.at+pr.res.Latency)
			}
		}
	}
	for route, want := range map[int]engine.Class{2: engine.ProxyTimeout, 3: engine.ProxyAuth} {
		id := w.RouteID(route)
		var probes []probed // neutral ones
		for _, pr := range rec.probes[route] {
			if pr.target == NeutralTarget {
				probes = append(probes, pr)
			}
		}
		if len(probes) < 2 {
			t.Fatalf("%s: %d neutral probes, want its candidate check and later ones", id, len(probes))
		}
		for _, pr := range probes {
			if pr.res.Class != want {
				t.Errorf("%s: neutral probe at %v: %v, want %v", id, pr.at, pr.res.Class, want)
			}
		}
		if picks := rec.picks[route]; len(picks) > 0 && picks[len(picks)-1] > checked {
			t.Errorf("%s picked at %v, after the fast exits' checks at %v: every probe of it failed, its candidate check first", id, picks, checked)
		}
	}
}

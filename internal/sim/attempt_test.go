package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// scriptWorld answers every attempt of route r with r's Result, whatever
// the target and the time. An exit answering proxy_connect_failed refuses
// TCP checks too; any other accepts them.
type scriptWorld []Result

func (w scriptWorld) Routes() int                                            { return len(w) }
func (w scriptWorld) Targets() int                                           { return 2 }
func (w scriptWorld) RouteID(r int) string                                   { return "s" + strconv.Itoa(r) }
func (w scriptWorld) TargetName(t int) string                                { return "t" + strconv.Itoa(t) }
func (w scriptWorld) Attempt(r, _ int, _ time.Duration, _ *rand.Rand) Result { return w[r] }
func (w scriptWorld) Bad(r, _ int, _ time.Duration) bool                     { return w[r].Class != engine.OK }
func (w scriptWorld) Faults() []Fault                                        { return nil }

func (w scriptWorld) Check(r int, _ time.Duration) Result {
	if w[r].Class == engine.ProxyConnectFailed {
		return w[r]
	}
	return Result{Class: engine.OK, Latency: time.Millisecond}
}

// Answers of the script worlds.
var (
	silent  = Result{Class: engine.ProxyTimeout, Latency: Never}
	refused = Result{Class: engine.ProxyConnectFailed, Latency: 3 * time.Millisecond}
)

func okIn(d time.Duration) Result      { return Result{Class: engine.OK, Latency: d} }
func errorIn(d time.Duration) Result   { return Result{Class: engine.Target5xx, Latency: d} }
func blockedIn(d time.Duration) Result { return Result{Class: engine.Blocked, Latency: d} }

// scriptPolicy sends the k-th attempt of a request (k from 0: as many
// routes as it avoids) to route k, with leases[k]'s deadline and hedge
// delay, and records what the runner does with its picks.
type scriptPolicy struct {
	leases []Attempt // by attempt number within a request; Route and Ticket are ignored
	// paced, when set, refuses a pick at now for target, saying when a
	// route will be ready: a gateway that paces.
	paced     func(now time.Duration, target int) (wait time.Duration, refuse bool)
	noRetry   bool // retry nothing (else the rule table decides)
	hedgeLeft int  // hedges the budget grants
	maxPicks  int  // when positive, a pick beyond this many panics: a runaway run
	// hold is how long a request may be held for a paced route in all
	// (pacedHolder: the gateway's pacing.learned_max_wait).
	hold time.Duration

	retryIn time.Duration
	picks   []scriptPick    // every Pick, refused ones included
	reports []scriptReport  // by ticket: what each attempt ended with
	asked   []time.Duration // when the budget was asked for a hedge
	granted int             // hedges it granted
}

type scriptPick struct {
	at      time.Duration
	target  int
	session string
	route   int // -1: refused
}

type scriptReport struct {
	at      time.Duration // 0 with done false: never reported
	route   int
	class   engine.Class
	latency time.Duration
	done    bool
}

var (
	_ Policy      = (*scriptPolicy)(nil)
	_ retrier     = (*scriptPolicy)(nil)
	_ hedger      = (*scriptPolicy)(nil)
	_ retryHinter = (*scriptPolicy)(nil)
	_ pacedHolder = (*scriptPolicy)(nil)
)

func (p *scriptPolicy) Pick(now time.Time, target int, session string, avoid []int) (Attempt, bool) {
	at := now.Sub(Epoch)
	if p.maxPicks > 0 && len(p.picks) >= p.maxPicks {
		panic("runaway run: " + strconv.Itoa(len(p.picks)) + " picks by " + at.String())
	}
	p.retryIn = 0
	if p.paced != nil {
		if wait, refuse := p.paced(at, target); refuse {
			p.retryIn = wait
			p.picks = append(p.picks, scriptPick{at: at, target: target, session: session, route: -1})
			return Attempt{}, false
		}
	}
	k := len(avoid)
	if k >= len(p.leases) {
		p.picks = append(p.picks, scriptPick{at: at, target: target, session: session, route: -1})
		return Attempt{}, false
	}
	a := p.leases[k]
	a.Route, a.Ticket = k, uint64(len(p.reports))
	p.picks = append(p.picks, scriptPick{at: at, target: target, session: session, route: k})
	p.reports = append(p.reports, scriptReport{route: k})
	return a, true
}

func (p *scriptPolicy) Report(now time.Time, ticket uint64, r Result) {
	got := &p.reports[ticket]
	if got.done {
		panic("attempt reported twice")
	}
	got.at, got.class, got.latency, got.done = now.Sub(Epoch), r.Class, r.Latency, true
}

func (p *scriptPolicy) Tick(time.Time, Prober) {}
func (p *scriptPolicy) RetryIn() time.Duration { return p.retryIn }
func (p *scriptPolicy) Request(time.Time)      {}

func (p *scriptPolicy) PacedHold() (wait, hold time.Duration) { return p.retryIn, p.hold }

// firstPicks is when the first n picks were made and the route each got
// (-1: refused).
func (p *scriptPolicy) firstPicks(n int) []scriptPick {
	var got []scriptPick
	for _, pk := range p.picks[:min(n, len(p.picks))] {
		got = append(got, scriptPick{at: pk.at, route: pk.route})
	}
	return got
}

func (p *scriptPolicy) Retry(_ time.Time, _ int, c engine.Class) bool {
	rules := engine.DefaultRules()
	return !p.noRetry && rules.Rule(c).Retry
}

func (p *scriptPolicy) Hedge(now time.Time) bool {
	p.asked = append(p.asked, now.Sub(Epoch))
	if p.hedgeLeft <= 0 {
		return false
	}
	p.hedgeLeft--
	p.granted++
	return true
}

// oneTask is a load of a single task from one worker, who thinks for an
// hour after it: the run goes on to end for the attempts still out.
func oneTask(end time.Duration) Load {
	return Load{Seed: 1, Duration: end, Workers: 1, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
		ClientTimeout: 2 * time.Second, ClientAttempts: 1, TaskDeadline: time.Minute, Think: time.Hour}
}

// rep is a report expected at at.
func rep(at time.Duration, route int, class engine.Class, latency time.Duration) scriptReport {
	return scriptReport{at: at, route: route, class: class, latency: latency, done: true}
}

const ms = time.Millisecond

// TestDeadlineCutAndRetry: an attempt silent past its lease's deadline is
// cut there as proxy_timeout and the request moves to another route,
// when one more attempt is allowed; otherwise the attempt runs on to its
// answer, the attempt timeout or the client's give-up (internal/gateway's
// attempt loop).
func TestDeadlineCutAndRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		world   scriptWorld
		leases  []Attempt
		load    func(*Load)
		noRetry bool
		want    []scriptReport // by ticket
		done    bool           // the task completed
		latency time.Duration  // its latency, when done
	}{
		{
			desc:   "silent past the deadline: cut and retried",
			world:  scriptWorld{silent, okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			want:   []scriptReport{rep(500*ms, 0, engine.ProxyTimeout, 500*ms), rep(600*ms, 1, engine.OK, 100*ms)},
			done:   true, latency: 600 * ms,
		},
		{
			desc:   "slow past the deadline: cut too, its late answer unheard",
			world:  scriptWorld{okIn(800 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			want:   []scriptReport{rep(500*ms, 0, engine.ProxyTimeout, 500*ms), rep(600*ms, 1, engine.OK, 100*ms)},
			done:   true, latency: 600 * ms,
		},
		{
			desc:   "each attempt has its own deadline",
			world:  scriptWorld{silent, silent, okIn(100 * ms)},
			leases: []Attempt{{Deadline: 300 * ms}, {Deadline: 400 * ms}, {}},
			want: []scriptReport{rep(300*ms, 0, engine.ProxyTimeout, 300*ms), rep(700*ms, 1, engine.ProxyTimeout, 400*ms),
				rep(800*ms, 2, engine.OK, 100*ms)},
			done: true, latency: 800 * ms,
		},
		{
			desc:   "an answer before the deadline is taken",
			world:  scriptWorld{okIn(400 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			want:   []scriptReport{rep(400*ms, 0, engine.OK, 400*ms)},
			done:   true, latency: 400 * ms,
		},
		{
			desc:   "a deadline beyond the attempt timeout is the timeout",
			world:  scriptWorld{silent, okIn(100 * ms)},
			leases: []Attempt{{Deadline: time.Minute}, {}},
			load:   func(l *Load) { l.AttemptTimeout = time.Second },
			want:   []scriptReport{rep(time.Second, 0, engine.ProxyTimeout, time.Second), rep(1100*ms, 1, engine.OK, 100*ms)},
			done:   true, latency: 1100 * ms,
		},
		{
			desc:   "no attempt left: the slow answer is waited for",
			world:  scriptWorld{okIn(800 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			load:   func(l *Load) { l.MaxAttempts = 1 },
			want:   []scriptReport{rep(800*ms, 0, engine.OK, 800*ms)},
			done:   true, latency: 800 * ms,
		},
		{
			desc:    "no retry allowed: silence runs on until the client gives up",
			world:   scriptWorld{silent, okIn(100 * ms)},
			leases:  []Attempt{{Deadline: 500 * ms}, {}},
			noRetry: true,
			want:    []scriptReport{rep(2*time.Second, 0, engine.Canceled, 2*time.Second)},
		},
		{
			desc:   "no retry allowed: silence runs on to the attempt timeout",
			world:  scriptWorld{silent, okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			load:   func(l *Load) { l.MaxAttempts, l.AttemptTimeout = 1, 1500*ms },
			want:   []scriptReport{rep(1500*ms, 0, engine.ProxyTimeout, 1500*ms)},
		},
		{
			desc:   "every route tried: the attempt is not cut",
			world:  scriptWorld{okIn(800 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			want:   []scriptReport{rep(800*ms, 0, engine.OK, 800*ms)},
			done:   true, latency: 800 * ms,
		},
		{
			desc:   "no route offered for the retry: the attempt is not cut",
			world:  scriptWorld{okIn(800 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}},
			want:   []scriptReport{rep(800*ms, 0, engine.OK, 800*ms)},
			done:   true, latency: 800 * ms,
		},
		{
			desc:   "no route offered after a failure: the request fails",
			world:  scriptWorld{errorIn(100 * ms), okIn(100 * ms)},
			leases: []Attempt{{}},
			load:   func(l *Load) { l.ClientAttempts = 2 },
			// The client asks again at once, not after a wait: the
			// gateway answered with the failure, not a refusal.
			want: []scriptReport{rep(100*ms, 0, engine.Target5xx, 100*ms), rep(200*ms, 0, engine.Target5xx, 100*ms)},
		},
		{
			desc:   "a session's request is never moved",
			world:  scriptWorld{okIn(800 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: 500 * ms}, {}},
			load:   func(l *Load) { l.SessionTasks = 1 },
			want:   []scriptReport{rep(800*ms, 0, engine.OK, 800*ms)},
			done:   true, latency: 800 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := oneTask(10 * time.Second)
			if tt.load != nil {
				tt.load(&load)
			}
			p := &scriptPolicy{leases: tt.leases, noRetry: tt.noRetry}
			s := Run(tt.world, p, load, nil)
			if !reflect.DeepEqual(p.reports, tt.want) {
				t.Errorf("reports\n%+v\nwant\n%+v", p.reports, tt.want)
			}
			if s.Tasks != 1 || (s.Completed == 1) != tt.done {
				t.Fatalf("%d tasks, %d completed; want 1 task, completed %v", s.Tasks, s.Completed, tt.done)
			}
			if tt.done && s.P50ms != float64(tt.latency/time.Millisecond) {
				t.Errorf("task latency %v ms, want %v", s.P50ms, tt.latency)
			}
			if tt.done && s.P50ms >= float64(load.ClientTimeout/time.Millisecond) {
				t.Errorf("task latency %v ms: not within the client's %v", s.P50ms, load.ClientTimeout)
			}
			if s.Attempts != len(tt.want) {
				t.Errorf("%d attempts counted, want %d", s.Attempts, len(tt.want))
			}
		})
	}
}

// TestHedging: a hedge starts at the first attempt's HedgeAfter and not
// before, only for a request whose first attempt is its only one, never
// for a session's request or without HedgeAfter, and only when the budget
// grants it; the first valid answer wins and the loser runs on to its own
// answer or deadline, and is reported.
func TestHedging(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		desc    string
		world   scriptWorld
		leases  []Attempt
		budget  int
		load    func(*Load)
		want    []scriptReport // by ticket
		picks   []time.Duration
		asked   int           // times the budget was asked
		hedges  int           // hedges counted in the summary
		latency time.Duration // of the task, which completes; 0: it fails
	}{
		{
			desc:   "the hedge wins; the loser answers later and is reported",
			world:  scriptWorld{okIn(2 * s), okIn(100 * ms)},
			leases: []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(2*s, 0, engine.OK, 2*s), rep(400*ms, 1, engine.OK, 100*ms)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: 400 * ms,
		},
		{
			desc:   "the loser runs on to its deadline",
			world:  scriptWorld{silent, okIn(100 * ms)},
			leases: []Attempt{{Deadline: s, HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(s, 0, engine.ProxyTimeout, s), rep(400*ms, 1, engine.OK, 100*ms)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: 400 * ms,
		},
		{
			desc:   "the loser runs on to the attempt timeout, past the client's",
			world:  scriptWorld{silent, okIn(100 * ms)},
			leases: []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(5*s, 0, engine.ProxyTimeout, 5*s), rep(400*ms, 1, engine.OK, 100*ms)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: 400 * ms,
		},
		{
			desc:   "the first attempt wins; the hedge is reported when it answers",
			world:  scriptWorld{okIn(500 * ms), okIn(s)},
			leases: []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(500*ms, 0, engine.OK, 500*ms), rep(1300*ms, 1, engine.OK, s)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: 500 * ms,
		},
		{
			desc:   "a failed hedge leaves the first attempt to answer",
			world:  scriptWorld{okIn(s), errorIn(50 * ms)},
			leases: []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(s, 0, engine.OK, s), rep(350*ms, 1, engine.Target5xx, 50*ms)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: s,
		},
		{
			desc:   "past its deadline beside a hedge, the first attempt is cut",
			world:  scriptWorld{silent, okIn(2 * s)},
			leases: []Attempt{{Deadline: s, HedgeAfter: 300 * ms}, {}},
			budget: 1,
			load:   func(l *Load) { l.ClientTimeout = 3 * s },
			want:   []scriptReport{rep(s, 0, engine.ProxyTimeout, s), rep(2300*ms, 1, engine.OK, 2*s)},
			picks:  []time.Duration{0, 300 * ms},
			asked:  1, hedges: 1, latency: 2300 * ms,
		},
		{
			desc:   "cut beside a hedge that then fails: the request moves on",
			world:  scriptWorld{silent, errorIn(1200 * ms), okIn(100 * ms)},
			leases: []Attempt{{Deadline: s, HedgeAfter: 300 * ms}, {}, {}},
			budget: 1,
			want: []scriptReport{rep(s, 0, engine.ProxyTimeout, s), rep(1500*ms, 1, engine.Target5xx, 1200*ms),
				rep(1600*ms, 2, engine.OK, 100*ms)},
			picks: []time.Duration{0, 300 * ms, 1500 * ms},
			asked: 1, hedges: 1, latency: 1600 * ms,
		},
		{
			desc:    "not before HedgeAfter: an answer in time needs no hedge",
			world:   scriptWorld{okIn(299 * ms), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget:  1,
			want:    []scriptReport{rep(299*ms, 0, engine.OK, 299*ms)},
			picks:   []time.Duration{0},
			latency: 299 * ms,
		},
		{
			desc:    "no HedgeAfter: no hedge",
			world:   scriptWorld{okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{}, {}},
			budget:  1,
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0},
			latency: s,
		},
		{
			desc:    "a session's request is not hedged",
			world:   scriptWorld{okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget:  1,
			load:    func(l *Load) { l.SessionTasks = 1 },
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0},
			latency: s,
		},
		{
			desc:    "one attempt allowed: no hedge",
			world:   scriptWorld{okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget:  1,
			load:    func(l *Load) { l.MaxAttempts = 1 },
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0},
			latency: s,
		},
		{
			desc:    "a hedge delay at the deadline: cut and retried, not hedged",
			world:   scriptWorld{silent, okIn(100 * ms)},
			leases:  []Attempt{{Deadline: 300 * ms, HedgeAfter: 300 * ms}, {}},
			budget:  1,
			want:    []scriptReport{rep(300*ms, 0, engine.ProxyTimeout, 300*ms), rep(400*ms, 1, engine.OK, 100*ms)},
			picks:   []time.Duration{0, 300 * ms},
			latency: 400 * ms,
		},
		{
			desc:    "the budget says no",
			world:   scriptWorld{okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}},
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0},
			asked:   1,
			latency: s,
		},
		{
			desc:    "no route left to hedge on: the budget is not asked",
			world:   scriptWorld{okIn(s)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget:  1,
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0},
			latency: s,
		},
		{
			desc:    "no route offered for the hedge: the first attempt goes on",
			world:   scriptWorld{okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}},
			budget:  1,
			want:    []scriptReport{rep(s, 0, engine.OK, s)},
			picks:   []time.Duration{0, 300 * ms},
			asked:   1,
			latency: s,
		},
		{
			desc:    "a retry is not hedged on its first attempt's delay",
			world:   scriptWorld{refused, okIn(s), okIn(100 * ms)},
			leases:  []Attempt{{HedgeAfter: 300 * ms}, {}, {}},
			budget:  1,
			want:    []scriptReport{rep(3*ms, 0, engine.ProxyConnectFailed, 3*ms), rep(1003*ms, 1, engine.OK, s)},
			picks:   []time.Duration{0, 3 * ms},
			latency: 1003 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := oneTask(10 * time.Second)
			if tt.load != nil {
				tt.load(&load)
			}
			p := &scriptPolicy{leases: tt.leases, hedgeLeft: tt.budget}
			s := Run(tt.world, p, load, nil)
			if !reflect.DeepEqual(p.reports, tt.want) {
				t.Errorf("reports\n%+v\nwant\n%+v", p.reports, tt.want)
			}
			var picks []time.Duration
			for _, pk := range p.picks {
				picks = append(picks, pk.at)
			}
			if !reflect.DeepEqual(picks, tt.picks) {
				t.Errorf("picks at %v, want %v", picks, tt.picks)
			}
			if len(p.asked) != tt.asked {
				t.Errorf("budget asked at %v, want %d times", p.asked, tt.asked)
			} else if tt.asked > 0 && p.asked[0] != tt.leases[0].HedgeAfter {
				t.Errorf("budget asked at %v, want at HedgeAfter %v", p.asked[0], tt.leases[0].HedgeAfter)
			}
			if s.Hedges != tt.hedges || s.Hedges > p.granted {
				t.Errorf("%d hedges counted, %d granted; want %d", s.Hedges, p.granted, tt.hedges)
			}
			if s.Attempts != len(tt.want) {
				t.Errorf("%d attempts counted, want %d", s.Attempts, len(tt.want))
			}
			if s.Tasks != 1 || (s.Completed == 1) != (tt.latency > 0) {
				t.Fatalf("%d tasks, %d completed; want 1 task, completed %v", s.Tasks, s.Completed, tt.latency > 0)
			}
			if tt.latency > 0 && s.P50ms != float64(tt.latency/time.Millisecond) {
				t.Errorf("task latency %v ms, want %v", s.P50ms, tt.latency)
			}
		})
	}
}

// TestClientGiveUp: at the client's timeout, or the task's deadline if
// sooner, every attempt of the request in flight is canceled and reported
// as canceled with its own elapsed time (the policy judges what that says,
// see TestEngineCancelAfterDeadline); the client then asks again while it
// has tries and time left.
func TestClientGiveUp(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		desc   string
		world  scriptWorld
		leases []Attempt
		budget int
		load   func(*Load)
		want   []scriptReport // by ticket
	}{
		{
			desc:   "a silent attempt is canceled at the client's timeout",
			world:  scriptWorld{silent},
			leases: []Attempt{{Deadline: 500 * ms}},
			want:   []scriptReport{rep(2*s, 0, engine.Canceled, 2*s)},
		},
		{
			desc:   "the hedge is canceled too, with its own elapsed time",
			world:  scriptWorld{silent, silent},
			leases: []Attempt{{HedgeAfter: 300 * ms}, {}},
			budget: 1,
			want:   []scriptReport{rep(2*s, 0, engine.Canceled, 2*s), rep(2*s, 1, engine.Canceled, 1700*ms)},
		},
		{
			desc:   "the client asks again",
			world:  scriptWorld{silent},
			leases: []Attempt{{}},
			load:   func(l *Load) { l.ClientAttempts = 2 },
			want:   []scriptReport{rep(2*s, 0, engine.Canceled, 2*s), rep(4*s, 0, engine.Canceled, 2*s)},
		},
		{
			desc:   "the task's deadline comes before the client's timeout",
			world:  scriptWorld{silent},
			leases: []Attempt{{}},
			load:   func(l *Load) { l.ClientAttempts, l.TaskDeadline = 3, 3*s },
			want:   []scriptReport{rep(2*s, 0, engine.Canceled, 2*s), rep(3*s, 0, engine.Canceled, s)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := oneTask(10 * time.Second)
			load.MaxAttempts = 2
			if tt.load != nil {
				tt.load(&load)
			}
			p := &scriptPolicy{leases: tt.leases, hedgeLeft: tt.budget, noRetry: true}
			sum := Run(tt.world, p, load, nil)
			if !reflect.DeepEqual(p.reports, tt.want) {
				t.Errorf("reports\n%+v\nwant\n%+v", p.reports, tt.want)
			}
			if sum.Tasks != 1 || sum.Completed != 0 {
				t.Errorf("%d tasks, %d completed; want one failed", sum.Tasks, sum.Completed)
			}
		})
	}
}

// TestParkedTasks: a request the policy refuses at once (a gateway that
// paces) sets its task aside for the wait it was given; the worker takes
// another task meanwhile instead of idling, and the task resumes once the
// wait is over, the refusal not counted as one of the client's tries. A
// wait past the task's deadline fails it at once.
func TestParkedTasks(t *testing.T) {
	t.Parallel()
	const s = time.Second
	// paced refuses target 0 before end, asking for wait.
	paced := func(end, wait time.Duration) func(time.Duration, int) (time.Duration, bool) {
		return func(at time.Duration, target int) (time.Duration, bool) { return wait, target == 0 && at < end }
	}
	tests := []struct {
		desc    string
		paced   func(time.Duration, int) (time.Duration, bool)
		wait    time.Duration
		world   World // nil: one route answering in 100ms
		load    func(*Load)
		resumed bool // refused tasks resume and complete
		idle    bool // the worker may wait: nothing else to do
	}{
		{desc: "set aside until the pacing ends", paced: paced(2*s, s), wait: s, resumed: true},
		{desc: "a long pacing: set aside again and again", paced: paced(4*s, s), wait: s, resumed: true},
		{desc: "a wait in whole seconds", paced: paced(2*s, 300*ms), wait: s, resumed: true},
		{desc: "the last tasks wait for those set aside", paced: paced(2*s, s), wait: s, resumed: true, idle: true,
			load: func(l *Load) { l.Tasks, l.TargetWeights = 3, []float64{1, 0} }},
		{desc: "a refusal is not a try", paced: paced(2*s, s), wait: s, resumed: true,
			world: &everyOther{scriptWorld: scriptWorld{okIn(50 * ms)}, fail: errorIn(50 * ms)},
			load:  func(l *Load) { l.MaxAttempts, l.ClientAttempts = 1, 2 }},
		{desc: "a wait past the task's deadline fails it", paced: paced(time.Hour, 2*s),
			load: func(l *Load) { l.TaskDeadline = 2 * s }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			// One worker; each task its own session, so that the policy
			// can tell tasks apart.
			load := Load{Seed: 1, Duration: 6 * s, Workers: 1, AttemptTimeout: 5 * s, MaxAttempts: 3,
				ClientTimeout: 2 * s, ClientAttempts: 1, TaskDeadline: time.Minute, SessionTasks: 1}
			if tt.load != nil {
				tt.load(&load)
			}
			p := &scriptPolicy{leases: []Attempt{{}}, paced: tt.paced}
			var w World = scriptWorld{okIn(100 * ms)}
			if tt.world != nil {
				w = tt.world
			}
			sum := Run(w, p, load, nil)

			refused := 0
			var lastDue, lastPick time.Duration
			waiting := time.Duration(math.MaxInt64) // the first due of the tasks never resumed
			for k, pk := range p.picks {
				// Every task takes 100ms and a refusal none: a worker that
				// never idles picks at least every 100ms.
				if gap := pk.at - lastPick; gap > 100*ms && !tt.idle {
					t.Errorf("no pick from %v to %v: the worker idled", lastPick, pk.at)
				}
				lastPick = pk.at
				if pk.route >= 0 {
					continue
				}
				refused++
				next := slices.IndexFunc(p.picks[k+1:], func(n scriptPick) bool { return n.session == pk.session })
				switch {
				case !tt.resumed && next >= 0:
					t.Fatalf("task %s refused at %v past its deadline, tried again at %v", pk.session, pk.at, p.picks[k+1+next].at)
				case !tt.resumed:
				case next < 0:
					waiting = min(waiting, pk.at+tt.wait)
				default:
					at, due := p.picks[k+1+next].at, pk.at+tt.wait
					if at < due {
						t.Errorf("task %s refused at %v resumed at %v, before %v", pk.session, pk.at, at, due)
					}
					lastDue = max(lastDue, due)
				}
			}
			// Tasks set aside resume in the order they come due: those
			// still waiting at the end came due last.
			if lastDue > waiting {
				t.Errorf("a task due at %v resumed while one due at %v never did", lastDue, waiting)
			}
			if refused == 0 {
				t.Fatal("no request refused")
			}
			failed := sum.Tasks - sum.Completed
			switch {
			case tt.resumed && failed != 0:
				t.Errorf("%d of %d tasks failed: a refusal must not use up the client's one try", failed, sum.Tasks)
			case !tt.resumed && failed != refused:
				t.Errorf("%d tasks failed, want the %d refused", failed, refused)
			}
			if load.Tasks > 0 && sum.Tasks != load.Tasks {
				t.Errorf("%d tasks ended, want %d", sum.Tasks, load.Tasks)
			}
			// A task's latency runs from its first try, set-aside time included.
			if tt.resumed && sum.P99ms < 1000 {
				t.Errorf("p99 %v ms: the set-aside time is not counted", sum.P99ms)
			}
		})
	}
}

// everyOther is a script world whose attempts fail with fail every other
// time, from the first.
type everyOther struct {
	scriptWorld
	fail Result
	n    int
}

func (w *everyOther) Attempt(r, target int, at time.Duration, rng *rand.Rand) Result {
	w.n++
	if w.n%2 == 1 {
		return w.fail
	}
	return w.scriptWorld.Attempt(r, target, at, rng)
}

// retimedPolicy is a scriptPolicy whose Provisional attempts learn their
// deadline at known: before it, Retime finds nothing.
type retimedPolicy struct {
	*scriptPolicy
	known    time.Duration
	deadline time.Duration
	looks    []time.Duration // when Retime was asked
}

func (p *retimedPolicy) Retime(now time.Time, _ uint64, _ time.Duration) time.Duration {
	at := now.Sub(Epoch)
	p.looks = append(p.looks, at)
	if at < p.known {
		return 0
	}
	return p.deadline
}

// TestProvisionalLook: an attempt leased before anything was known looks
// at its deadline again, as the gateway's does, 250 ms after it started,
// then twice as late each time nothing is known; once something is, the
// attempt has the deadline it would have had from its start, due at once
// if that has passed, and a silent route is cut there and retried.
func TestProvisionalLook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		first    Result // the first route's answer
		known    time.Duration
		deadline time.Duration
		looks    []time.Duration
		reports  []scriptReport
	}{
		{desc: "known at the third look, the deadline past: cut at once", first: silent, known: time.Second, deadline: 400 * ms,
			looks:   []time.Duration{250 * ms, 750 * ms, 1750 * ms},
			reports: []scriptReport{rep(1750*ms, 0, engine.ProxyTimeout, 1750*ms), rep(1850*ms, 1, engine.OK, 100*ms)}},
		{desc: "known at the first look, the deadline ahead: cut there", first: silent, known: 0, deadline: 600 * ms,
			looks:   []time.Duration{250 * ms},
			reports: []scriptReport{rep(600*ms, 0, engine.ProxyTimeout, 600*ms), rep(700*ms, 1, engine.OK, 100*ms)}},
		{desc: "an answer before the first look: no look", first: okIn(200 * ms), known: 0, deadline: 100 * ms,
			reports: []scriptReport{rep(200*ms, 0, engine.OK, 200*ms)}},
		{desc: "an answer after a look that set a later deadline", first: okIn(500 * ms), known: 0, deadline: time.Second,
			looks:   []time.Duration{250 * ms},
			reports: []scriptReport{rep(500*ms, 0, engine.OK, 500*ms)}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p := &retimedPolicy{scriptPolicy: &scriptPolicy{leases: []Attempt{{Provisional: true, Deadline: 5 * time.Second}, {}}},
				known: tt.known, deadline: tt.deadline}
			Run(scriptWorld{tt.first, okIn(100 * ms)}, p, oneTask(10*time.Second), nil)
			if fmt.Sprint(p.looks) != fmt.Sprint(tt.looks) {
				t.Errorf("looks at %v, want %v", p.looks, tt.looks)
			}
			if fmt.Sprint(p.reports) != fmt.Sprint(tt.reports) {
				t.Errorf("reports %v, want %v", p.reports, tt.reports)
			}
		})
	}
}

// TestRetriedRefusals: with RetryRefusals a refusal is the request's
// answer: it reaches the client a round trip later, counts as one of the
// client's tries, and the next try follows at once; a pool that refuses
// everything fails each task after its tries and never stalls the clock.
func TestRetriedRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		until time.Duration // refusals before then
		// the picks' times and whether each was refused, the first ones
		want []scriptPick
		// tasks failed, completed
		failed, completed int
	}{
		{desc: "a refusal, then a route: the second try carries it", until: 500 * time.Microsecond,
			want:   []scriptPick{{at: 0, route: -1}, {at: refusalRoundTrip}, {at: 100*ms + refusalRoundTrip}},
			failed: 0, completed: 9},
		{desc: "two refusals, then a route: the third try", until: 1500 * time.Microsecond,
			want:   []scriptPick{{at: 0, route: -1}, {at: refusalRoundTrip, route: -1}, {at: 2 * refusalRoundTrip}},
			failed: 0, completed: 9},
		{desc: "three refusals fail the task; the next one starts at once", until: 2500 * time.Microsecond,
			want:   []scriptPick{{at: 0, route: -1}, {at: refusalRoundTrip, route: -1}, {at: 2 * refusalRoundTrip, route: -1}, {at: 3 * refusalRoundTrip}},
			failed: 1, completed: 9},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := Load{Seed: 1, Duration: time.Second, Workers: 1, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
				ClientTimeout: 2 * time.Second, ClientAttempts: 3, TaskDeadline: time.Minute, RetryRefusals: true}
			p := &scriptPolicy{leases: []Attempt{{}},
				paced: func(at time.Duration, _ int) (time.Duration, bool) { return time.Second, at < tt.until }}
			sum := Run(scriptWorld{okIn(100 * ms)}, p, load, nil)
			if got := p.firstPicks(len(tt.want)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("picks %v, want %v", got, tt.want)
			}
			if failed := sum.Tasks - sum.Completed; failed != tt.failed || sum.Completed != tt.completed {
				t.Errorf("%d tasks failed and %d completed, want %d and %d", failed, sum.Completed, tt.failed, tt.completed)
			}
		})
	}

	t.Run("a pool that refuses everything", func(t *testing.T) {
		t.Parallel()
		load := Load{Seed: 1, Duration: time.Second, Workers: 2, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
			ClientTimeout: 2 * time.Second, ClientAttempts: 3, TaskDeadline: time.Minute, RetryRefusals: true}
		bound := int(load.Duration/refusalRoundTrip)*load.Workers + load.Workers
		p := &scriptPolicy{leases: []Attempt{{}}, maxPicks: bound,
			paced: func(time.Duration, int) (time.Duration, bool) { return time.Second, true }}
		sum := Run(scriptWorld{okIn(100 * ms)}, p, load, nil)
		if sum.SimulatedSeconds != 1 || sum.Attempts != 0 || sum.Completed != 0 {
			t.Errorf("summary %+v", sum)
		}
		// Each worker tries a round trip apart, three tries a task.
		if n := len(p.picks); n < bound-2*load.Workers || sum.Tasks < n/3-load.Workers || sum.Tasks > n/3 {
			t.Errorf("%d picks and %d tasks failed in %v, want about %d and a third of them", n, sum.Tasks, load.Duration, bound)
		}
	})
}

// TestHeldForPacedRoute: with a hold (the gateway's
// pacing.learned_max_wait), a request refused because every route is
// paced waits for the first to be ready and asks again, the same request,
// while the waits fit the hold in all; past it the client is refused and
// sets the task aside.
func TestHeldForPacedRoute(t *testing.T) {
	t.Parallel()
	const wait = 40 * ms
	tests := []struct {
		desc        string
		hold, until time.Duration // refusals before until
		want        []scriptPick  // the first picks: when, and whether refused
		setAside    bool          // the first task was set aside for a second
	}{
		{desc: "held until a route is ready", hold: 250 * ms, until: 100 * ms,
			want: []scriptPick{{at: 0, route: -1}, {at: wait, route: -1}, {at: 2 * wait, route: -1}, {at: 3 * wait}}},
		{desc: "refused once the waits would pass the hold: another task starts", hold: 100 * ms, until: 300 * ms,
			want:     []scriptPick{{at: 0, route: -1}, {at: wait, route: -1}, {at: 2 * wait, route: -1}, {at: 2*wait + refusalRoundTrip, route: -1}},
			setAside: true},
		{desc: "no hold: refused at once, another task starts once the refusal is in", hold: 0, until: 1,
			want: []scriptPick{{at: 0, route: -1}, {at: refusalRoundTrip}}, setAside: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := Load{Seed: 1, Duration: 3 * time.Second, Workers: 1, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
				ClientTimeout: 2 * time.Second, ClientAttempts: 1, TaskDeadline: time.Minute}
			p := &scriptPolicy{leases: []Attempt{{}}, hold: tt.hold,
				paced: func(at time.Duration, _ int) (time.Duration, bool) { return wait, at < tt.until }}
			sum := Run(scriptWorld{okIn(100 * ms)}, p, load, nil)
			if got := p.firstPicks(len(tt.want)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("picks %v, want %v", got, tt.want)
			}
			// A held task takes its waits and its answer; one set aside a
			// second and its Retry-After, at least.
			if sum.Tasks != sum.Completed || (sum.P99ms >= 1000) != tt.setAside || !tt.setAside && sum.P99ms > 220 {
				t.Errorf("%d of %d tasks completed, p99 %v ms; want all, set aside: %v", sum.Completed, sum.Tasks, sum.P99ms, tt.setAside)
			}
		})
	}
}

// TestRefusingEverything: a policy that refuses every request must not
// stall the virtual clock: the tasks set aside are bounded, and the run
// reaches its end.
func TestRefusingEverything(t *testing.T) {
	t.Parallel()
	const workers = 2
	load := Load{Seed: 1, Duration: 5 * time.Second, Workers: workers, AttemptTimeout: 5 * time.Second, MaxAttempts: 3,
		ClientTimeout: 2 * time.Second, ClientAttempts: 1, TaskDeadline: time.Minute}
	bound := (maxParkedPerWorker + 1) * workers * 7 // the capped pile, about once a second
	p := &scriptPolicy{leases: []Attempt{{}}, maxPicks: 2 * bound,
		paced: func(time.Duration, int) (time.Duration, bool) { return time.Second, true }}
	s := Run(scriptWorld{okIn(100 * ms)}, p, load, nil)
	if s.SimulatedSeconds != 5 || s.Attempts != 0 || s.Tasks != 0 {
		t.Errorf("summary %+v", s)
	}
	if last := p.picks[len(p.picks)-1].at; last < 4*time.Second || len(p.picks) > bound {
		t.Errorf("%d picks, the last at %v; want at most %d to the end", len(p.picks), last, bound)
	}
}

// TestExpiredTaskSendsNothing: a task set aside that comes due only after
// its deadline, every worker having been busy meanwhile, fails when a
// worker takes it, with no request: sent, it would spend an exit's turn on
// a page the crawler has given up on, and its client's timeout, set by the
// deadline, would fall before the request began (a cancel reported with a
// negative latency, the clock sent back).
func TestExpiredTaskSendsNothing(t *testing.T) {
	t.Parallel()
	const workers = 20
	load := Load{Seed: 1, Duration: 5 * time.Second, Workers: workers, AttemptTimeout: 10 * time.Second, MaxAttempts: 1,
		ClientTimeout: 10 * time.Second, ClientAttempts: 1, TaskDeadline: 2 * time.Second, SessionTasks: 1}
	// Every worker's first pick is refused for a second: its task, due at
	// 1 s, is to be done by 2 s. The next tasks hold the workers to their
	// own deadlines, just past 2 s; the first ones have expired by then.
	p := &scriptPolicy{leases: []Attempt{{}}, maxPicks: 1 << 16,
		paced: func(now time.Duration, _ int) (time.Duration, bool) { return time.Second, now == 0 }}
	s := Run(scriptWorld{okIn(5 * time.Second)}, p, load, nil)
	refused := 0
	for k, pk := range p.picks {
		if pk.route >= 0 {
			continue
		}
		refused++
		if again := slices.IndexFunc(p.picks[k+1:], func(n scriptPick) bool { return n.session == pk.session }); again >= 0 {
			t.Errorf("task %s refused at %v, expired at 2s, sent at %v", pk.session, pk.at, p.picks[k+1+again].at)
		}
	}
	if refused != workers || s.Tasks-s.Completed < workers {
		t.Errorf("%d picks refused, %d of %d tasks failed; want %d refused and failed", refused, s.Tasks-s.Completed, s.Tasks, workers)
	}
	for k, rep := range p.reports {
		if rep.done && rep.latency < 0 {
			t.Errorf("attempt %d ended %v after %v at %v", k, rep.class, rep.latency, rep.at)
		}
	}
}

// TestReservedAttemptWaitsItsDelay: an attempt whose lease reserved a
// route's next token (Attempt.Delay) is sent once the delay has passed,
// as the gateway sends it; one whose request ends first is never sent,
// and its lease is canceled when the token comes.
func TestReservedAttemptWaitsItsDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc          string
		clientTimeout time.Duration
		want          scriptReport
	}{
		{"sent after the delay", 2 * time.Second, rep(140*ms, 0, engine.OK, 100*ms)},
		{"the client gives up first", 20 * ms, rep(40*ms, 0, engine.Canceled, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			load := oneTask(time.Second)
			load.ClientTimeout = tt.clientTimeout
			p := &scriptPolicy{leases: []Attempt{{Delay: 40 * ms}}, maxPicks: 10}
			Run(scriptWorld{okIn(100 * ms)}, p, load, nil)
			if len(p.reports) != 1 || p.reports[0] != tt.want {
				t.Errorf("reports %+v, want [%+v]", p.reports, tt.want)
			}
		})
	}
}

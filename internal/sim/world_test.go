package sim

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// wtTargets are the targets of the worlds below: shop is 0, news is 1.
const wtTargets = `tasks = 1
attempt_timeout = "10s"
[[targets]]
name = "shop"
[[targets]]
name = "news"
`

const (
	wtShop = 0
	wtNews = 1
)

// wtWorld builds the world of wtTargets plus routes.
func wtWorld(t *testing.T, routes string) World {
	t.Helper()
	s, err := ParseScenario("world.toml", []byte(wtTargets+routes))
	if err != nil {
		t.Fatal(err)
	}
	return s.World()
}

func wtRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func TestAttemptClasses(t *testing.T) {
	t.Parallel()
	const n = 4000
	tests := []struct {
		desc        string
		behaviours  string // of one route with latency 100ms and no jitter
		target      int
		at          time.Duration
		want        engine.Class
		wantPage    Page          // NoPage: not checked
		wantLatency time.Duration // 0: not checked
		share       float64       // of attempts answering want; 0: all of them
	}{
		{desc: "healthy", target: wtShop, want: engine.OK, wantPage: OwnPage, wantLatency: 100 * time.Millisecond},
		{desc: "dead refuses fast", behaviours: "kind = 'dead'", target: wtShop, want: engine.ProxyConnectFailed, wantLatency: 3 * time.Millisecond},
		{desc: "dead refuses neutral probes", behaviours: "kind = 'dead'", target: NeutralTarget, want: engine.ProxyConnectFailed},
		{desc: "dead on one target only", behaviours: "kind = 'dead'\ntarget = 'shop'", target: wtNews, want: engine.OK},
		{desc: "dead on one target is not the exit's", behaviours: "kind = 'dead'\ntarget = 'shop'", target: NeutralTarget, want: engine.OK},
		{desc: "blackhole never answers", behaviours: "kind = 'blackhole'", target: wtNews, want: engine.ProxyTimeout, wantLatency: Never},
		{desc: "auth answers 407 fast", behaviours: "kind = 'auth'", target: wtShop, want: engine.ProxyAuth, wantLatency: 20 * time.Millisecond},
		{desc: "ban blocks its target", behaviours: "kind = 'ban'\ntarget = 'shop'", target: wtShop, want: engine.Blocked, wantLatency: 100 * time.Millisecond},
		{desc: "ban spares other targets", behaviours: "kind = 'ban'\ntarget = 'shop'", target: wtNews, want: engine.OK},
		// A soft ban is a 200 whose page the gateway's judge reads (runner.judge).
		{desc: "softban defaults to always", behaviours: "kind = 'softban'", target: wtNews, want: engine.OK, wantPage: DecoyPage},
		{desc: "softban with p", behaviours: "kind = 'softban'\np = 0.25", target: wtShop, want: engine.OK, wantPage: DecoyPage, share: 0.25},
		{desc: "errors with p", behaviours: "kind = 'errors'\np = 0.3", target: wtShop, want: engine.Target5xx, share: 0.3},
		{desc: "slow multiplies latency", behaviours: "kind = 'slow'\nfactor = 3", target: wtShop, want: engine.OK, wantLatency: 300 * time.Millisecond},
		{desc: "slow beyond the timeout answers late", behaviours: "kind = 'slow'\nfactor = 200", target: wtShop, want: engine.OK, wantLatency: 20 * time.Second},
		{desc: "outage before its window", behaviours: "kind = 'outage'\nfrom = '1m'\nuntil = '2m'", at: 59 * time.Second, target: wtShop, want: engine.OK},
		{desc: "outage in its window", behaviours: "kind = 'outage'\nfrom = '1m'\nuntil = '2m'", at: time.Minute, target: wtShop, want: engine.ProxyConnectFailed},
		{desc: "outage after its window", behaviours: "kind = 'outage'\nfrom = '1m'\nuntil = '2m'", at: 2 * time.Minute, target: wtShop, want: engine.OK},
		{desc: "refusing beats blackhole", behaviours: "kind = 'blackhole'\n[[routes.behaviours]]\nkind = 'dead'", target: wtShop, want: engine.ProxyConnectFailed},
		{desc: "blackhole beats auth", behaviours: "kind = 'auth'\n[[routes.behaviours]]\nkind = 'blackhole'", target: wtShop, want: engine.ProxyTimeout},
		{desc: "exit before target", behaviours: "kind = 'ban'\ntarget = 'shop'\n[[routes.behaviours]]\nkind = 'auth'", target: wtShop, want: engine.ProxyAuth},
		{desc: "ban before errors", behaviours: "kind = 'errors'\np = 1\n[[routes.behaviours]]\nkind = 'ban'\ntarget = 'shop'", target: wtShop, want: engine.Blocked},
		{desc: "softban before errors", behaviours: "kind = 'errors'\np = 1\n[[routes.behaviours]]\nkind = 'softban'", target: wtShop, want: engine.OK, wantPage: DecoyPage},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes := "[[routes]]\nname = 'r'\nlatency = '100ms'\njitter = 0\n"
			if tt.behaviours != "" {
				routes += "[[routes.behaviours]]\n" + tt.behaviours + "\n"
			}
			w := wtWorld(t, routes)
			rng := wtRand()
			hits := 0
			for range n {
				r := w.Attempt(0, tt.target, tt.at, rng)
				if r.Class == tt.want && (tt.wantPage == NoPage || r.Page == tt.wantPage) {
					hits++
					if tt.wantLatency != 0 && r.Latency != tt.wantLatency {
						t.Fatalf("latency %v, want %v", r.Latency, tt.wantLatency)
					}
				} else if tt.share == 0 {
					t.Fatalf("Attempt = %+v, want class %v", r, tt.want)
				}
			}
			if got := float64(hits) / n; tt.share != 0 && (got < tt.share-0.03 || got > tt.share+0.03) {
				t.Errorf("share of %v %v = %.3f, want %.2f±0.03", tt.want, tt.wantPage, got, tt.share)
			}
		})
	}
}

func TestLatencyIsLognormalAroundTheMedian(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, "[[routes]]\nname = 'r'\nlatency = '200ms'\njitter = 0.3\n")
	rng := wtRand()
	var lat []time.Duration
	for range 4001 {
		r := w.Attempt(0, wtShop, 0, rng)
		if r.Class != engine.OK {
			t.Fatalf("Attempt = %+v, want ok", r)
		}
		lat = append(lat, r.Latency)
	}
	slices.Sort(lat)
	if median := lat[len(lat)/2]; median < 190*time.Millisecond || median > 210*time.Millisecond {
		t.Errorf("median latency %v, want 200ms±10ms", median)
	}
	// sigma 0.3: the 84th percentile is e^0.3 ≈ 1.35 times the median.
	if p84 := lat[len(lat)*84/100]; p84 < 255*time.Millisecond || p84 > 285*time.Millisecond {
		t.Errorf("84th percentile %v, want about 270ms", p84)
	}
}

func TestAttemptIsDeterministic(t *testing.T) {
	t.Parallel()
	s, err := Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	run := func() []Result {
		w, rng := s.World(), wtRand()
		var out []Result
		for i := range 5000 {
			now := time.Duration(i) * 10 * time.Millisecond
			out = append(out, w.Attempt(i%w.Routes(), i%w.Targets(), now, rng))
		}
		return out
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Error("two runs with the same seed differ")
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	const routes = `[[routes]]
name = "r"
count = 2
[[routes.behaviours]]
kind = "ratelimit"
target = "shop"
rps = 2
retry_after = "30s"
`
	type step struct {
		at    time.Duration
		route int
		tgt   int
		bad   bool // before the attempt
		want  engine.Class
		retry time.Duration
	}
	s := time.Second
	tests := []struct {
		desc  string
		steps []step
	}{
		{"trips above rps and recovers after retry_after", []step{
			{0, 0, wtShop, false, engine.OK, 0},
			{0, 0, wtShop, false, engine.OK, 0}, // a burst of one second's worth
			{0, 0, wtShop, false, engine.RateLimited, 30 * s},
			{10 * s, 0, wtShop, true, engine.RateLimited, 20 * s}, // penalized: even a slow pace is refused
			{30*s - 1, 0, wtShop, true, engine.RateLimited, 1},
			{30 * s, 0, wtShop, false, engine.OK, 0},
			{30 * s, 0, wtShop, false, engine.OK, 0},
		}},
		{"per route and per target", []step{
			{0, 0, wtShop, false, engine.OK, 0},
			{0, 0, wtShop, false, engine.OK, 0},
			{0, 0, wtShop, false, engine.RateLimited, 30 * s},
			{0, 0, wtShop, true, engine.RateLimited, 30 * s},
			{0, 1, wtShop, false, engine.OK, 0},
			{0, 0, wtNews, false, engine.OK, 0},
			{0, 0, NeutralTarget, false, engine.OK, 0},
		}},
		{"steady at rps never trips", func() []step {
			var steps []step
			for i := range 240 {
				steps = append(steps, step{time.Duration(i) * 500 * time.Millisecond, 0, wtShop, false, engine.OK, 0})
			}
			return steps
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w, rng := wtWorld(t, routes), wtRand()
			for i, st := range tt.steps {
				if bad := w.Bad(st.route, st.tgt, st.at); bad != st.bad {
					t.Fatalf("step %d: Bad = %v before the attempt, want %v", i, bad, st.bad)
				}
				r := w.Attempt(st.route, st.tgt, st.at, rng)
				if r.Class != st.want || r.RetryAfter != st.retry {
					t.Fatalf("step %d at %v: Attempt = %+v, want %v retry after %v", i, st.at, r, st.want, st.retry)
				}
			}
		})
	}
}

func TestBadDoesNotSpendTheRateLimit(t *testing.T) {
	t.Parallel()
	w, rng := wtWorld(t, "[[routes]]\nname = 'r'\n[[routes.behaviours]]\nkind = 'ratelimit'\ntarget = 'shop'\nrps = 1\n"), wtRand()
	for range 100 {
		if w.Bad(0, wtShop, 0) {
			t.Fatal("Bad before any attempt")
		}
	}
	if r := w.Attempt(0, wtShop, 0, rng); r.Class != engine.OK {
		t.Fatalf("first attempt after Bad calls = %+v, want ok", r)
	}
	if r := w.Attempt(0, wtShop, 0, rng); r.Class != engine.RateLimited {
		t.Fatalf("second attempt = %+v, want rate_limited", r)
	}
	if !w.Bad(0, wtShop, 29*time.Second) || w.Bad(0, wtShop, 30*time.Second) {
		t.Error("Bad does not follow the 30s penalty")
	}
}

func TestFlapPhases(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, "[[routes]]\nname = 'r'\njitter = 0\n[[routes.behaviours]]\nkind = 'flap'\nperiod = '30s'\nfrom = '10s'\nuntil = '160s'\n")
	rng := wtRand()
	s := time.Second
	tests := []struct {
		at   time.Duration
		down bool
	}{
		{0, false}, {10 * s, false}, {40*s - 1, false},
		{40 * s, true}, {70*s - 1, true},
		{70 * s, false}, {100 * s, true}, {130 * s, false},
		{159 * s, false}, {160 * s, false}, {200 * s, false},
	}
	for _, tt := range tests {
		for _, target := range []int{wtShop, NeutralTarget} {
			want := engine.OK
			if tt.down {
				want = engine.ProxyConnectFailed
			}
			if r := w.Attempt(0, target, tt.at, rng); r.Class != want {
				t.Errorf("at %v on target %d: %v, want %v", tt.at, target, r.Class, want)
			}
		}
	}
	var phases [][2]time.Duration
	for _, f := range w.Faults() {
		phases = append(phases, [2]time.Duration{f.Start, f.End})
	}
	if want := [][2]time.Duration{{40 * s, 70 * s}, {100 * s, 130 * s}}; !reflect.DeepEqual(phases, want) {
		t.Errorf("fault phases %v, want %v", phases, want)
	}
}

func TestFlapFaultsAreCapped(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, "[[routes]]\nname = 'r'\n[[routes.behaviours]]\nkind = 'flap'\nperiod = '1s'\n")
	faults := w.Faults()
	if len(faults) != maxFlapFaults {
		t.Fatalf("%d faults, want %d", len(faults), maxFlapFaults)
	}
	if last := faults[len(faults)-1]; last.Start != 199*time.Second || last.End != 200*time.Second {
		t.Errorf("last phase %v…%v, want 199s…200s", last.Start, last.End)
	}
}

func TestDegradeRamp(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, "[[routes]]\nname = 'r'\nlatency = '100ms'\njitter = 0\n[[routes.behaviours]]\nkind = 'degrade'\ntarget = 'shop'\nuntil = '100s'\nfactor = 5\np = 0.8\n")
	s := time.Second
	tests := []struct {
		at      time.Duration
		latency time.Duration // of successes
		failure float64       // share of target_timeout
		bad     bool
	}{
		{0, 100 * time.Millisecond, 0, false},
		{50 * s, 300 * time.Millisecond, 0.4, false},
		{62*s + 400*time.Millisecond, 349600 * time.Microsecond, 0.4992, false},
		{62*s + 600*time.Millisecond, 350400 * time.Microsecond, 0.5008, true},
		{75 * s, 400 * time.Millisecond, 0.6, true},
		{100 * s, 100 * time.Millisecond, 0, false},
	}
	for _, tt := range tests {
		rng := wtRand()
		fails := 0
		const n = 4000
		for range n {
			r := w.Attempt(0, wtShop, tt.at, rng)
			switch {
			case r.Latency == Never:
				fails++
			case r.Class != engine.OK || (r.Latency-tt.latency).Abs() > time.Microsecond:
				t.Fatalf("at %v: Attempt = %+v, want ok in %v or silence", tt.at, r, tt.latency)
			}
		}
		if got := float64(fails) / n; got < tt.failure-0.03 || got > tt.failure+0.03 {
			t.Errorf("at %v: failure share %.3f, want %.2f±0.03", tt.at, got, tt.failure)
		}
		if bad := w.Bad(0, wtShop, tt.at); bad != tt.bad {
			t.Errorf("at %v: Bad = %v, want %v", tt.at, bad, tt.bad)
		}
		if w.Bad(0, wtNews, tt.at) || w.Attempt(0, wtNews, tt.at, rng).Latency != 100*time.Millisecond {
			t.Errorf("at %v: degrade on shop touched news", tt.at)
		}
	}
	if f := w.Faults(); len(f) != 1 || f[0].Start != 62500*time.Millisecond || f[0].End != 100*s {
		t.Errorf("Faults = %+v, want one from 62.5s to 100s", f)
	}
}

func TestSiteDown(t *testing.T) {
	t.Parallel()
	const routes = `[[targets.down]]
from = "1m"
until = "2m"
[[targets.down]]
from = "5m"
class = "target_timeout"
[[routes]]
name = "good"
count = 3
[[routes]]
name = "slow"
count = 2
latency = "1s"
[[routes]]
name = "dead"
[[routes.behaviours]]
kind = "dead"
`
	tests := []struct {
		desc   string
		target int
		at     time.Duration
		want   engine.Class
	}{
		{"before", wtNews, 59 * time.Second, engine.OK},
		{"in the first window", wtNews, time.Minute, engine.Target5xx},
		{"after the first window", wtNews, 2 * time.Minute, engine.OK},
		{"in the open-ended window", wtNews, time.Hour, silence.Class},
		{"other target", wtShop, time.Minute, engine.OK},
		{"neutral probe", NeutralTarget, time.Minute, engine.OK},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w, rng := wtWorld(t, routes), wtRand()
			for route := range 5 {
				r := w.Attempt(route, tt.target, tt.at, rng)
				if r.Class != tt.want {
					t.Errorf("route %s: %v, want %v", w.RouteID(route), r.Class, tt.want)
				}
				if r.Class == silence.Class && r.Latency != Never {
					t.Errorf("route %s: a target down with timeouts answered in %v", w.RouteID(route), r.Latency)
				}
				if bad := w.Bad(route, tt.target, tt.at); bad != (tt.want != engine.OK) {
					t.Errorf("route %s: Bad = %v", w.RouteID(route), bad)
				}
			}
			if r := w.Attempt(5, tt.target, tt.at, rng); r.Class != engine.ProxyConnectFailed {
				t.Errorf("dead route: %v, want the exit's own failure first", r.Class)
			}
		})
	}
}

func TestNeutralTargetSeesOnlyTheExit(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, `[[routes]]
name = "site-trouble"
[[routes.behaviours]]
kind = "ban"
target = "shop"
[[routes.behaviours]]
kind = "ratelimit"
target = "shop"
rps = 0.001
[[routes.behaviours]]
kind = "errors"
p = 1
[[routes.behaviours]]
kind = "softban"
[[routes.behaviours]]
kind = "degrade"
until = "1h"
factor = 1000
p = 1
[[routes.behaviours]]
kind = "blackhole"
target = "shop"
[[routes]]
name = "exit-trouble"
[[routes.behaviours]]
kind = "auth"
`)
	rng := wtRand()
	for i := range 100 {
		at := time.Duration(i) * 30 * time.Second
		if r := w.Attempt(0, NeutralTarget, at, rng); r.Class != engine.OK || w.Bad(0, NeutralTarget, at) {
			t.Fatalf("at %v: neutral probe of site-trouble = %+v, want ok and not bad", at, r)
		}
		if r := w.Attempt(1, NeutralTarget, at, rng); r.Class != engine.ProxyAuth || !w.Bad(1, NeutralTarget, at) {
			t.Fatalf("at %v: neutral probe of exit-trouble = %+v, want proxy_auth and bad", at, r)
		}
	}
}

// TestBadAgreesWithAttempt walks deterministic behaviours over time: Bad
// must say fail exactly when Attempt fails, and not change what it says.
func TestBadAgreesWithAttempt(t *testing.T) {
	t.Parallel()
	const routes = `[[targets.down]]
from = "200s"
until = "230s"
[[routes]]
name = "healthy"
[[routes]]
name = "dead"
[[routes.behaviours]]
kind = "dead"
from = "20s"
until = "60s"
[[routes]]
name = "outage"
[[routes.behaviours]]
kind = "outage"
target = "shop"
from = "100s"
[[routes]]
name = "flap"
[[routes.behaviours]]
kind = "flap"
period = "25s"
[[routes]]
name = "blackhole"
[[routes.behaviours]]
kind = "blackhole"
until = "150s"
[[routes]]
name = "auth"
[[routes.behaviours]]
kind = "auth"
from = "50s"
[[routes]]
name = "ban"
[[routes.behaviours]]
kind = "ban"
target = "news"
from = "70s"
until = "250s"
[[routes]]
name = "crawl"
latency = "2s"
jitter = 0
[[routes.behaviours]]
kind = "slow"
factor = 10
from = "80s"
[[routes]]
name = "certain"
[[routes.behaviours]]
kind = "errors"
p = 1
from = "120s"
until = "180s"
`
	w, rng := wtWorld(t, routes), wtRand()
	for route := range w.Routes() {
		for _, target := range []int{wtShop, wtNews, NeutralTarget} {
			for at := time.Duration(0); at < 300*time.Second; at += 5 * time.Second {
				bad := w.Bad(route, target, at)
				if again := w.Bad(route, target, at); again != bad {
					t.Fatalf("%s at %v: Bad changed its answer", w.RouteID(route), at)
				}
				r := w.Attempt(route, target, at, rng)
				if failed := r.Class != engine.OK || r.Latency >= 10*time.Second; failed != bad {
					t.Errorf("%s on %s at %v: Attempt %v but Bad = %v", w.RouteID(route), w.TargetName(target), at, r.Class, bad)
				}
			}
		}
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	const routes = `[[targets.down]]
from = "3m"
until = "4m"
[[routes]]
name = "good"
count = 2
[[routes]]
name = "dead"
count = 2
[[routes.behaviours]]
kind = "dead"
from = "1m"
until = "2m"
[[routes.behaviours]]
kind = "slow"
factor = 2
[[routes]]
name = "picky"
[[routes.behaviours]]
kind = "errors"
p = 0.3
[[routes.behaviours]]
kind = "ratelimit"
target = "news"
rps = 1
[[routes.behaviours]]
kind = "ban"
target = "shop"
from = "30s"
[[routes.behaviours]]
kind = "auth"
target = "news"
[[routes]]
name = "sad"
count = 2
[[routes.behaviours]]
kind = "softban"
target = "news"
[[routes.behaviours]]
kind = "errors"
p = 0.5
until = "10m"
[[routes.behaviours]]
kind = "flap"
period = "1m"
from = "1m"
until = "4m30s"
[[routes]]
name = "crawl"
latency = "12s"
[[routes.behaviours]]
kind = "degrade"
from = "1m"
until = "2m"
factor = 3
p = 0.4
`
	w := wtWorld(t, routes)
	want := []Fault{
		{Name: "dead: dead", Routes: []int{2, 3}, Target: -1, Start: time.Minute, End: 2 * time.Minute},
		{Name: "picky: auth on news", Routes: []int{4}, Target: wtNews},
		{Name: "picky: ban on shop", Routes: []int{4}, Target: wtShop, Start: 30 * time.Second},
		{Name: "sad: flap down #1", Routes: []int{5, 6}, Target: -1, Start: 2 * time.Minute, End: 3 * time.Minute},
		{Name: "sad: flap down #2", Routes: []int{5, 6}, Target: -1, Start: 4 * time.Minute, End: 4*time.Minute + 30*time.Second},
		{Name: "sad: softban on news", Routes: []int{5, 6}, Target: wtNews},
		{Name: "sad: errors", Routes: []int{5, 6}, Target: -1, End: 10 * time.Minute},
		{Name: "crawl: slower than the attempt timeout", Routes: []int{7}, Target: -1},
		{Name: "crawl: degrade", Routes: []int{7}, Target: -1, Start: time.Minute, End: 2 * time.Minute},
		{Name: "news: down", Routes: []int{0, 1, 2, 3, 4, 5, 6, 7}, Target: wtNews, Start: 3 * time.Minute, End: 4 * time.Minute, SiteDown: true},
	}
	if got := w.Faults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Faults =\n%+v\nwant\n%+v", got, want)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	w := wtWorld(t, "[[routes]]\nname = 'solo'\n[[routes]]\nname = 'pool'\ncount = 3\n[[routes]]\nname = 'tail'\n")
	var ids []string
	for i := range w.Routes() {
		ids = append(ids, w.RouteID(i))
	}
	if want := []string{"solo", "pool-1", "pool-2", "pool-3", "tail"}; !slices.Equal(ids, want) {
		t.Errorf("route ids %v, want %v", ids, want)
	}
	if w.Targets() != 2 || w.TargetName(wtShop) != "shop" || w.TargetName(wtNews) != "news" || w.TargetName(NeutralTarget) != "neutral" {
		t.Errorf("targets %d: %q %q %q", w.Targets(), w.TargetName(0), w.TargetName(1), w.TargetName(NeutralTarget))
	}
}

func BenchmarkAttempt(b *testing.B) {
	s, err := Builtin("large")
	if err != nil {
		b.Fatal(err)
	}
	w, rng := s.World(), wtRand()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.Attempt(i%w.Routes(), i%w.Targets(), time.Duration(i)*time.Millisecond, rng)
		i++
	}
}

func TestBurstban(t *testing.T) {
	t.Parallel()
	const routes = `[[routes]]
name = "r"
count = 2
jitter = 0
[[routes.behaviours]]
kind = "burstban"
target = "shop"
limit = 3
window = "10s"
penalty = "1m"
`
	type step struct {
		at    time.Duration
		route int
		tgt   int
		bad   bool          // before the attempt
		wait  time.Duration // before the attempt: until a request would not earn a ban
		want  engine.Class
	}
	s := time.Second
	tests := []struct {
		desc  string
		steps []step
	}{
		{"the limit+1-th request in the window is banned for the penalty", []step{
			{0, 0, wtShop, false, 0, engine.OK},
			{1 * s, 0, wtShop, false, 0, engine.OK},
			{2 * s, 0, wtShop, false, 0, engine.OK},
			{9 * s, 0, wtShop, false, s, engine.Blocked},      // a fourth within 10s of the first
			{10 * s, 0, wtShop, true, 59 * s, engine.Blocked}, // banned: refused, and not counted
			{69*s - 1, 0, wtShop, true, 1, engine.Blocked},
			{69 * s, 0, wtShop, false, 0, engine.OK}, // the ban is over, the count starts afresh
			{70 * s, 0, wtShop, false, 0, engine.OK},
			{71 * s, 0, wtShop, false, 0, engine.OK},
			{79 * s, 0, wtShop, false, 0, engine.OK}, // the first of the three has left the window
		}},
		{"spaced out, never banned", func() []step {
			var steps []step
			for i := range 30 {
				steps = append(steps, step{time.Duration(i) * 3400 * time.Millisecond, 0, wtShop, false, 0, engine.OK})
			}
			return steps
		}()},
		{"per route and per target", []step{
			{0, 0, wtShop, false, 0, engine.OK},
			{0, 0, wtShop, false, 0, engine.OK},
			{0, 0, wtShop, false, 0, engine.OK},
			{0, 0, wtShop, false, 10 * s, engine.Blocked},
			{0, 0, wtShop, true, time.Minute, engine.Blocked},
			{0, 1, wtShop, false, 0, engine.OK},
			{0, 0, wtNews, false, 0, engine.OK},
			{0, 0, NeutralTarget, false, 0, engine.OK},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w, rng := wtWorld(t, routes), wtRand()
			truth := w.(groundTruth)
			for i, st := range tt.steps {
				if bad := w.Bad(st.route, st.tgt, st.at); bad != st.bad {
					t.Fatalf("step %d at %v: Bad = %v before the attempt, want %v", i, st.at, bad, st.bad)
				}
				if st.tgt != NeutralTarget {
					if wait := truth.Wait(st.route, st.tgt, st.at); wait != st.wait {
						t.Fatalf("step %d at %v: Wait = %v before the attempt, want %v", i, st.at, wait, st.wait)
					}
				}
				if r := w.Attempt(st.route, st.tgt, st.at, rng); r.Class != st.want {
					t.Fatalf("step %d at %v: Attempt = %+v, want %v", i, st.at, r, st.want)
				}
			}
			if f := w.Faults(); len(f) != 0 {
				t.Errorf("Faults = %+v: a burst ban trips under load, not on a schedule", f)
			}
		})
	}
}

func TestBurstbanPrecedence(t *testing.T) {
	t.Parallel()
	w, rng := wtWorld(t, `[[routes]]
name = "r"
[[routes.behaviours]]
kind = "ratelimit"
target = "shop"
rps = 100
[[routes.behaviours]]
kind = "burstban"
target = "shop"
limit = 1
window = "1m"
[[routes.behaviours]]
kind = "ban"
target = "news"
[[routes.behaviours]]
kind = "burstban"
target = "news"
limit = 1
window = "1m"
`), wtRand()
	for i, want := range []engine.Class{engine.OK, engine.Blocked, engine.Blocked} {
		if r := w.Attempt(0, wtShop, 0, rng); r.Class != want {
			t.Errorf("shop attempt %d: %v, want %v", i, r.Class, want)
		}
	}
	// A banned route is never counted toward its burst.
	for range 5 {
		w.Attempt(0, wtNews, 0, rng)
	}
	if w.(groundTruth).Wait(0, wtNews, 0) != 0 {
		t.Error("a ban's refusals counted toward the burst")
	}
}

// TestCheck: World.Check is a TCP connect to the exit: it fails only while
// the exit refuses connections; an exit that hangs or asks for
// credentials accepts the connection, and what sites do is no part of it.
func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc       string
		behaviours string
		at         time.Duration
		ok         bool
	}{
		{desc: "healthy", ok: true},
		{desc: "dead fails", behaviours: "kind = 'dead'"},
		{desc: "outage fails in its window", behaviours: "kind = 'outage'\nfrom = '1m'\nuntil = '2m'", at: 90 * time.Second},
		{desc: "outage passes after it", behaviours: "kind = 'outage'\nfrom = '1m'\nuntil = '2m'", at: 2 * time.Minute, ok: true},
		{desc: "flap fails when down", behaviours: "kind = 'flap'\nperiod = '30s'", at: 45 * time.Second},
		{desc: "flap passes when up", behaviours: "kind = 'flap'\nperiod = '30s'", at: 15 * time.Second, ok: true},
		{desc: "blackhole passes", behaviours: "kind = 'blackhole'", ok: true},
		{desc: "auth passes", behaviours: "kind = 'auth'", ok: true},
		{desc: "slow passes", behaviours: "kind = 'slow'\nfactor = 1000", ok: true},
		{desc: "dead on one site only passes", behaviours: "kind = 'dead'\ntarget = 'shop'", ok: true},
		{desc: "a ban passes", behaviours: "kind = 'ban'\ntarget = 'shop'", ok: true},
		{desc: "a burst ban passes", behaviours: "kind = 'burstban'\nlimit = 1\nwindow = '1m'", ok: true},
		{desc: "errors pass", behaviours: "kind = 'errors'\np = 1", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes := "[[routes]]\nname = 'r'\n"
			if tt.behaviours != "" {
				routes += "[[routes.behaviours]]\n" + tt.behaviours + "\n"
			}
			w := wtWorld(t, routes)
			for range 3 { // and again: a check changes nothing
				r := w.Check(0, tt.at)
				want := Result{Class: engine.OK, Latency: connectLatency}
				if !tt.ok {
					want = Result{Class: engine.ProxyConnectFailed, Latency: refusedLatency}
				}
				if r != want {
					t.Fatalf("Check = %+v, want %+v", r, want)
				}
			}
		})
	}
}

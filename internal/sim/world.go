package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Fixed latencies of answers that never reach a target.
const (
	refusedLatency    = 3 * time.Millisecond  // a refused connect costs one round trip to the exit
	connectLatency    = time.Millisecond      // a TCP connect the exit accepts
	proxyReplyLatency = 20 * time.Millisecond // the exit answers 407 itself
)

// maxFlapFaults caps the down phases Faults lists for one flap behaviour,
// as the World does not know how long the run lasts.
const maxFlapFaults = 100

// allTargets is the target number of a behaviour or fault that concerns
// every target.
const allTargets = -1

// World builds the ground truth of s. Every call returns a fresh model with
// its own rate-limit state, so each policy meets the same world. s must be
// valid (ParseScenario's result, or Validate passes).
func (s *Scenario) World() World {
	w := &scenarioWorld{timeout: s.AttemptTimeout}
	index := make(map[string]int, len(s.Targets))
	for i, t := range s.Targets {
		index[t.Name] = i
		w.targets = append(w.targets, worldTarget{name: t.Name, down: t.Down, identical: t.IdenticalPages})
	}
	for gi, g := range s.Routes {
		wg := worldGroup{name: g.Name, first: len(w.ids), count: g.Count, median: g.Latency, sigma: g.Jitter, maxInflight: g.MaxInflight, joins: g.Joins,
			tier: g.Tier, price: g.PricePerRequest}
		for r := range g.Count {
			w.ids = append(w.ids, routeID(g, r))
			w.groupOf = append(w.groupOf, int32(gi))
		}
		for _, b := range g.Behaviours {
			r := rule{Behaviour: b, target: allTargets}
			if b.Target != "" {
				r.target = index[b.Target]
			}
			spec, _ := specOf(b.Kind)
			switch {
			case b.Kind == KindSlow:
				wg.slow = append(wg.slow, r)
			case spec.exit:
				wg.exit = append(wg.exit, r)
			default:
				switch b.Kind {
				case KindRatelimit:
					r.buckets = make([]rateBucket, g.Count*len(s.Targets))
					for i := range r.buckets {
						r.buckets[i].tokens = r.capacity()
					}
				case KindBurstban:
					r.bursts = make([]burstLog, g.Count*len(s.Targets))
					for i := range r.bursts {
						r.bursts[i].times = make([]time.Duration, b.Limit+1)
					}
				}
				wg.target = append(wg.target, r)
			}
		}
		// Sorted by precedence, so the first active rule decides.
		slices.SortStableFunc(wg.exit, byPrecedence)
		slices.SortStableFunc(wg.target, byPrecedence)
		w.groups = append(w.groups, wg)
	}
	return w
}

// precedence orders the failing kinds within their stage: an exit that
// refuses connections never gets to hang or to ask for credentials, and a
// target that bans a route never gets to rate-limit it.
var precedence = []Kind{
	KindDead, KindOutage, KindFlap, KindBlackhole, KindAuth,
	KindBan, KindBurstban, KindRatelimit, KindSoftban, KindErrors, KindDegrade,
}

func byPrecedence(a, b rule) int {
	return slices.Index(precedence, a.Kind) - slices.Index(precedence, b.Kind)
}

// scenarioWorld is the World of a Scenario. All is immutable after World
// but the rate-limit buckets, which only Attempt changes.
type scenarioWorld struct {
	timeout time.Duration
	ids     []string
	groupOf []int32 // route → index in groups
	groups  []worldGroup
	targets []worldTarget
}

var _ World = (*scenarioWorld)(nil)

type worldGroup struct {
	name         string
	first, count int // routes first … first+count-1
	median       time.Duration
	sigma        float64
	maxInflight  int // the routes' max_inflight, for policies that honour it
	joins        time.Duration
	tier         int     // cost tier
	price        float64 // per attempt
	exit         []rule  // dead, outage, flap, blackhole, auth, by precedence
	slow         []rule
	target       []rule // ban, burstban, ratelimit, softban, errors, degrade, by precedence
}

type worldTarget struct {
	name      string
	down      []DownWindow
	identical bool // every URL is the same page (TargetSpec.IdenticalPages)
}

// rule is a Behaviour compiled for its group.
type rule struct {
	Behaviour
	target  int          // target number, or allTargets
	buckets []rateBucket // ratelimit: one per route of the group and target (route-first + count·target)
	bursts  []burstLog   // burstban: likewise
}

// state returns the index of route's state toward target in buckets or
// bursts: each route has its own limit on each site.
func (r *rule) state(g *worldGroup, route, target int) int { return route - g.first + g.count*target }

// burstLog remembers the times of a route's last Limit+1 requests to a
// site, and the ban they earned.
type burstLog struct {
	times  []time.Duration // ring of the last Limit+1 request times
	next   int             // the ring's oldest entry
	seen   int             // requests logged, up to len(times)
	banned time.Duration   // banned until then
}

// request logs a request at now and reports whether the site bans for it:
// it is the Limit+1-th within Window. A ban lasts Penalty; requests during
// it are refused and not logged.
func (b *burstLog) request(r *rule, now time.Duration) bool {
	if now < b.banned {
		return true
	}
	b.times[b.next] = now
	b.next = (b.next + 1) % len(b.times)
	b.seen = min(b.seen+1, len(b.times))
	// With the ring full, the entry after the newest is the oldest of the
	// last Limit+1 requests.
	if b.seen == len(b.times) && now-b.times[b.next] < r.Window {
		b.banned = now + r.Penalty
		b.seen = 0
		return true
	}
	return false
}

// wait is how long until a request at now would not earn a ban.
func (b *burstLog) wait(r *rule, now time.Duration) time.Duration {
	if now < b.banned {
		return b.banned - now
	}
	if b.seen < len(b.times)-1 {
		return 0
	}
	// The request would be the Limit+1-th unless the oldest of the last
	// Limit has left the window.
	oldest := b.times[(b.next+1)%len(b.times)]
	return max(oldest+r.Window-now, 0)
}

func (r *rule) appliesTo(target int) bool { return r.target == allTargets || r.target == target }

func (r *rule) active(now time.Duration) bool {
	return now >= r.From && (r.Until == 0 || now < r.Until)
}

// refusing reports whether an active dead, outage or flap rule refuses
// connections at now: flap is up for Period from From, then down for
// Period, and so on.
func (r *rule) refusing(now time.Duration) bool {
	return r.Kind != KindFlap || (now-r.From)/r.Period%2 == 1
}

// ramp is how far an active degrade rule has come, from 0 at From to 1 at
// Until.
func (r *rule) ramp(now time.Duration) float64 {
	return float64(now-r.From) / float64(r.Until-r.From)
}

// capacity is a ratelimit rule's burst: a second's worth, but at least one
// request so that rps below 1 still lets some through.
func (r *rule) capacity() float64 { return max(r.RPS, 1) }

// rateBucket is a token bucket of one route toward one target, refilled at
// RPS. Running dry penalizes the route for RetryAfter, during which every
// request is refused.
type rateBucket struct {
	tokens  float64
	last    time.Duration
	penalty time.Duration // rate limited until then
}

// take admits one request at now, or returns how long the route must wait.
func (b *rateBucket) take(r *rule, now time.Duration) (retryAfter time.Duration, limited bool) {
	if now < b.penalty {
		return b.penalty - now, true
	}
	b.refill(r, now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, false
	}
	b.penalty = now + r.RetryAfter
	return r.RetryAfter, true
}

func (b *rateBucket) refill(r *rule, now time.Duration) {
	if now > b.last {
		b.tokens = min(r.capacity(), b.tokens+r.RPS*(now-b.last).Seconds())
		b.last = now
	}
}

// wait is how long until take at now would admit a request, without
// taking one.
func (b *rateBucket) wait(r *rule, now time.Duration) time.Duration {
	if now < b.penalty {
		return b.penalty - now
	}
	tokens := b.tokens
	if now > b.last {
		tokens = min(r.capacity(), tokens+r.RPS*(now-b.last).Seconds())
	}
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / r.RPS * float64(time.Second))
}

func (w *scenarioWorld) Routes() int { return len(w.ids) }
func (w *scenarioWorld) JoinsAt(route int) time.Duration {
	return w.groups[w.groupOf[route]].joins
}
func (w *scenarioWorld) Targets() int             { return len(w.targets) }
func (w *scenarioWorld) RouteID(route int) string { return w.ids[route] }

func (w *scenarioWorld) TargetName(target int) string {
	if target == NeutralTarget {
		return "neutral"
	}
	return w.targets[target].name
}

// exitClass is the class the exit itself answers with at now, OK if it
// lets the request through.
func (g *worldGroup) exitClass(target int, now time.Duration) engine.Class {
	for i := range g.exit {
		r := &g.exit[i]
		if !r.appliesTo(target) || !r.active(now) {
			continue
		}
		switch r.Kind {
		case KindDead, KindOutage, KindFlap:
			if r.refusing(now) {
				return engine.ProxyConnectFailed
			}
		case KindBlackhole:
			return engine.ProxyTimeout
		case KindAuth:
			return engine.ProxyAuth
		}
	}
	return engine.OK
}

// multiplier is the factor slow and degrade rules put on latency at now.
func (g *worldGroup) multiplier(target int, now time.Duration) float64 {
	m := 1.0
	for i := range g.slow {
		if r := &g.slow[i]; r.appliesTo(target) && r.active(now) {
			m *= r.Factor
		}
	}
	if target == NeutralTarget {
		return m
	}
	for i := range g.target {
		if r := &g.target[i]; r.Kind == KindDegrade && r.appliesTo(target) && r.active(now) {
			m *= 1 + (r.Factor-1)*r.ramp(now)
		}
	}
	return m
}

func (t *worldTarget) downClass(now time.Duration) (engine.Class, bool) {
	for _, d := range t.down {
		if now >= d.From && (d.Until == 0 || now < d.Until) {
			return d.Class, true
		}
	}
	return engine.OK, false
}

func isTimeout(c engine.Class) bool { return c == engine.ProxyTimeout || c == engine.TargetTimeout }

// silence is an attempt that gets no answer: the gateway that cuts it sees
// an exit that took the request and said nothing.
var silence = Result{Class: engine.ProxyTimeout, Latency: Never}

// Attempt applies the exit's own behaviours first, then the target's
// outage, then what the target does to this route; see scenarios/README.md.
// A silent exit or site answers with Never: the caller cuts it.
func (w *scenarioWorld) Attempt(route, target int, now time.Duration, rng *rand.Rand) Result {
	g := &w.groups[w.groupOf[route]]
	switch c := g.exitClass(target, now); c {
	case engine.ProxyConnectFailed:
		return Result{Class: c, Latency: refusedLatency}
	case engine.ProxyTimeout:
		return silence
	case engine.ProxyAuth:
		return Result{Class: c, Latency: proxyReplyLatency}
	}
	mult := g.multiplier(target, now)
	// answer is the target's reply with class c, however late it comes.
	answer := func(c engine.Class) Result {
		lat := float64(g.median) * math.Exp(g.sigma*rng.NormFloat64()) * mult
		// Compared as a float: a huge factor would overflow a Duration.
		if lat >= float64(Never) {
			return silence
		}
		return Result{Class: c, Latency: time.Duration(lat)}
	}
	if target == NeutralTarget {
		return answer(engine.OK)
	}
	if c, down := w.targets[target].downClass(now); down {
		if isTimeout(c) {
			return silence
		}
		return answer(c)
	}
	for i := range g.target {
		r := &g.target[i]
		if !r.appliesTo(target) || !r.active(now) {
			continue
		}
		switch r.Kind {
		case KindBan:
			// A ban always answers; a flaky firewall (p < 1) now and then.
			if r.P >= 1 || rng.Float64() < r.P {
				return answer(engine.Blocked)
			}
		case KindBurstban:
			if r.bursts[r.state(g, route, target)].request(r, now) {
				return answer(engine.Blocked)
			}
		case KindRatelimit:
			if retry, limited := r.buckets[r.state(g, route, target)].take(r, now); limited {
				res := answer(engine.RateLimited)
				res.RetryAfter = retry
				return res
			}
		case KindSoftban:
			// A 200 like any page: the gateway's judge decides (runner.judge).
			if rng.Float64() < r.P {
				return answer(engine.OK).with(DecoyPage)
			}
		case KindErrors:
			if rng.Float64() < r.P {
				return answer(engine.Target5xx)
			}
		case KindDegrade:
			if rng.Float64() < r.P*r.ramp(now) {
				return silence
			}
		}
	}
	if w.targets[target].identical {
		return answer(engine.OK).with(SitePage)
	}
	return answer(engine.OK).with(OwnPage)
}

// with is r carrying page p when it is an answer the status calls ok (one
// too late is silence, and carries none).
func (r Result) with(p Page) Result {
	if r.Class == engine.OK {
		r.Page = p
	}
	return r
}

// Check implements World: a TCP connect reaches any exit that is not
// refusing connections, hanging or not.
func (w *scenarioWorld) Check(route int, now time.Duration) Result {
	if w.groups[w.groupOf[route]].exitClass(NeutralTarget, now) == engine.ProxyConnectFailed {
		return Result{Class: engine.ProxyConnectFailed, Latency: refusedLatency}
	}
	return Result{Class: engine.OK, Latency: connectLatency}
}

// Bad reports whether an attempt at now fails by ground truth, ignoring
// chance: a random failure counts once it is at least as likely as not,
// and so does a median latency beyond the attempt timeout. It changes no
// state.
func (w *scenarioWorld) Bad(route, target int, now time.Duration) bool {
	g := &w.groups[w.groupOf[route]]
	if g.exitClass(target, now) != engine.OK {
		return true
	}
	if float64(g.median)*g.multiplier(target, now) >= float64(w.timeout) {
		return true
	}
	if target == NeutralTarget {
		return false
	}
	if _, down := w.targets[target].downClass(now); down {
		return true
	}
	for i := range g.target {
		r := &g.target[i]
		if !r.appliesTo(target) || !r.active(now) {
			continue
		}
		switch r.Kind {
		case KindRatelimit:
			if now < r.buckets[r.state(g, route, target)].penalty {
				return true
			}
		case KindBurstban:
			if now < r.bursts[r.state(g, route, target)].banned {
				return true
			}
		case KindBan, KindSoftban, KindErrors:
			if r.P >= 0.5 {
				return true
			}
		case KindDegrade:
			if r.P*r.ramp(now) >= 0.5 {
				return true
			}
		}
	}
	return false
}

// Faults lists, per behaviour, when it makes its routes bad as Bad judges
// it, and the targets' down windows. Rate limits are left out: they trip
// under load, not on a schedule.
func (w *scenarioWorld) Faults() []Fault {
	var faults []Fault
	for gi := range w.groups {
		g := &w.groups[gi]
		add := func(name string, target int, start, end time.Duration) {
			// A fault of routes not yet listed starts when they join.
			start = max(start, g.joins)
			if end != 0 && end <= start {
				return
			}
			routes := make([]int, g.count)
			for i := range routes {
				routes[i] = g.first + i
			}
			faults = append(faults, Fault{Name: name, Routes: routes, Target: target, Start: start, End: end})
		}
		tooSlow := func(factor float64) bool { return float64(g.median)*factor >= float64(w.timeout) }
		if tooSlow(1) {
			add(g.name+": slower than the attempt timeout", allTargets, 0, 0)
		}
		for _, rules := range [][]rule{g.exit, g.slow, g.target} {
			for i := range rules {
				r := &rules[i]
				name := w.faultName(g, r)
				switch r.Kind {
				case KindFlap:
					for n, start := 1, r.From+r.Period; n <= maxFlapFaults && (r.Until == 0 || start < r.Until); n, start = n+1, start+2*r.Period {
						end := start + r.Period
						if r.Until != 0 {
							end = min(end, r.Until)
						}
						add(fmt.Sprintf("%s down #%d", name, n), r.target, start, end)
					}
				case KindSlow:
					if tooSlow(r.Factor) {
						add(name, r.target, r.From, r.Until)
					}
				case KindRatelimit, KindBurstban: // trip under load, not on a schedule
				case KindBan, KindSoftban, KindErrors:
					if r.P >= 0.5 {
						add(name, r.target, r.From, r.Until)
					}
				case KindDegrade:
					if at, ok := w.degradeBadAt(g, r); ok {
						add(name, r.target, at, r.Until)
					}
				default:
					add(name, r.target, r.From, r.Until)
				}
			}
		}
	}
	for ti, t := range w.targets {
		for _, d := range t.down {
			all := make([]int, len(w.ids))
			for i := range all {
				all[i] = i
			}
			faults = append(faults, Fault{Name: t.name + ": down", Routes: all, Target: ti, Start: d.From, End: d.Until, SiteDown: true})
		}
	}
	return faults
}

func (w *scenarioWorld) faultName(g *worldGroup, r *rule) string {
	if r.target == allTargets {
		return fmt.Sprintf("%s: %s", g.name, r.Kind)
	}
	return fmt.Sprintf("%s: %s on %s", g.name, r.Kind, w.targets[r.target].name)
}

// degradeBadAt is when a degrade rule's ramp makes failure as likely as
// not, or the median latency reach the timeout, whichever comes first.
func (w *scenarioWorld) degradeBadAt(g *worldGroup, r *rule) (time.Duration, bool) {
	at := math.Inf(1) // as a share of the ramp
	if r.P >= 0.5 {
		at = 0.5 / r.P
	}
	if r.Factor > 1 {
		at = min(at, (float64(w.timeout)/float64(g.median)-1)/(r.Factor-1))
	}
	if at >= 1 {
		return 0, false
	}
	return r.From + time.Duration(max(at, 0)*float64(r.Until-r.From)), true
}

// groundTruth is what the oracle knows of a World beyond Bad: its routes
// come in groups that behave alike, what a group's routes would do for a
// target now, and how long a route must wait before a request would not
// trip a site's limit.
type groundTruth interface {
	Groups() int
	// Group returns group g's routes, first…first+count-1, and their
	// max_inflight (0: unlimited).
	Group(g int) (first, count, maxInflight int)
	// Expect is what an attempt of group g's routes against target at now
	// takes, by the median, and the chance it gets a valid answer, limits
	// aside (see Wait); p is 0 when it would fail or time out.
	Expect(g, target int, now time.Duration) (latency time.Duration, p float64)
	// Wait is how long route must wait, from now, before a request to
	// target would not trip its rate limit or burst ban; 0 when it may go.
	Wait(route, target int, now time.Duration) time.Duration
}

var _ groundTruth = (*scenarioWorld)(nil)

func (w *scenarioWorld) Groups() int { return len(w.groups) }

func (w *scenarioWorld) Group(g int) (first, count, maxInflight int) {
	wg := &w.groups[g]
	return wg.first, wg.count, wg.maxInflight
}

func (w *scenarioWorld) Expect(g, target int, now time.Duration) (time.Duration, float64) {
	wg := &w.groups[g]
	if wg.exitClass(target, now) != engine.OK {
		return 0, 0
	}
	lat := float64(wg.median) * wg.multiplier(target, now)
	if lat >= float64(w.timeout) {
		return 0, 0
	}
	p := 1.0
	if _, down := w.targets[target].downClass(now); down {
		return 0, 0
	}
	for i := range wg.target {
		r := &wg.target[i]
		if !r.appliesTo(target) || !r.active(now) {
			continue
		}
		switch r.Kind {
		case KindBan, KindSoftban, KindErrors:
			p *= 1 - r.P
		case KindDegrade:
			p *= 1 - r.P*r.ramp(now)
		}
	}
	return time.Duration(lat), p
}

func (w *scenarioWorld) Wait(route, target int, now time.Duration) time.Duration {
	g := &w.groups[w.groupOf[route]]
	var wait time.Duration
	for i := range g.target {
		r := &g.target[i]
		if !r.appliesTo(target) || !r.active(now) {
			continue
		}
		switch r.Kind {
		case KindRatelimit:
			wait = max(wait, r.buckets[r.state(g, route, target)].wait(r, now))
		case KindBurstban:
			wait = max(wait, r.bursts[r.state(g, route, target)].wait(r, now))
		}
	}
	return wait
}

// costs is what a World says of its routes' cost tiers and prices.
type costs interface {
	Tier(route int) int
	Price(route int) float64 // per attempt
}

var _ costs = (*scenarioWorld)(nil)

func (w *scenarioWorld) Tier(route int) int { return w.groups[w.groupOf[route]].tier }

func (w *scenarioWorld) Price(route int) float64 { return w.groups[w.groupOf[route]].price }

// tierOf is route's cost tier in w, 0 when w has none.
func tierOf(w World, route int) int {
	if c, ok := w.(costs); ok {
		return c.Tier(route)
	}
	return 0
}

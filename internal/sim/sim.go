// Package sim is the deterministic simulator behind `switchyard bench`: a
// discrete-event model of exit pools on a virtual clock that runs the real
// engine, and the policies it is compared with, on identical load.
package sim

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Result is the outcome of one simulated attempt.
type Result struct {
	Class      engine.Class
	Latency    time.Duration // time to the answer; Never when none comes
	RetryAfter time.Duration // with RateLimited
	// Page is what an ok answer's body is, for the gateway's lookalike
	// detector to judge (runner.judge) and for the client to take or not.
	Page Page
}

// Page is the body of an answer the status calls ok, as the gateway's
// lookalike detector tells pages apart (internal/lookalike,
// docs/design/011-lookalike.md).
type Page uint8

const (
	// NoPage: nothing to judge (a failure, a probe of the exit, or a
	// World that does not model pages).
	NoPage Page = iota
	// OwnPage is the page asked for, each URL its own.
	OwnPage
	// SitePage is the one page the site answers every URL with, through
	// every route (an API's fixed JSON): a valid answer.
	SitePage
	// DecoyPage is a soft ban: one captcha page for every URL, sent with a
	// 200 that no signature marks. It is not what the client asked for,
	// whatever the gateway judged it.
	DecoyPage
)

// Never is the Latency of an attempt that gets no answer at all (a
// blackholed exit, a site that hangs): the client or the gateway cuts it,
// at its deadline or timeout, as proxy_timeout, which is how the gateway
// classifies an exit that took the request and said nothing.
const Never = time.Duration(math.MaxInt64)

// NeutralTarget is the target number of a route-global probe: only the
// route's own behaviour (dead, blackhole, auth, flapping…) applies. The
// gateway's prober makes it a tunnel asked of the exit, or a page fetched
// through it with a probe URL: the exit answers both alike.
const NeutralTarget = -1

// Targets of the health checks other products make, whatever the
// gateway's probe URL: a TCP connect to the exit (HAProxy's `check`), and
// a page every exit should fetch (glider's `-check`).
const (
	tcpCheck  = -2
	checkPage = -3
)

// World is the ground truth of a scenario: how every route answers every
// target at every instant. Times are offsets from the start of the run.
// A World is used by one goroutine; Attempt may keep state (rate limits).
type World interface {
	Routes() int
	Targets() int
	RouteID(route int) string
	TargetName(target int) string
	// Attempt performs one simulated attempt of route against target
	// (NeutralTarget for a route-global page, as a neutral probe with a
	// probe URL fetches) at now.
	Attempt(route, target int, now time.Duration, rng *rand.Rand) Result
	// Check is a TCP connect to route's exit at now (HAProxy's check, and
	// the neutral probe of a gateway that knows no site yet): refused
	// while the exit refuses connections, OK otherwise, whatever it would
	// do with a request.
	Check(route int, now time.Duration) Result
	// Bad reports whether route, tried against target at now, would fail
	// by ground truth (a fault is active, or its rate limit is tripped).
	Bad(route, target int, now time.Duration) bool
	// Faults lists the scheduled faults, for detection and recovery times.
	Faults() []Fault
}

// lister is a World whose routes join the gateway's list during the run,
// as a reload adds them; a World without it lists every route from the
// start. Before it joins, a route is in no policy's list: the runner
// avoids it for every pick and probes it for no one, and the engine
// policies add it to their engine when it joins.
type lister interface {
	// JoinsAt is when route joins the list; 0: from the start.
	JoinsAt(route int) time.Duration
}

// joinsAt is when route joins w's list: 0 for a World without joins.
func joinsAt(w World, route int) time.Duration {
	if l, ok := w.(lister); ok {
		return l.JoinsAt(route)
	}
	return 0
}

// joining lists the routes of w that join its list after the start, by
// join time.
func joining(w World) []int {
	var routes []int
	for route := range w.Routes() {
		if joinsAt(w, route) > 0 {
			routes = append(routes, route)
		}
	}
	slices.SortStableFunc(routes, func(a, b int) int { return cmp.Compare(joinsAt(w, a), joinsAt(w, b)) })
	return routes
}

// Fault is a scheduled fault: Routes fail Target (-1: every target) from
// Start until End (End 0: to the end of the run).
type Fault struct {
	Name       string
	Routes     []int
	Target     int
	Start, End time.Duration
	// SiteDown marks a target down for every route: no routing can avoid
	// it, so it counts for incidents, not for detection.
	SiteDown bool
}

// Policy chooses routes for attempts. One Policy instance serves one run,
// from one goroutine, on the virtual clock. A policy sits where the
// gateway does, between the client and the exits; what it does beyond
// picking (retry rules, hedges) it says through the optional interfaces
// below.
type Policy interface {
	// Pick chooses a route for an attempt at target, avoiding the routes in
	// avoid (already tried for this request). session, when not empty,
	// names the client's sticky session (policies without sessions ignore
	// it). ok is false when the policy has nothing to offer: the client is
	// told so at once and asks again later (retryHinter says when).
	Pick(now time.Time, target int, session string, avoid []int) (a Attempt, ok bool)
	// Report gives the policy the attempt's result.
	Report(now time.Time, ticket uint64, r Result)
	// Tick runs the policy's timed work once per simulated second, the
	// first at the start of the run; probe starts probes against the
	// world.
	Tick(now time.Time, probe Prober)
}

// Prober starts a probe of route against target (NeutralTarget for a
// route-global probe) as the gateway's prober makes it; done gets its
// result at the simulated time the result arrives, its Latency later (at
// most the prober's timeout).
type Prober func(route, target int, done func(now time.Time, r Result))

// Attempt is a route a Policy picked for one attempt.
type Attempt struct {
	Route  int
	Ticket uint64 // names the attempt in Report
	// Deadline is how long the attempt may wait for an answer before the
	// gateway cuts it and retries elsewhere (the engine's adaptive
	// deadline); 0 means the scenario's attempt timeout. An attempt that
	// cannot be retried runs to the attempt timeout whatever its deadline.
	Deadline time.Duration
	// HedgeAfter, when positive and the Policy is a hedger, is when a
	// request still waiting on this, its first attempt, gets a second.
	HedgeAfter time.Duration
	// Provisional says Deadline was given before anything was known of
	// answer times (engine.Lease.Provisional): a Policy that is a retimer
	// is asked again while the attempt waits.
	Provisional bool
	// Delay is how long the attempt waits before it is sent, as the
	// gateway waits out a lease's (engine.Lease.Delay).
	Delay time.Duration
}

// retrier is a Policy that decides for itself which failed attempts the
// gateway retries on another route (a product's retry rules and budget).
// Without it, every class the rule table marks retryable is retried.
type retrier interface {
	// Request counts a client request at now.
	Request(now time.Time)
	// Retry reports whether an attempt at target that failed with c at
	// now is retried, and takes the retry from the budget if so.
	Retry(now time.Time, target int, c engine.Class) bool
}

// hedger is a Policy that hedges idempotent requests: when the first
// attempt has no answer after its HedgeAfter, a second starts on another
// route.
type hedger interface {
	// Hedge reports whether a hedge may start at now, and takes it from
	// the budget if so.
	Hedge(now time.Time) bool
}

// Summary is one policy's result on one scenario. Times are in
// milliseconds of simulated time; a negative DetectMs or RecoverMs means the
// scenario has no such fault or the policy never got there.
type Summary struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	// Throughput is the completed tasks per second of simulated time at the
	// scenario's fixed number of workers: what a crawler gets done.
	Throughput float64 `json:"throughput"`
	// ThroughputRatio is Throughput ÷ the oracle's on the same scenario
	// (set by Bench when the oracle ran; 0 otherwise).
	ThroughputRatio float64 `json:"throughput_ratio"`
	// Seeds is how many seeds the summary averages (BenchSeeds; 0 or 1:
	// one run), and RatioMin and RatioMax the lowest and highest of their
	// throughput ratios.
	Seeds                int     `json:"seeds,omitempty"`
	RatioMin             float64 `json:"throughput_ratio_min,omitempty"`
	RatioMax             float64 `json:"throughput_ratio_max,omitempty"`
	Tasks                int     `json:"tasks"` // tasks that ended, completed or failed
	Completed            int     `json:"completed"`
	CompletionRate       float64 `json:"completion_rate"`
	Attempts             int     `json:"attempts"` // upstream attempts, hedges and retries included
	AttemptsPerCompleted float64 `json:"attempts_per_completed"`
	Hedges               int     `json:"hedges"`
	WastedAttempts       int     `json:"wasted_attempts"` // sent to a route bad for that target at that moment
	P50ms                float64 `json:"p50_ms"`          // task latency, completed tasks
	P95ms                float64 `json:"p95_ms"`
	P99ms                float64 `json:"p99_ms"`
	DetectMs             float64 `json:"detect_ms"`         // fault start → bad routes' share of attempts < 5%
	RecoverMs            float64 `json:"recover_ms"`        // fault end → recovered routes back to ≥ 50% of fair share
	FalseEjections       int     `json:"false_ejections"`   // routes ejected while good on every target
	IncidentAttempts     int     `json:"incident_attempts"` // attempts sent to a target while it was down for everyone
	SessionRestarts      int     `json:"session_restarts"`  // sticky sessions the policy ended: their route became unusable
	// Spend is what the attempts cost by their routes' price_per_request;
	// CostPerCompleted, Spend ÷ Completed.
	Spend            float64 `json:"spend"`
	CostPerCompleted float64 `json:"cost_per_completed"`
	// FalseContentInvalid counts answers of the page asked for that the
	// gateway's lookalike detector judged content_invalid; DecoysPassed,
	// soft-ban pages it judged valid, relayed to the client as pages.
	FalseContentInvalid int     `json:"false_content_invalid"`
	DecoysPassed        int     `json:"decoys_passed"`
	SimulatedSeconds    float64 `json:"simulated_s"`
	AttemptsPerSecond   float64 `json:"attempts_per_wall_s"` // simulator speed

	Series []Point `json:"-"` // over time, for plots
}

// Point is one time bucket of a run, for plots: 5 s of simulated time,
// the last cut short where the run ends.
type Point struct {
	At         time.Duration // end of the bucket, from the start of the run
	Completion float64       // share of tasks finished in the bucket that completed
	BadShare   float64       // share of attempts in the bucket sent to bad routes
	Throughput float64       // tasks completed in the bucket per second of it
}

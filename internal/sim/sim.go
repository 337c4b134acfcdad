// Package sim is the deterministic simulator behind `switchyard bench`: a
// discrete-event model of exit pools on a virtual clock that runs the real
// engine, and the policies it is compared with, on identical load.
package sim

import (
	"math/rand/v2"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Result is the outcome of one simulated attempt.
type Result struct {
	Class      engine.Class
	Latency    time.Duration // time the attempt took (for timeouts: the timeout)
	RetryAfter time.Duration // with RateLimited
}

// NeutralTarget is the target number of a route-global probe: only the
// route's own behaviour (dead, blackhole, auth, flapping…) applies.
const NeutralTarget = -1

// World is the ground truth of a scenario: how every route answers every
// target at every instant. Times are offsets from the start of the run.
// A World is used by one goroutine; Attempt may keep state (rate limits).
type World interface {
	Routes() int
	Targets() int
	RouteID(route int) string
	TargetName(target int) string
	// Attempt performs one simulated attempt of route against target
	// (NeutralTarget for a route-global probe) at now.
	Attempt(route, target int, now time.Duration, rng *rand.Rand) Result
	// Bad reports whether route, tried against target at now, would fail
	// by ground truth (a fault is active, or its rate limit is tripped).
	Bad(route, target int, now time.Duration) bool
	// Faults lists the scheduled faults, for detection and recovery times.
	Faults() []Fault
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
// from one goroutine, on the virtual clock.
type Policy interface {
	// Pick chooses a route for an attempt at target, avoiding the routes in
	// avoid (already tried for this task). session, when not empty, names
	// the client's sticky session (policies without sessions ignore it). ok
	// is false when the policy has nothing to offer; the attempt is then
	// counted as failed at once. ticket identifies the attempt in Report.
	Pick(now time.Time, target int, session string, avoid []int) (route int, ticket uint64, ok bool)
	// Report gives the policy the attempt's result.
	Report(now time.Time, ticket uint64, r Result)
	// Tick runs the policy's timed work about once per simulated second;
	// probe performs a probe against the world (target NeutralTarget for a
	// route-global probe).
	Tick(now time.Time, probe func(route, target int) Result)
}

// Summary is one policy's result on one scenario. Times are in
// milliseconds of simulated time; a negative DetectMs or RecoverMs means the
// scenario has no such fault or the policy never got there.
type Summary struct {
	Scenario             string  `json:"scenario"`
	Policy               string  `json:"policy"`
	Tasks                int     `json:"tasks"`
	Completed            int     `json:"completed"`
	CompletionRate       float64 `json:"completion_rate"`
	Attempts             int     `json:"attempts"`
	AttemptsPerCompleted float64 `json:"attempts_per_completed"`
	WastedAttempts       int     `json:"wasted_attempts"` // sent to a route bad for that target at that moment
	P50ms                float64 `json:"p50_ms"`          // task latency, completed tasks
	P95ms                float64 `json:"p95_ms"`
	P99ms                float64 `json:"p99_ms"`
	DetectMs             float64 `json:"detect_ms"`         // fault start → bad routes' share of attempts < 5%
	RecoverMs            float64 `json:"recover_ms"`        // fault end → recovered routes back to ≥ 50% of fair share
	FalseEjections       int     `json:"false_ejections"`   // routes ejected while good on every target
	IncidentAttempts     int     `json:"incident_attempts"` // attempts sent to a target while it was down for everyone
	SessionRestarts      int     `json:"session_restarts"`  // sticky sessions the policy ended: their route became unusable
	SimulatedSeconds     float64 `json:"simulated_s"`
	AttemptsPerSecond    float64 `json:"attempts_per_wall_s"` // simulator speed

	Series []Point `json:"-"` // over time, for plots
}

// Point is one time bucket of a run, for plots.
type Point struct {
	At         time.Duration // end of the bucket, from the start of the run
	Completion float64       // share of tasks finished in the bucket that completed
	BadShare   float64       // share of attempts in the bucket sent to bad routes
}

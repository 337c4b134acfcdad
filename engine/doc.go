// Package engine decides, for every request, which exit ("route") should
// carry it to its target now, from the evidence of every outcome and probe.
// It is pure: no I/O, no goroutines, no clock. Every method takes the time,
// so the simulator can drive it on a virtual clock and tests lay out
// timelines without sleeping.
//
// # Three roles
//
// A route executes attempts and reports a normalized Outcome (done by the
// caller, e.g. the gateway). The health model (Health, Evidence) turns
// outcomes into evidence and states. The policy (Candidates, Picker) reads
// them and picks the next route. Each is replaceable without the others.
//
// # Outcomes and rules
//
// Every attempt ends in exactly one Class. The rule table (Rules,
// DefaultRules) says per class which scope it counts against — the route's
// global record (the exit itself: connect, auth, tunnel) or its
// route×target record (this exit against this site: 403, 429, captcha) —
// whether it feeds the failure thresholds, whether the request may be
// retried elsewhere, whether it cools at once, and the cooldown it starts.
// A 403 from one site never lowers the route's global score; only successes
// and timeouts feed the latency estimate, so a fast rejection never looks
// like a fast exit. docs/design/006-model.md has the table and the states
// below.
//
// # Evidence and states
//
// Each record keeps an EWMA of success (Config.Alpha), a peak-EWMA of
// latency (Config.LatencyDecay), a log-normal fit of the time to an answer
// (LogNormal), a six-bucket sliding window of failures, consecutive counts
// and last times. Its score is the success EWMA shrunk toward Config.Prior
// until Config.PriorSamples outcomes exist. Pair records
// are created only by negative evidence or a session and are evicted when
// idle (Config.PairTTL); without one, a route's target factor is 1.
//
// Records move through
//
//	candidate → healthy → suspect → cooling → half_open → healthy | cooling
//	                                   half_open ×EjectAfter → ejected → half_open
//	any → draining (operator) ; any → healthy (operator restore)
//
// with two thresholds (suspect after SuspectAfter consecutive failures or a
// SuspectRate window rate; cooling after CoolAfter or CoolRate), recovery
// from suspect only after RecoverAfter consecutive successes, and slow start
// after a recovery. Cooldowns grow exponentially per cooling (capped,
// jittered); Retry-After replaces the backoff, for that target only. Every
// state change bumps the record's generation; a lease carries the
// generations it was granted under, and an outcome reported under an older
// generation is recorded as evidence but moves no state, so many workers
// reporting the same failure cannot push a cooldown out forever.
//
// Expired cooldowns wake to half-open on the next Acquire, Report or Sweep
// (a deadline queue, so nothing is scanned), never only on a report: a
// cooling record gets none. Half-open records get no users' traffic; they
// issue one ProbeJob per generation (ProbeJobs), answered by ReportProbe:
// ProbeSuccesses successes restore, a failure cools again for longer. A
// route ejects after EjectAfter failed recoveries of its global record, or
// failed recoveries on EjectTargets distinct targets.
//
// # Guards
//
// A target incident opens when IncidentRoutes distinct routes fail one
// target with the same class and make up IncidentShare of the distinct
// routes that tried it in IncidentWindow: the site is down, not the exits.
// A target's guard is made at its first failure and has not seen the
// successes before it, so for half a window it opens only when every
// route of the pool failed there (or the first 64 it counted), and not at
// all when the pool has cost tiers (a site refusing the cheap tier looks
// down from there).
// While open, failures of that class are not held against routes; it closes
// when successes return. At most MaxRemovedShare of the routes may be
// removed (cooling, half-open, ejected) by ordinary evidence; overwhelming
// route-global evidence (OverwhelmingAfter consecutive failures, or a
// cools-at-once class) passes. When fewer than PanicThreshold of the routes
// (or of the routes left for a target, where pairs the site itself refused
// or rate-limited count as left) are eligible, exclusions are lifted and
// load spreads over all of them; when nothing at all is eligible,
// Acquire returns the least-bad route unless the request is Strict.
//
// # Selection
//
// Acquire wakes due cooldowns, honours a sticky session (or fails with
// ErrSessionRestartRequired, never switching exits silently; a session is
// bound by its first lease, or, with Request.BindLater, by Bind once an
// attempt succeeded, so its first request may fail over), applies hard
// label constraints through a per-label index (a route's AnyValue label
// matching every value of its key), and lets the Picker draw
// from a sharded weighted index where each route weighs its speed
//
//	cost = latency · (1 + in-flight) / score^γ
//	weight = Weight/(1+Cost) · slow start · suspect term · cost^-Sharpness
//
// cost being the expected time to a valid answer (docs/design/005-cost.md):
// no absolute latency reference, only ratios. The target factor (pair
// score^(γ·Sharpness), the route-to-pair latency ratio when the pair is
// slower, 0 when the pair is cooling) is applied by rejection, so a pick
// costs O(log n) with no per-target index, no allocation and no global
// lock. The default Picker, PowerOfTwo, keeps the heavier of two draws. The
// lease is taken atomically against the route's max_inflight and expires
// after LeaseTTL (reaped by Sweep as an ambiguous target timeout). New
// routes take no traffic until a neutral probe succeeded, unless
// Config.UncheckedCandidates.
//
// In a pool of several cost tiers (RouteSpec.Tier), each target is drawn
// from the cheapest tier that works there: the draw climbs to the next
// tier while one has nothing to give, the target moves up a tier when its
// answers through its tier are mostly failures (TierEscalateBelow), and
// back down after TierCalm or when a cheaper route passes its probe there
// (docs/design/015-tiers.md). Panic and the least-bad fallback come only
// once every tier is exhausted.
//
// # Time
//
// Given Request.Timeout, a Lease carries a Deadline (Config.DeadlineFactor
// × the route's 99th percentile time to an answer at the target, at least
// Config.DeadlineFloor, at most the timeout) past which the caller cuts the
// attempt and reports a timeout, and a HedgeAfter past which an idempotent
// request is worth a second attempt elsewhere. Lease.Canceled turns a
// caller's give-up into evidence once the deadline passed. Budget caps
// retries and hedges pool-wide. Pacing learned from the sites' 429s and
// from their bans after bursts holds each route×target pair under what the
// site tolerates (pace.go), and a pick passes over a pair that must wait;
// but a request that may wait (Request.MayWait) gets a fast pair a moment
// from its next token rather than a far slower route ready now, the token
// reserved, and waits Lease.Delay before it sends the attempt.
//
// # Routes and reloads
//
// AddRoute adds a route; UpdateRoute changes its labels, max_inflight,
// weight and cost in place, so a config reload keeps everything learnt
// about a route whose id did not change: health records, route×target
// pairs, leases, sessions and state. A route leaves the label indexes of
// labels it lost (a label nobody carries any more means ErrNoMatch again)
// and joins new ones; leases already granted run on under a lowered
// max_inflight. RouteSpec returns the spec in force, for a reload to
// compare. A route's config is one copy-on-write snapshot, so the pick
// reads it with one atomic load and no lock.
//
// # Events, replay and state
//
// Outcomes, state changes, score moves and incidents are Events, delivered
// to bounded subscriptions (Subscribe) and written as JSON lines
// (WriteEvents); Replay runs a recorded outcome stream under another Config
// and reports the decisions that differ. Shared mutable state sits behind
// the Store port (MemoryStore by default) so several processes can share
// it; see docs/design/002-store-port.md.
//
// A shared store that implements Notifier tells the engine of the records
// other processes change. The engine follows them as it follows its own
// changes — weights, pool and target counters, wake-ups, slow start, events
// — but leaves probe jobs and cross-target ejections to the process that
// made the change, so each is issued once. Every process queues the
// wake-up of a cooldown; the store's generation check lets one win.
package engine

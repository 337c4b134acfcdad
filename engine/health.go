package engine

import (
	"math"
	"time"
)

// Health is the record kept per scope (a route, or a route×target pair): its
// evidence and where it stands in the state machine. It is a plain value so
// a store can keep it anywhere; its methods are the pure transition rules,
// taking time and randomness as arguments.
type Health struct {
	Evidence
	State State
	Gen   uint32 // bumped on every state change; leases carry it (design note 001)
	Since int64  // when State was entered, Unix ns
	Until int64  // Cooling and Ejected: when the state ends, Unix ns
	Cause Class  // the outcome class that moved the record into State

	Level            uint8 // cooldown backoff level: grows per cooling, decays after a calm CooldownCap
	FailedRecoveries uint8 // failed half-open probes in a row
	Ejections        uint8 // ejections so far: each one doubles the next; forgotten after a calm EjectCap
	ProbeOK          uint8 // successful probes in this half-open period
	SlowStart        bool  // entered Healthy from a recovery: ramp weight from Since
}

// Observation is one outcome as the health model sees it. Everything random
// or pool-wide is decided by the caller and passed in, so the transition is a
// pure function of the record and the observation.
type Observation struct {
	Class      Class
	Latency    time.Duration
	RetryAfter time.Duration // from a 429 or 503: wins over backoff, for that target only
	Probe      bool          // from the probe queue, not users' traffic
	// Stale marks an outcome from a lease taken under an older generation:
	// its evidence is recorded but it moves no state, so late reports from
	// before a transition cannot undo it (sony/gobreaker's generations).
	Stale bool
	// Capped is set when the pool already has MaxRemovedShare of its routes
	// removed: ordinary evidence may then make a route suspect, not cool it.
	Capped bool
	// Jitter is a uniform random number in [0, 1) spreading the cooldown.
	Jitter float64
}

// Change is what one call did to a record.
type Change struct {
	From, To           State
	OldCause           Class // the cause of From
	OldScore, NewScore float64
	Gen                uint32
	Reason             string // why the state changed; "" when it did not
	Probe              bool   // issue a probe job for (Gen, ProbeSeq): the record entered half-open or needs another probe
	ProbeSeq           uint8  // successful probes so far in this half-open period
	Until              int64  // the record's deadline after the change (cooling, ejected)
	Cause              Class  // the class that moved the record into its state
	SlowStart          bool   // the record is ramping up after a recovery
}

// Changed reports whether the state moved.
func (ch Change) Changed() bool { return ch.Reason != "" }

// observe applies o to the record as seen from scope (ScopeRoute for a
// route's global record, ScopeTarget for a pair) at now.
func (h *Health) observe(o Observation, scope Scope, c *Config, now int64) Change {
	rule := c.Rules.Rule(o.Class)
	ch := h.begin(c, scope)
	success := o.Class == OK
	failure := !success && (rule.Breaker || rule.AtOnce)
	if !success && !failure && rule.Scope == ScopeNone {
		if o.Probe && !o.Stale && (h.State == HalfOpen || h.State == Candidate) {
			ch.Probe = true // a probe without evidence (canceled): ask again
		}
		if o.Class == Canceled && !o.Probe && o.Latency.Seconds() > h.Latency {
			// An attempt given up on after it had run longer than the
			// estimate (a hedge that lost, a client out of patience) says
			// nothing of success but bounds the exit's time from below.
			h.observeLatency(o.Latency.Seconds(), c, now)
		}
		return h.end(ch, c, scope)
	}
	timed := !o.Probe && (success || rule.Timeout && o.Latency > 0)
	h.Evidence.observe(success, timed, o.Latency, c, now)
	if o.Stale {
		return h.end(ch, c, scope)
	}
	if o.Probe {
		h.probeResult(success, failure, o, scope, c, now, &ch)
		return h.end(ch, c, scope)
	}
	switch h.State {
	case Candidate, Healthy, Suspect:
	default:
		// Cooling, half-open, ejected and draining records move only by
		// probes, timers and operators; traffic they carried in a panic is
		// evidence, not a verdict.
		return h.end(ch, c, scope)
	}
	switch {
	case success:
		if h.State != Healthy && int(h.ConsecOK) >= c.RecoverAfter && !h.failing(c, now, c.SuspectRate) {
			h.move(Healthy, o.Class, now, "consecutive successes", &ch)
		}
	case !failure:
	case rule.AtOnce:
		h.cool(rule, o, c, now, "cools at once", &ch)
	case int(h.ConsecFail) >= coolAfter(rule, c) || h.failing(c, now, c.CoolRate):
		if o.Capped && int(h.ConsecFail) < c.OverwhelmingAfter {
			if h.State != Suspect {
				h.move(Suspect, o.Class, now, "cooling capped by pool guard", &ch)
			}
			break
		}
		h.cool(rule, o, c, now, "failure threshold", &ch)
	case h.State != Suspect && (int(h.ConsecFail) >= c.SuspectAfter || h.failing(c, now, c.SuspectRate)):
		h.move(Suspect, o.Class, now, "suspect threshold", &ch)
	}
	return h.end(ch, c, scope)
}

// failing reports whether the record's window, with the volume to be
// judged, fails at rate or more: read only where a verdict turns on it,
// not at every success of a healthy record.
func (h *Health) failing(c *Config, now int64, rate float64) bool {
	r, volume := h.FailureRate(c, now)
	return volume >= c.MinVolume && r >= rate
}

func (h *Health) probeResult(success, failure bool, o Observation, scope Scope, c *Config, now int64, ch *Change) {
	// A half-open record is tested before it gets work again, and so is a
	// new route before its first users' traffic (Config.UncheckedCandidates).
	if h.State != HalfOpen && h.State != Candidate {
		return // a late probe: the record has moved on
	}
	// A candidate has no failure to recover from: one check will do.
	need, reason := c.ProbeSuccesses, "probes succeeded"
	if h.State == Candidate {
		need, reason = 1, "checked by a probe"
	}
	switch {
	case success:
		h.ProbeOK++
		if int(h.ProbeOK) >= need {
			h.recover(o.Class, now, reason, ch)
		} else {
			ch.Probe = true // the next probe of this half-open period
		}
	case failure:
		h.FailedRecoveries = satInc8(h.FailedRecoveries)
		if scope == ScopeRoute && int(h.FailedRecoveries) >= c.EjectAfter {
			h.eject(c, o.Class, now, "failed recoveries", ch)
			return
		}
		h.cool(c.Rules.Rule(o.Class), o, c, now, "probe failed", ch)
	}
}

// wake moves an expired cooling or ejected record to half-open. It is called
// at acquire time and by Sweep, never only on a report: a cooling record gets
// no reports.
func (h *Health) wake(c *Config, scope Scope, now int64) Change {
	ch := h.begin(c, scope)
	switch {
	case h.State != Cooling && h.State != Ejected || now < h.Until:
	case h.State == Cooling && h.Cause == RateLimited && scope == ScopeTarget:
		// The site said when to come back, and a probe would only spend
		// the request the pair's learned pace allows (pace.go): the pair
		// returns, ramping up by slow start.
		h.move(Healthy, h.Cause, now, "retry-after passed", &ch)
		h.SlowStart = true
	default:
		h.move(HalfOpen, h.Cause, now, "cooldown expired", &ch)
		h.ProbeOK = 0
		ch.Probe = true
	}
	return h.end(ch, c, scope)
}

// Operator actions on a record.
type action uint8

const (
	actDrain action = iota + 1
	actEject
	actRestore
	actEvidenceEject // cross-target evidence ejects the route (engine-decided)
	actLift          // an incident opened: undo a cooling its class caused
)

func (h *Health) apply(a action, cause Class, c *Config, scope Scope, now int64) Change {
	ch := h.begin(c, scope)
	switch a {
	case actDrain:
		if h.State != Draining {
			h.move(Draining, h.Cause, now, "drained by operator", &ch)
		}
	case actEject:
		if h.State != Ejected || h.Until != math.MaxInt64 {
			h.move(Ejected, h.Cause, now, "ejected by operator", &ch)
			h.Until = math.MaxInt64 // until restored
		}
	case actEvidenceEject:
		if h.State != Ejected && h.State != Draining {
			h.eject(c, h.Cause, now, "failing recoveries across targets", &ch)
		}
	case actLift:
		if h.State == Cooling && h.Cause == cause {
			h.ConsecFail = 0
			h.move(Healthy, cause, now, "lifted: the target's incident, not the route", &ch)
		}
	case actRestore:
		if h.State != Healthy {
			h.recover(h.Cause, now, "restored by operator", &ch)
		}
	}
	return h.end(ch, c, scope)
}

// coolAfter is the consecutive failures that cool a scope when the latest
// is of rule's class.
func coolAfter(rule Rule, c *Config) int {
	if rule.CoolAfter > 0 {
		return rule.CoolAfter
	}
	return c.CoolAfter
}

// cool starts a cooldown: Retry-After when the target sent one (capped),
// otherwise exponential backoff from the class's base, capped, jittered over
// its upper half so cooled exits do not wake in lockstep and no cooldown
// collapses to zero (full jitter can re-probe a dead exit at once).
func (h *Health) cool(rule Rule, o Observation, c *Config, now int64, reason string, ch *Change) {
	h.forget(c, now)
	d := cooldown(rule.Cooldown, h.Level, o.Jitter, c.CooldownCap)
	if o.RetryAfter > 0 {
		d = min(o.RetryAfter, c.RetryAfterCap)
	}
	h.Level = satInc8(h.Level)
	h.move(Cooling, o.Class, now, reason, ch)
	h.Until = now + int64(d)
}

// cooldown is base·2^level capped at limit, jittered uniformly over its upper
// half by jitter in [0, 1).
func cooldown(base time.Duration, level uint8, jitter float64, limit time.Duration) time.Duration {
	if base <= 0 {
		base = time.Second
	}
	exp := limit
	if level < 40 && base<<level < limit && base<<level > 0 {
		exp = base << level
	}
	half := exp / 2
	return exp - half + time.Duration(jitter*float64(half))
}

// recover returns the record to healthy, ramping up by slow start. The
// failures behind the exclusion are over, as its probes (or an operator)
// just showed: its success average starts afresh, or the record would
// stay too cheap to draw for long after it has recovered; its latency
// stays, and the slow start guards against a relapse.
func (h *Health) recover(cause Class, now int64, reason string, ch *Change) {
	h.FailedRecoveries = 0
	h.Success, h.ConsecFail = 1, 0
	h.move(Healthy, cause, now, reason, ch)
	h.SlowStart = true
}

// forget drops the backoff of a record healthy for long: the cooldown
// level after a calm CooldownCap, the ejection count after a calm EjectCap
// (seed 000: an exit that has served well for an hour starts again from
// the shortest ejection). Called as trouble starts, before the level or
// count grows.
func (h *Health) forget(c *Config, now int64) {
	if h.State != Healthy {
		return
	}
	if now-h.Since > int64(c.CooldownCap) {
		h.Level = 0
	}
	if now-h.Since > int64(c.EjectCap) {
		h.Ejections = 0
	}
}

func (h *Health) eject(c *Config, cause Class, now int64, reason string, ch *Change) {
	h.forget(c, now)
	d := c.EjectCap
	if h.Ejections < 40 && c.EjectTime<<h.Ejections < c.EjectCap {
		d = c.EjectTime << h.Ejections
	}
	h.Ejections = satInc8(h.Ejections)
	h.FailedRecoveries = 0
	h.move(Ejected, cause, now, reason, ch)
	h.Until = now + int64(d)
}

func (h *Health) move(to State, cause Class, now int64, reason string, ch *Change) {
	h.State = to
	h.Gen++
	h.Since = now
	h.Cause = cause
	h.Until = 0
	h.SlowStart = false
	ch.Reason = reason
}

func (h *Health) begin(c *Config, scope Scope) Change {
	s := h.score(c, scope)
	return Change{From: h.State, OldCause: h.Cause, OldScore: s}
}

func (h *Health) end(ch Change, c *Config, scope Scope) Change {
	ch.To = h.State
	ch.Gen = h.Gen
	ch.Until = h.Until
	ch.Cause = h.Cause
	ch.ProbeSeq = h.ProbeOK
	ch.SlowStart = h.SlowStart
	ch.NewScore = h.score(c, scope)
	return ch
}

func (h *Health) score(c *Config, scope Scope) float64 {
	if scope == ScopeTarget {
		return h.targetFactor(c)
	}
	return h.Score(c)
}

// lastTouched is when evidence or a transition last touched the record.
func (h *Health) lastTouched() int64 {
	return max(h.LastSuccess, h.LastFailure, h.Since)
}

// slowStart is the weight multiplier of a recently recovered record.
func (h *Health) slowStart(c *Config, now int64) float64 {
	if !h.SlowStart {
		return 1
	}
	f := float64(now-h.Since) / float64(c.SlowStart)
	if f >= 1 {
		return 1
	}
	return c.SlowStartFloor + (1-c.SlowStartFloor)*max(f, 0)
}

func satInc8(v uint8) uint8 {
	if v == ^uint8(0) {
		return v
	}
	return v + 1
}

package engine

import "time"

// Config tunes the engine. The zero value of every field means its default
// (listed with the field); a field that can be turned off says how. Defaults
// are applied in one pass by New, so a Config read back from Engine.Config
// shows the values in force.
type Config struct {
	// Rules is the outcome rule table. Default: DefaultRules().
	Rules *Rules

	// Alpha is the EWMA weight of the newest sample. Default 0.3.
	Alpha float64
	// Gamma sharpens the success probability in a route's cost: the
	// expected time to a valid answer is latency × (in-flight + 1) ÷
	// score^Gamma (docs/design/005-cost.md). Default 2.
	Gamma float64
	// Sharpness is how strongly selection prefers cheaper routes: a route
	// is drawn with weight cost^-Sharpness. Default 6 (measured against 4
	// and 8 in docs/design/005-cost.md).
	Sharpness float64
	// LatencyDecay is how fast the peak-EWMA latency forgets a spike once
	// faster samples come (as Finagle's decayTime). Default 10s.
	LatencyDecay time.Duration
	// LatencyForget is how fast a route's latency estimate, without new
	// samples, returns to the pool's typical latency: a slow exit that lost
	// its traffic is tried again in time. Default 2m: measured against 1m
	// and 5m in the simulator (docs/design/005-cost.md).
	LatencyForget time.Duration
	// DeadlineFactor × the 99th percentile of a route's time to an answer
	// (of its pair with the target when known, else the slower of the
	// route's and the target's) is an attempt's deadline, clamped between
	// DeadlineFloor and the Request's Timeout. Defaults 3 and 1s.
	DeadlineFactor float64
	DeadlineFloor  time.Duration
	// UncheckedCandidates lets a new route take users' traffic before its
	// first probe has passed. By default a candidate is probed first (a
	// neutral probe) and ramps up by slow start after it passes.
	UncheckedCandidates bool
	// Prior is the score assumed before any evidence. Default 0.6.
	// Selection shrinks toward the pool's typical success instead once its
	// routes have evidence (docs/design/005-cost.md): a route that joins a
	// pool of veterans is priced as one of them, not as a suspect.
	Prior float64
	// PriorSamples is how many samples weigh as much as the prior, so a
	// route that succeeded once is not a veteran. Default 5.
	PriorSamples float64

	// Window is the span of the sliding failure-rate window (6 buckets).
	// Default 60s.
	Window time.Duration
	// MinVolume is the number of samples the window needs before its failure
	// rate is judged. Default 10.
	MinVolume int
	// SuspectAfter consecutive breaker failures make a scope suspect; so does
	// a window failure rate of SuspectRate. Defaults 2 and 0.3.
	SuspectAfter int
	SuspectRate  float64
	// CoolAfter consecutive breaker failures cool a scope; so does a window
	// failure rate of CoolRate. Defaults 4 and 0.6.
	CoolAfter int
	CoolRate  float64
	// RecoverAfter consecutive successes return a suspect scope to healthy,
	// provided the window failure rate is under SuspectRate: fast to fail,
	// slow to recover. Default 3.
	RecoverAfter int
	// SuspectWeight multiplies a suspect route's selection weight. Default 0.5.
	SuspectWeight float64

	// CooldownCap caps exponential cooldowns. Default 10m.
	CooldownCap time.Duration
	// RetryAfterCap caps a target's Retry-After. Default 10m.
	RetryAfterCap time.Duration
	// ProbeSuccesses is the number of successful probes that restore a
	// half-open scope. Default 2.
	ProbeSuccesses int
	// SlowStart is how long a recovered route takes to ramp from
	// SlowStartFloor to its full weight. Defaults 30s and 0.1.
	SlowStart      time.Duration
	SlowStartFloor float64

	// EjectAfter consecutive failed recoveries of a route's global scope
	// (neutral probes) eject it; so do failed recoveries on EjectTargets
	// distinct targets. Defaults 3 and 3.
	EjectAfter   int
	EjectTargets int
	// EjectTime is the first ejection's length; each further ejection
	// doubles it up to EjectCap. Defaults 1m (measured: a route back from a
	// 3-minute outage regains its share in about 2 minutes, against never
	// within the run at 5m) and 1h.
	EjectTime time.Duration
	EjectCap  time.Duration

	// MaxRemovedShare caps the share of routes that may be cooling,
	// half-open or ejected at once (counted after the new removal, as
	// Envoy's max_ejection_percent), unless the evidence is overwhelming:
	// OverwhelmingAfter consecutive route-global failures. Negative disables
	// the cap. Defaults 0.2 and 8.
	MaxRemovedShare   float64
	OverwhelmingAfter int
	// PanicThreshold: when fewer than this share of routes (or, per target,
	// of the routes not excluded for it; a pair the site refused (blocked)
	// or is pacing with a Retry-After is not excluded for this) are
	// eligible, stop excluding and spread load over all of them. Negative
	// disables panic. Default 0.5.
	PanicThreshold float64

	// IncidentRoutes distinct routes failing a target with the same
	// incident class, making up IncidentShare of the distinct routes that
	// tried it in IncidentWindow, open an incident. Defaults 5 (at most 64),
	// 0.5 and 60s.
	IncidentRoutes int
	IncidentShare  float64
	IncidentWindow time.Duration

	// Learned pacing (pace.go): at a 429 a route×target pair is held to
	// the rate the site admitted it at over the last PaceWindow, or, with
	// too few requests counted, to PaceStart requests/s at its first 429
	// and half its rate at each further one; a site that bans exits after
	// bursts holds every pair under the tolerance its bans show. Rates are
	// never under PaceFloor and grow by PaceGrowth a minute, up to
	// PaceMax, where they are forgotten. Negative PaceStart turns learned
	// pacing off. Defaults 4, 0.05, 1.1, 100 and 1m.
	PaceStart  float64
	PaceFloor  float64
	PaceGrowth float64
	PaceMax    float64
	PaceWindow time.Duration

	// TierEscalateBelow: a target whose latest answers through the cost
	// tier it is served from are valid less often than this moves up to
	// the next tier (docs/design/015-tiers.md). Default 0.5.
	TierEscalateBelow float64
	// TierCalm is how long an escalated target stays on its tier before
	// the tier below is tried again; doubled, up to TierCalmMax, each time
	// that try fails within one calm period. Defaults 1m and 30m.
	TierCalm    time.Duration
	TierCalmMax time.Duration

	// Picker chooses among eligible routes. Default PowerOfTwo (measured
	// against WeightedRandom in docs/design/005-cost.md).
	Picker Picker
	// LeaseTTL is how long a lease lives before it is reaped as an
	// ambiguous timeout. Default 2m.
	LeaseTTL time.Duration
	// SessionTTL is how long an idle session binding lives. Default 10m.
	SessionTTL time.Duration
	// PairTTL is how long an idle route×target record is kept. Default 30m.
	PairTTL time.Duration
	// ScoreEventStep is the score change that publishes a score event.
	// Default 0.05.
	ScoreEventStep float64
	// Seed, when nonzero, makes every random choice reproducible (for the
	// simulator and tests); it serializes the random source, so leave it zero
	// in production.
	Seed uint64
}

// ConfigError names the Config field that is out of range.
type ConfigError struct {
	Field string // the Go field name, e.g. "Alpha"
	Want  string // the range it must be in, e.g. "in (0, 1]"
}

func (e *ConfigError) Error() string { return "engine: config " + e.Field + " must be " + e.Want }

// Validate reports the first field of c, defaults applied, that is out of
// range, as a *ConfigError; New fails with the same error.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// DefaultConfig returns the defaults in force for a zero Config.
func DefaultConfig() Config {
	c, _ := Config{}.normalize()
	return c
}

func (c Config) normalize() (Config, error) {
	if c.Rules == nil {
		rules := DefaultRules()
		c.Rules = &rules
	}
	setF := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	setI := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setF(&c.Alpha, 0.3)
	setF(&c.Gamma, 2)
	setF(&c.Sharpness, 6)
	setD(&c.LatencyDecay, 10*time.Second)
	setD(&c.LatencyForget, 2*time.Minute)
	setF(&c.DeadlineFactor, 3)
	setD(&c.DeadlineFloor, time.Second)
	setF(&c.Prior, 0.6)
	setF(&c.PriorSamples, 5)
	setD(&c.Window, time.Minute)
	setI(&c.MinVolume, 10)
	setI(&c.SuspectAfter, 2)
	setF(&c.SuspectRate, 0.3)
	setI(&c.CoolAfter, 4)
	setF(&c.CoolRate, 0.6)
	setI(&c.RecoverAfter, 3)
	setF(&c.SuspectWeight, 0.5)
	setD(&c.CooldownCap, 10*time.Minute)
	setD(&c.RetryAfterCap, 10*time.Minute)
	setI(&c.ProbeSuccesses, 2)
	setD(&c.SlowStart, 30*time.Second)
	setF(&c.SlowStartFloor, 0.1)
	setI(&c.EjectAfter, 3)
	setI(&c.EjectTargets, 3)
	setD(&c.EjectTime, time.Minute)
	setD(&c.EjectCap, time.Hour)
	setF(&c.MaxRemovedShare, 0.2)
	setI(&c.OverwhelmingAfter, 8)
	setF(&c.PanicThreshold, 0.5)
	setI(&c.IncidentRoutes, 5)
	setF(&c.IncidentShare, 0.5)
	setD(&c.IncidentWindow, time.Minute)
	setF(&c.PaceStart, 4)
	setF(&c.PaceFloor, 0.05)
	setF(&c.PaceGrowth, 1.1)
	setF(&c.PaceMax, 100)
	setD(&c.PaceWindow, time.Minute)
	setF(&c.TierEscalateBelow, 0.5)
	setD(&c.TierCalm, time.Minute)
	setD(&c.TierCalmMax, 30*time.Minute)
	if c.Picker == nil {
		c.Picker = PowerOfTwo{}
	}
	setD(&c.LeaseTTL, 2*time.Minute)
	setD(&c.SessionTTL, 10*time.Minute)
	setD(&c.PairTTL, 30*time.Minute)
	setF(&c.ScoreEventStep, 0.05)
	return c, c.validate()
}

func (c *Config) validate() error {
	checks := []struct {
		name string
		ok   bool
		want string
	}{
		{"Alpha", c.Alpha > 0 && c.Alpha <= 1, "in (0, 1]"},
		{"Gamma", c.Gamma > 0 && c.Gamma <= 16, "in (0, 16]"},
		{"Sharpness", c.Sharpness > 0 && c.Sharpness <= 16, "in (0, 16]"},
		{"LatencyDecay", c.LatencyDecay > 0, "positive"},
		{"LatencyForget", c.LatencyForget > 0, "positive"},
		{"DeadlineFactor", c.DeadlineFactor >= 1, "at least 1"},
		{"DeadlineFloor", c.DeadlineFloor > 0, "positive"},
		{"Prior", c.Prior > 0 && c.Prior <= 1, "in (0, 1]"},
		{"PriorSamples", c.PriorSamples > 0, "positive"},
		{"Window", c.Window >= windowBuckets*time.Millisecond, "at least 6ms"},
		{"MinVolume", c.MinVolume > 0, "positive"},
		{"SuspectAfter", c.SuspectAfter > 0, "positive"},
		{"CoolAfter", c.CoolAfter >= c.SuspectAfter, "at least SuspectAfter"},
		{"SuspectRate", c.SuspectRate > 0 && c.SuspectRate <= 1, "in (0, 1]"},
		{"CoolRate", c.CoolRate >= c.SuspectRate && c.CoolRate <= 1, "in [SuspectRate, 1]"},
		{"RecoverAfter", c.RecoverAfter > 0, "positive"},
		{"SuspectWeight", c.SuspectWeight > 0 && c.SuspectWeight <= 1, "in (0, 1]"},
		{"CooldownCap", c.CooldownCap > 0, "positive"},
		{"RetryAfterCap", c.RetryAfterCap > 0, "positive"},
		{"ProbeSuccesses", c.ProbeSuccesses > 0 && c.ProbeSuccesses < 256, "in [1, 255]"},
		{"SlowStart", c.SlowStart > 0, "positive"},
		{"SlowStartFloor", c.SlowStartFloor > 0 && c.SlowStartFloor <= 1, "in (0, 1]"},
		{"EjectAfter", c.EjectAfter > 0 && c.EjectAfter < 256, "in [1, 255]"},
		{"EjectTargets", c.EjectTargets > 0, "positive"},
		{"EjectTime", c.EjectTime > 0 && c.EjectCap >= c.EjectTime, "positive and at most EjectCap"},
		{"MaxRemovedShare", c.MaxRemovedShare <= 1, "at most 1 (negative disables)"},
		{"OverwhelmingAfter", c.OverwhelmingAfter > 0, "positive"},
		{"PanicThreshold", c.PanicThreshold <= 1, "at most 1 (negative disables)"},
		{"IncidentRoutes", c.IncidentRoutes > 0 && c.IncidentRoutes <= guardRoutes, "in [1, 64]"},
		{"IncidentShare", c.IncidentShare > 0 && c.IncidentShare <= 1, "in (0, 1]"},
		{"IncidentWindow", c.IncidentWindow > 0, "positive"},
		{"PaceFloor", c.PaceFloor > 0 && (c.PaceStart < 0 || c.PaceFloor <= c.PaceStart), "positive and at most PaceStart"},
		{"PaceGrowth", c.PaceGrowth >= 1, "at least 1"},
		{"PaceMax", c.PaceMax >= c.PaceStart, "at least PaceStart"},
		{"PaceWindow", c.PaceWindow >= windowBuckets*time.Millisecond, "at least 6ms"},
		{"TierEscalateBelow", c.TierEscalateBelow > 0 && c.TierEscalateBelow <= 1, "in (0, 1]"},
		{"TierCalm", c.TierCalm > 0 && c.TierCalmMax >= c.TierCalm, "positive and at most TierCalmMax"},
		{"LeaseTTL", c.LeaseTTL > 0, "positive"},
		{"SessionTTL", c.SessionTTL > 0, "positive"},
		{"PairTTL", c.PairTTL > 0, "positive"},
		{"ScoreEventStep", c.ScoreEventStep > 0, "positive"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return &ConfigError{Field: ch.name, Want: ch.want}
		}
	}
	return nil
}

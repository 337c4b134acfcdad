package engine

import "time"

// Scope says which health record an outcome counts against.
type Scope uint8

// Scopes are bits: a success counts for both the route and its pair.
const (
	ScopeRoute  Scope = 1 << iota // route-global: the exit itself (link, auth, tunnel)
	ScopeTarget                   // route×target: this exit against this site
	ScopeNone   Scope = 0         // no evidence: the caller's doing (4xx, cancel)
)

// Rule is what one outcome class means for routing.
type Rule struct {
	Scope    Scope         // which records the outcome updates
	Breaker  bool          // counts toward the failure thresholds that move states
	Retry    bool          // the request may be retried on another route
	AtOnce   bool          // one occurrence cools the scope (407, 429): no need to wait for thresholds
	Incident bool          // counts toward the target incident guard
	Cooldown time.Duration // base of the exponential cooldown this class starts
	// CoolAfter, when nonzero, replaces Config.CoolAfter for this class:
	// consecutive failures ending in this class that cool the scope.
	CoolAfter int
	// Timeout marks a class where the attempt waited for an answer that
	// never came: its latency is a lower bound on the exit's, and feeds the
	// latency estimate.
	Timeout bool
}

// Rules is the outcome rule table. Changing routing behaviour for a class is
// one edit here; bump Version with it so recorded events say which rules
// produced them.
type Rules struct {
	Version string
	Class   [numClasses]Rule
}

// DefaultRules returns the rule table in force unless a Config names
// another: a copy, so a caller that edits it (a class's cooldown) edits its
// own and no other engine's.
func DefaultRules() Rules { return defaultRules }

// defaultRules is DefaultRules' table, never written.
// Target-scoped failures never touch the route's global evidence: a 403 from
// one site says nothing about the exit's other sites. Only OK feeds latency
// (see Evidence.observe), so fast rejections never look like fast successes.
var defaultRules = Rules{
	Version: "rules/2026-12-01.1",
	Class: [numClasses]Rule{
		OK: {Scope: ScopeRoute | ScopeTarget},
		// A refused connection is the exit saying it is down, not noise:
		// two in a row cool it (measured: half the wasted attempts on the
		// flapping and outage scenarios, no false ejections). The pool guard
		// still caps how many can cool at once, in case it is the gateway's
		// own network failing.
		ProxyConnectFailed: {Scope: ScopeRoute, Breaker: true, Retry: true, Cooldown: 10 * time.Second, CoolAfter: 2},
		// The exit took the request and said nothing until the attempt's
		// deadline. Its time feeds the latency estimate, so one timeout
		// already takes most of the exit's traffic away (its cost jumps);
		// the thresholds then cool it. A timeout through a route that
		// answered other requests meanwhile is the target's and is scored
		// as target_timeout instead (Engine.observe).
		ProxyTimeout: {Scope: ScopeRoute, Breaker: true, Retry: true, Timeout: true, Cooldown: 10 * time.Second},
		// 407 is misconfiguration: every request will fail until an operator
		// fixes the credentials, so cool at once and for long.
		ProxyAuth: {Scope: ScopeRoute, Breaker: true, Retry: true, AtOnce: true, Cooldown: 5 * time.Minute},
		// The exit answered but would not carry this target (a CONNECT
		// refused with 5xx, a SOCKS5 "host unreachable"): the exit is alive,
		// the way to this site is not, and many exits failing it is the
		// site being down.
		TunnelFailed:  {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 10 * time.Second},
		DNSFailed:     {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 30 * time.Second},
		TLSFailed:     {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 30 * time.Second},
		TargetTimeout: {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Timeout: true, Cooldown: 10 * time.Second},
		TargetReset:   {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 10 * time.Second},
		// A 429 is the site telling this exit to slow down, for the
		// Retry-After: never a sign the site is down, so no incident, which
		// would freeze the cooling and send on into more 429s (measured on
		// the rate-limited scenario). The engine also learns a rate per pair
		// from it (pace.go).
		RateLimited: {Scope: ScopeTarget, Retry: true, AtOnce: true, Cooldown: 10 * time.Second},
		// A site banning an exit says so plainly: one 403 (or captcha page)
		// cools the pair, briefly at first, then longer each time its probe
		// meets the ban again. Measured against two in a row with a 2m base:
		// 21 wasted attempts instead of 37 on target-bans, 38 instead of 76
		// on soft-ban, and fewer on flaky-403, a firewall answering 403 to
		// any exit now and then, with the same completion. The incident
		// guard covers a site blocking all.
		Blocked:        {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 30 * time.Second, CoolAfter: 1},
		Target5xx:      {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 10 * time.Second},
		ContentInvalid: {Scope: ScopeTarget, Breaker: true, Retry: true, Incident: true, Cooldown: 30 * time.Second, CoolAfter: 1},
		ClientError:    {},
		Canceled:       {},
	},
}

// Rule returns the rule for class c.
func (r *Rules) Rule(c Class) Rule {
	if int(c) < len(r.Class) {
		return r.Class[c]
	}
	return Rule{}
}

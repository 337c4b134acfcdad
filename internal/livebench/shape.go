package livebench

import (
	"errors"
	"fmt"
	"time"
)

// Shape is one exit's fault profile. The zero value is a healthy exit
// adding no latency. Exit-level faults (latency, dead, blackhole, 407) are
// the exit's own; Sites says how each site treats traffic coming from it,
// as a real site treats an exit's IP address.
type Shape struct {
	Latency time.Duration // added by the exit before it forwards or tunnels
	Jitter  float64       // latency varies by ± this fraction, seeded; in [0, 1)
	Dead    bool          // nothing listens: connecting is refused
	// Blackhole: the exit accepts TCP and never answers anything.
	Blackhole bool
	// BlackholeFrom and BlackholeTo, fractions of the run in [0, 1], make
	// the exit a blackhole only between them (none when equal).
	BlackholeFrom, BlackholeTo float64
	Auth407                    bool    // answers every request and CONNECT with 407
	Flaky                      float64 // share of the site's answers through this exit that are 502/503, in [0, 1)
	Sites                      map[string]SiteRule
}

// SiteRule is how one site treats one exit's traffic. The zero value is
// a normal answer.
type SiteRule struct {
	Banned  bool // 403 on every request
	Captcha bool // 200 with the fleet's captcha page
	// RateLimit: more than PerSecond requests a second (a token bucket of
	// that burst) earn 429 with Retry-After for Penalty.
	RateLimit *RateLimit
	// BurstBan: more than Requests within Window earn 403 for Penalty.
	// Requests during a penalty neither count nor extend it.
	BurstBan *BurstBan
}

// RateLimit is a per-exit, per-site request rate limit.
type RateLimit struct {
	PerSecond int
	Penalty   time.Duration
}

// BurstBan bans an exit from a site for a while after a burst.
type BurstBan struct {
	Requests int
	Window   time.Duration
	Penalty  time.Duration
}

// Usual latencies of the pools' exits and their spread, as real exits
// answer: a good residential or datacenter exit in 100–300 ms, a poor one
// in a second or more. Fast is the low end of good on purpose: the
// benchmark measures routing decisions, and at 32 workers it is ~300
// requests a second, which a 2-core machine carries without the gateways'
// CPU becoming the bottleneck.
const (
	fastLatency = 100 * time.Millisecond
	fastJitter  = 0.3 // 70–130 ms
	slowLatency = time.Second
	slowJitter  = 0.2 // 0.8–1.2 s
)

// The building blocks of pools. Each returns a fresh Shape, so a pool can
// modify one without touching another.

// fast is a healthy exit that adds about 100 ms.
func fast() Shape { return Shape{Latency: fastLatency, Jitter: fastJitter} }

// slow is a working exit that adds about a second.
func slow() Shape { return Shape{Latency: slowLatency, Jitter: slowJitter} }

// dead refuses connections.
func dead() Shape { return Shape{Dead: true} }

// blackholed accepts connections and never answers.
func blackholed() Shape { return Shape{Blackhole: true} }

// auth407 is an exit whose credentials are wrong.
func auth407() Shape { return Shape{Latency: fastLatency, Auth407: true} }

// flaky is a fast exit through which 30% of answers are 502 or 503.
func flaky() Shape { s := fast(); s.Flaky = 0.3; return s }

// blackholedDuring makes s a blackhole between two fractions of the run.
func (s Shape) blackholedDuring(from, to float64) Shape {
	s.BlackholeFrom, s.BlackholeTo = from, to
	return s
}

// on returns s with rule added to how site treats it.
func (s Shape) on(site string, rule func(*SiteRule)) Shape {
	sites := make(map[string]SiteRule, len(s.Sites)+1)
	for k, v := range s.Sites {
		sites[k] = v
	}
	r := sites[site]
	rule(&r)
	sites[site] = r
	s.Sites = sites
	return s
}

// The rules of SiteRule, to pass to Shape.on.
func banned(r *SiteRule)  { r.Banned = true }
func captcha(r *SiteRule) { r.Captcha = true }
func rateLimited(perSecond int, penalty time.Duration) func(*SiteRule) {
	return func(r *SiteRule) { r.RateLimit = &RateLimit{PerSecond: perSecond, Penalty: penalty} }
}
func burstBanned(requests int, window, penalty time.Duration) func(*SiteRule) {
	return func(r *SiteRule) { r.BurstBan = &BurstBan{Requests: requests, Window: window, Penalty: penalty} }
}

// validate says what is wrong with s, if anything.
func (s Shape) validate() error {
	switch {
	case s.Latency < 0 || s.Jitter < 0 || s.Jitter >= 1:
		return errors.New("latency must be >= 0 and jitter in [0, 1)")
	case s.Flaky < 0 || s.Flaky >= 1:
		return errors.New("flaky share must be in [0, 1)")
	case s.BlackholeFrom < 0 || s.BlackholeTo > 1 || s.BlackholeFrom > s.BlackholeTo:
		return errors.New("blackhole window must satisfy 0 <= from <= to <= 1")
	}
	for site, r := range s.Sites {
		// Limits of at least 2 leave the oracle's mirror a margin of one.
		if l := r.RateLimit; l != nil && (l.PerSecond < 2 || l.Penalty <= 0) {
			return fmt.Errorf("site %s: rate limit needs PerSecond >= 2 and a penalty", site)
		}
		if b := r.BurstBan; b != nil && (b.Requests < 2 || b.Window <= 0 || b.Penalty <= 0) {
			return fmt.Errorf("site %s: burst ban needs Requests >= 2, a window and a penalty", site)
		}
	}
	return nil
}

// Package target names the site behind a request's host and finds the
// settings an operator gave it: the target key the engine keeps evidence
// under (the registrable domain unless a rule says otherwise), the page
// its probes fetch, its soft-ban signatures and its pacing.
package target

import (
	"net"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/switchyard/switchyard/internal/pacing"
)

// Rule is one operator rule: the settings of the hosts it matches.
type Rule struct {
	// Hosts are "example.com" (that host), "*.example.com" (its
	// subdomains, not example.com itself) or "*" (every host).
	Hosts []string
	// Key names the target these hosts count as; "" keeps the registrable
	// domain.
	Key string
	Policy
}

// Policy is what applies to a request's target.
type Policy struct {
	ProbePath       string   // path half-open probes fetch; "" is "/"
	BlockSignatures []string // body substrings that mark an answer a soft ban
	// NoBuiltinSignatures turns off the built-in challenge and block page
	// signatures (signatures.go) for the target.
	NoBuiltinSignatures bool
	// NoLookalike turns off the lookalike detector (internal/lookalike)
	// for the target, a site whose routes rightly get different pages (a
	// page per region, say): docs/design/011-lookalike.md.
	NoLookalike bool
	Pace        pacing.Limits
	NoHedge     bool // requests to the target are never hedged
}

// Rules maps hosts to targets. The first rule that matches a host applies;
// a host no rule matches gets its registrable domain and the zero Policy.
// Immutable; safe for concurrent use.
type Rules struct {
	keyed    map[string]int // target key → first rule giving it
	exact    map[string]int // host → first rule naming it
	suffixes []suffixRule   // "*.example.com" patterns, in rule order
	any      int            // first rule with "*"; -1 for none
	rules    []Rule
}

type suffixRule struct {
	suffix string // ".example.com"
	rule   int
}

// New compiles rules; patterns are matched without case and trailing dot.
func New(rules []Rule) *Rules {
	r := &Rules{keyed: make(map[string]int), exact: make(map[string]int), any: -1, rules: slices.Clone(rules)}
	for i, rule := range rules {
		if _, dup := r.keyed[rule.Key]; rule.Key != "" && !dup {
			r.keyed[rule.Key] = i
		}
		for _, h := range rule.Hosts {
			h = canonical(h)
			switch {
			case h == "*":
				if r.any < 0 {
					r.any = i
				}
			case strings.HasPrefix(h, "*."):
				r.suffixes = append(r.suffixes, suffixRule{suffix: h[1:], rule: i})
			default:
				if _, dup := r.exact[h]; !dup {
					r.exact[h] = i
				}
			}
		}
	}
	return r
}

// Resolve returns the target key of host and the policy that applies to it
// (nil when no rule matches).
func (r *Rules) Resolve(host string) (key string, p *Policy) {
	host = canonical(host)
	if i := r.match(host, false); i >= 0 {
		rule := &r.rules[i]
		if rule.Key != "" {
			return rule.Key, &rule.Policy
		}
		return DefaultKey(host), &rule.Policy
	}
	return DefaultKey(host), nil
}

// Matches reports whether a rule matches host: how a list of host
// patterns alone (mitm.bypass) is asked.
func (r *Rules) Matches(host string) bool { return r.match(canonical(host), false) >= 0 }

// Pace is the pacing of target key, which is per target, not per host: that
// of the first rule giving the key, else of the first rule matching the key
// as a host, "*.example.com" matching example.com too. A rule that paces
// without a key must name registrable domains so that its hosts' keys find
// it (config checks this).
func (r *Rules) Pace(key string) pacing.Limits {
	i, ok := r.keyed[key]
	if !ok {
		i = r.match(key, true)
	}
	if i < 0 {
		return pacing.Limits{}
	}
	return r.rules[i].Pace
}

// Paces reports whether any rule paces, so that a gateway without pacing
// skips it.
func (r *Rules) Paces() bool {
	for i := range r.rules {
		if !r.rules[i].Pace.IsZero() {
			return true
		}
	}
	return false
}

// match is the index of the first rule matching host, or -1. A key also
// matches the subdomain patterns of its own domain.
func (r *Rules) match(host string, key bool) int {
	best := -1
	if i, ok := r.exact[host]; ok {
		best = i
	}
	for _, s := range r.suffixes {
		if best >= 0 && s.rule >= best {
			break // suffixes are in rule order: no earlier rule left
		}
		if strings.HasSuffix(host, s.suffix) || key && host == s.suffix[1:] {
			best = s.rule
			break
		}
	}
	if r.any >= 0 && (best < 0 || r.any < best) {
		best = r.any
	}
	return best
}

// DefaultKey is the engine's name for the site behind host: its registrable
// domain, so that www.example.com and img.example.com share one record (a
// site bans an exit, not a hostname). IP literals and single-label names
// are their own key.
func DefaultKey(host string) string {
	host = canonical(host)
	if net.ParseIP(host) != nil || !strings.Contains(host, ".") {
		return host
	}
	if key, err := publicsuffix.EffectiveTLDPlusOne(host); err == nil {
		return key
	}
	return host // a public suffix itself, or malformed: it stands alone
}

func canonical(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

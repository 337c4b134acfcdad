package target

import (
	"net"
	"sync"
	"sync/atomic"
)

// Directory is what a gateway knows of targets: the operator's Rules
// (target keys, probe pages, signatures, pacing), and where users' traffic
// last reached each target, which is where its probes go. A reload replaces
// the rules (With); the origins learned from traffic carry over. The
// gateway and its probes read the same Directory. Safe for concurrent use.
type Directory struct {
	*Rules
	origins *origins
}

// origins are the hosts targets were last asked for, shared by the
// directories a reload derives.
type origins struct {
	byKey   sync.Map               // target key → the host:port last requested for it
	neutral atomic.Pointer[string] // the host of the last origin noted
}

// NewDirectory is a directory of rules (nil: none) that knows no origin
// yet.
func NewDirectory(rules *Rules) *Directory {
	return (&Directory{origins: &origins{}}).With(rules)
}

// With is d under other rules (nil: none), with d's origins.
func (d *Directory) With(rules *Rules) *Directory {
	if rules == nil {
		rules = New(nil)
	}
	return &Directory{Rules: rules, origins: d.origins}
}

// NoteOrigin remembers hostport as where target key was last asked for.
// Most requests repeat the origin already known: those only read.
func (d *Directory) NoteOrigin(key, hostport string) {
	if v, ok := d.origins.byKey.Load(key); !ok || v.(string) != hostport {
		d.origins.byKey.Store(key, hostport)
		h := hostOnly(hostport)
		d.origins.neutral.Store(&h)
	}
}

// Known reports whether an origin of target key was noted.
func (d *Directory) Known(key string) bool {
	_, ok := d.origins.byKey.Load(key)
	return ok
}

// origin is the host:port last noted for key, or key itself.
func (d *Directory) origin(key string) string {
	if v, ok := d.origins.byKey.Load(key); ok {
		return v.(string)
	}
	return key
}

// ProbeURL is the page a route×target probe of target key fetches: the
// rule's probe path (default "/") at the origin users' traffic last
// reached, else at the key itself. The gateway notes as origins the hosts
// of absolute-form requests a target answered and, until one did, the
// first CONNECT tunnel built to the target, so a host admission refused,
// or that never answered, is never probed. A CONNECT target is probed over
// plain HTTP: any answer shows the route reaches the site, and a ban or
// captcha page shows it is refused.
func (d *Directory) ProbeURL(key string) string {
	host := d.origin(key)
	path := "/"
	if p := d.PolicyOf(key); p != nil && p.ProbePath != "" {
		path = p.ProbePath
	}
	return "http://" + host + path
}

// PolicyOf is the policy of target key as its origin's host resolves
// (nil when no rule matches): how a probe's answer there is judged.
func (d *Directory) PolicyOf(key string) *Policy {
	_, p := d.Resolve(hostOnly(d.origin(key)))
	return p
}

// NeutralAuthority is where a neutral probe's CONNECT goes when no probe
// URL is set: port 443, the one every proxy tunnels to, of the host a
// target last answered at, so that the proxy has a real site to reach; ""
// until one did.
func (d *Directory) NeutralAuthority() string {
	if h := d.origins.neutral.Load(); h != nil {
		return net.JoinHostPort(*h, "443")
	}
	return ""
}

// hostOnly is hostport without its port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// Package admit decides which destinations the gateway may reach: SSRF
// admission (docs/security.md lists what is blocked and why).
// Targets are checked twice: as the client wrote the host, read as the
// routes will send it (NormalizeHostPort, CheckHost), before any DNS; and
// as the address actually connected to, after DNS, inside the dialer
// (Control), so a name that resolves or rebinds to an internal address is
// refused too.
package admit

import (
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Error says why a destination was refused.
type Error struct {
	Host   string // the host or address as checked
	Reason string // what it is, e.g. "loopback address"
	// Malformed says the target is no destination at all (an empty host,
	// a bad port, a name IDNA refuses): the client's mistake, which the
	// gateway answers 400, not 403.
	Malformed bool
	Err       error // the cause, if any: the failed lookup of an unresolvable name
}

// Error reads "blocked: <reason> <host>", or for a malformed target
// `malformed target "<host>": <reason>`, then ": <cause>" if there is one.
func (e *Error) Error() string {
	msg := "blocked: " + e.Reason + " " + e.Host
	if e.Malformed {
		msg = "malformed target " + strconv.Quote(e.Host) + ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Admission decides which destination addresses the gateway may reach. It
// is immutable and safe for concurrent use.
type Admission struct {
	allowCIDRs []netip.Prefix
	allowHosts map[string]bool // by target key: normalized, lower case, without trailing dots
}

// New returns an Admission that blocks internal destinations except those
// in allowCIDRs and the host names in allowHosts: allow-lists override the
// blocks. A host that is no host at all (see CheckHost) can never be asked
// for, and is ignored.
func New(allowCIDRs []netip.Prefix, allowHosts []string) *Admission {
	a := &Admission{allowHosts: make(map[string]bool, len(allowHosts))}
	for _, p := range allowCIDRs {
		a.allowCIDRs = append(a.allowCIDRs, p.Masked())
	}
	for _, h := range allowHosts {
		if t, err := normalize(h); err == nil {
			a.allowHosts[t.key] = true
		}
	}
	return a
}

// CheckAddr reports why ip must not be reached, or nil. An IPv6 address
// that embeds an IPv4 one (mapped, NAT64, 6to4, Teredo) is judged by it.
func (a *Admission) CheckAddr(ip netip.Addr) error {
	ip = ip.WithZone("")
	if !ip.IsValid() {
		return &Error{Host: "invalid", Reason: "invalid address"}
	}
	if a.allowed(ip) {
		return nil
	}
	if ip.Is4In6() {
		return a.CheckAddr(ip.Unmap())
	}
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			return &Error{Host: ip.String(), Reason: b.reason}
		}
	}
	for _, e := range embedders {
		if !e.prefix.Contains(ip) {
			continue
		}
		for _, v4 := range e.v4(ip.As16()) {
			if err := a.CheckAddr(v4); err != nil {
				inner := err.(*Error)
				return &Error{Host: ip.String(), Reason: inner.Reason + " " + inner.Host + " embedded in " + e.name + " address"}
			}
		}
	}
	return nil
}

func (a *Admission) allowed(ip netip.Addr) bool {
	for _, p := range a.allowCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// AllowsHost reports whether host is on the host allow-list, so that the
// gateway skips the dial-time check for it too.
func (a *Admission) AllowsHost(host string) bool {
	t, err := normalize(host)
	return err == nil && a.allowHosts[t.key]
}

// CheckHost checks a target host as written by the client, before any
// DNS. It reads host as the routes would put it on the wire (see
// NormalizeHostPort, whose host the gateway sends): IDNA maps a non-ASCII
// host first, so full-width and other look-alike digits and letters are
// what they look like; numeric spellings are read as resolvers (inet_aton)
// and browsers (WHATWG URL) read them — decimal "2130706433", octal
// "0177.0.0.1", hex "0x7f000001", short "127.1" — and IPv6 literals with
// or without brackets and zone; any number of trailing dots is dropped.
// An address is then checked (CheckAddr), a name against the blocked
// names (localhost, cloud metadata, private-use domains; see
// docs/security.md); other names pass, to be checked after resolution.
// A malformed host is a Malformed *Error.
func (a *Admission) CheckHost(host string) error {
	t, err := normalize(host)
	if err != nil {
		return err
	}
	return a.checkTarget(host, t)
}

// checkTarget is CheckHost of host once normalized to t.
func (a *Admission) checkTarget(host string, t target) error {
	switch {
	case a.allowHosts[t.key]:
		return nil
	case t.addr.IsValid():
		return a.check(host, t.addr)
	}
	for _, b := range blockedNames {
		if t.key == b.name || b.sub && strings.HasSuffix(t.key, "."+b.name) {
			return as(host, &Error{Host: t.key, Reason: b.reason})
		}
	}
	return nil
}

// check is CheckAddr naming the host as the client wrote it.
func (a *Admission) check(host string, ip netip.Addr) error {
	if err := a.CheckAddr(ip); err != nil {
		return as(host, err.(*Error))
	}
	return nil
}

// as names in e the host as the client wrote it, when e's differs: the
// reason then says what the host was read as.
func as(host string, e *Error) *Error {
	if e.Host != host {
		e.Reason += " " + e.Host + " as"
		e.Host = host
	}
	return e
}

// parseIPv4 reads s as inet_aton does: one to four dot-separated parts,
// each decimal, octal (leading 0) or hex (0x); the last part fills the
// remaining bytes. numeric says every part looks like a number; ok that
// they form an address.
func parseIPv4(s string) (ip netip.Addr, numeric, ok bool) {
	// Every target is read through here: no allocation.
	var vals [4]uint64
	n := 0
	ok = true
	for p := range strings.SplitSeq(s, ".") {
		v, isNum, good := parsePart(p)
		if !isNum {
			return netip.Addr{}, false, false
		}
		if n < len(vals) {
			vals[n] = v
		} else {
			ok = false // more than four parts
		}
		n++
		ok = ok && good
	}
	if !ok {
		return netip.Addr{}, true, false
	}
	var addr uint64
	for i, v := range vals[:n-1] {
		if v > 0xff {
			return netip.Addr{}, true, false
		}
		addr |= v << (24 - 8*i)
	}
	last := vals[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, true, false
	}
	addr |= last
	return netip.AddrFrom4([4]byte{byte(addr >> 24), byte(addr >> 16), byte(addr >> 8), byte(addr)}), true, true
}

// parsePart reads one part of a numeric IPv4 host. isNum says it looks
// like a number (digits, or 0x and hex digits); ok that it is one that
// fits in 32 bits.
func parsePart(p string) (v uint64, isNum, ok bool) {
	base, digits := 10, p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true, true // "0x" is zero to inet_aton and WHATWG alike
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	if p == "" || strings.ContainsFunc(digits, func(c rune) bool {
		return !('0' <= c && c <= '9' || base == 16 && ('a' <= c && c <= 'f' || 'A' <= c && c <= 'F'))
	}) {
		return 0, false, false
	}
	v, err := strconv.ParseUint(digits, base, 32)
	return v, true, err == nil
}

// DialControl is the connect-time check of a connection to host (a
// target's name or address as asked for, without port): Control, or nil
// when host is allow-listed by name, whose addresses are then not checked.
func (a *Admission) DialControl(host string) func(network, address string, c syscall.RawConn) error {
	if a.AllowsHost(host) {
		return nil
	}
	return a.Control()
}

// Control returns a net.Dialer Control function that refuses blocked
// addresses at connect time, after DNS, so a name that resolves (or
// rebinds) to an internal address is never connected to.
func (a *Admission) Control() func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &Error{Host: address, Reason: "unparsable dial address"}
		}
		return a.CheckAddr(ap.Addr())
	}
}

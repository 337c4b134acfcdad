// Package guard decides which destinations the gateway may reach: SSRF
// admission (SPEC §4). Targets are checked twice: as the client wrote the
// host, before any DNS (CheckHost), and as the address actually connected
// to, after DNS, inside the dialer (Control), so a name that resolves or
// rebinds to an internal address is refused too.
package guard

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
}

// Error reads "blocked: <reason> <host>".
func (e *Error) Error() string { return "blocked: " + e.Reason + " " + e.Host }

// Admission decides which destination addresses the gateway may reach. It
// is immutable and safe for concurrent use.
type Admission struct {
	allowCIDRs []netip.Prefix
	allowHosts map[string]bool // lower case, without a trailing dot
}

// NewAdmission blocks internal destinations except those in allowCIDRs and
// the host names in allowHosts: allow-lists override the blocks.
func NewAdmission(allowCIDRs []netip.Prefix, allowHosts []string) *Admission {
	a := &Admission{allowHosts: make(map[string]bool, len(allowHosts))}
	for _, p := range allowCIDRs {
		a.allowCIDRs = append(a.allowCIDRs, p.Masked())
	}
	for _, h := range allowHosts {
		a.allowHosts[canonicalName(h)] = true
	}
	return a
}

// blocked lists the refused ranges, most specific first so the reason
// names the narrowest match.
var blocked = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT) address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata address"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local address"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

// IPv6 ranges that carry an IPv4 address, which is checked in their place.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // RFC 3056: bits 16–47
	teredo = netip.MustParsePrefix("2001::/32")    // RFC 4380: server in bits 32–63, client inverted in the last 32
)

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
	if ip.Is6() {
		b := ip.As16()
		var inner []netip.Addr
		switch {
		case nat64.Contains(ip):
			inner = append(inner, netip.AddrFrom4([4]byte(b[12:16])))
		case sixTo4.Contains(ip):
			inner = append(inner, netip.AddrFrom4([4]byte(b[2:6])))
		case teredo.Contains(ip):
			inner = append(inner, netip.AddrFrom4([4]byte(b[4:8])),
				netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
		}
		for _, v4 := range inner {
			if err := a.CheckAddr(v4); err != nil {
				e := err.(*Error)
				return &Error{Host: ip.String(), Reason: e.Reason + " " + e.Host + " embedded in IPv6 address"}
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
func (a *Admission) AllowsHost(host string) bool { return a.allowHosts[canonicalName(host)] }

// CheckHost checks a target host as written by the client, before any
// DNS. Numeric spellings are read as resolvers (inet_aton) and browsers
// (WHATWG URL) read them — decimal "2130706433", octal "0177.0.0.1", hex
// "0x7f000001", short "127.1" — and IPv6 literals with or without brackets
// and zone; the address is then checked. "localhost" and names under
// ".localhost" are blocked; other names pass, to be checked after
// resolution at dial time.
func (a *Admission) CheckHost(host string) error {
	if a.AllowsHost(host) {
		return nil
	}
	// Both as written and without brackets: "]" can end a zone ("::%]"
	// is "::" in zone "]"), so trimming alone would hide an address.
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, lit := range []string{host, h} {
		if ip, err := netip.ParseAddr(lit); err == nil {
			return a.check(host, ip)
		}
	}
	name := canonicalName(h)
	switch {
	case name == "":
		return &Error{Host: host, Reason: "empty host"}
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return &Error{Host: host, Reason: "loopback name"}
	}
	ip, numeric, ok := parseIPv4(name)
	switch {
	case !numeric:
		return nil
	case !ok:
		// All labels are numbers but not an address: resolvers and
		// browsers refuse it, and so does the gateway rather than guess.
		return &Error{Host: host, Reason: "malformed numeric address"}
	}
	return a.check(host, ip)
}

// check is CheckAddr naming the host as the client wrote it.
func (a *Admission) check(host string, ip netip.Addr) error {
	if err := a.CheckAddr(ip); err != nil {
		e := err.(*Error)
		if e.Host != host {
			e.Reason += " " + e.Host + " as"
			e.Host = host
		}
		return e
	}
	return nil
}

// canonicalName lower-cases a name and drops one trailing dot.
func canonicalName(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// parseIPv4 reads s as inet_aton does: one to four dot-separated parts,
// each decimal, octal (leading 0) or hex (0x); the last part fills the
// remaining bytes. numeric says every part looks like a number; ok that
// they form an address.
func parseIPv4(s string) (ip netip.Addr, numeric, ok bool) {
	parts := strings.Split(s, ".")
	vals := make([]uint64, 0, len(parts))
	ok = len(parts) <= 4
	for _, p := range parts {
		v, isNum, good := parsePart(p)
		if !isNum {
			return netip.Addr{}, false, false
		}
		ok = ok && good
		vals = append(vals, v)
	}
	if !ok {
		return netip.Addr{}, true, false
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, true, false
		}
		n |= v << (24 - 8*i)
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, true, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true, true
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

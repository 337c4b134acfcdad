package admit

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// target is a host as it goes on the wire and as the checks read it.
type target struct {
	wire string     // as sent: an address's canonical spelling, or the name in ASCII
	key  string     // wire in lower case without trailing dots: what names are matched by
	addr netip.Addr // the address, when the host is one in any spelling
}

// normalize reads host as the routes would put it on the wire. A non-ASCII
// host is mapped as net/http maps it before it dials or asks a proxy
// (UTS-46, idna.Lookup.ToASCII), so "１２７.０.０.１" is 127.0.0.1 and
// "ｌｏｃａｌｈｏｓｔ" localhost. An address in any spelling — IPv6 with or
// without brackets, IPv4 as inet_aton and WHATWG URLs read it — is sent in
// its canonical form, IPv4-mapped ones unmapped; a name as IDNA left it,
// with trailing dots collapsed to one. A host that is not UTF-8, that IDNA
// refuses, that only looks numeric, or that has characters no resolver
// accepts is malformed.
func normalize(host string) (target, error) {
	h := host
	if !isASCII(h) {
		if !utf8.ValidString(h) {
			// IDNA would read the bad bytes as U+FFFD: refused rather than guessed at.
			return target{}, malformed(host, "host name is not UTF-8", nil)
		}
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return target{}, malformed(host, "not a valid internationalized host name", err)
		}
		h = a
	}
	// Both as written and without brackets: "]" can end a zone ("::%]"
	// is "::" in zone "]"), so trimming alone would hide an address.
	if ip, err := netip.ParseAddr(h); err == nil {
		return addrTarget(ip.Unmap()), nil
	}
	if lit, ok := strings.CutPrefix(h, "["); ok {
		if ip, err := netip.ParseAddr(strings.TrimSuffix(lit, "]")); err == nil {
			return addrTarget(ip.Unmap()), nil
		}
	}
	key := strings.ToLower(strings.TrimRight(h, "."))
	switch ip, numeric, ok := parseIPv4(key); {
	case ok:
		return addrTarget(ip), nil
	case numeric:
		// All labels are numbers but not an address: resolvers and
		// browsers refuse it, and so does the gateway rather than guess.
		return target{}, malformed(host, "invalid numeric address", nil)
	case key == "":
		return target{}, malformed(host, "empty host", nil)
	}
	if i := strings.IndexFunc(key, func(c rune) bool {
		return !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.')
	}); i >= 0 {
		return target{}, malformed(host, fmt.Sprintf("invalid character %q in host name", key[i]), nil)
	}
	if strings.HasSuffix(h, ".") {
		h = strings.TrimRight(h, ".") + "."
	}
	return target{wire: h, key: key}, nil
}

func addrTarget(ip netip.Addr) target {
	return target{wire: ip.String(), key: ip.String(), addr: ip}
}

// isASCII is net/http's test for a host that IDNA leaves alone.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func malformed(host, reason string, err error) *Error {
	return &Error{Host: host, Reason: reason, Malformed: true, Err: err}
}

// NormalizeHostPort reads a target's authority: "host:port" or
// "[v6]:port", and unless needPort a bare host too, for the default port.
// host is the host as normalized for the wire — what CheckHost and
// CheckResolved judge — and hostport is the authority to send the request
// to: host and the port (1–65535, in decimal) rejoined. Sending hostport,
// not the authority as written, makes what was checked what every route
// sends. A malformed authority is a Malformed *Error.
func NormalizeHostPort(authority string, needPort bool) (host, hostport string, err error) {
	if strings.ContainsFunc(authority, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return "", "", malformed(authority, "control character or space", nil)
	}
	h, port, err := net.SplitHostPort(authority)
	if err != nil {
		h, port = authority, ""
	}
	if port == "" && needPort {
		return "", "", malformed(authority, "want host:port", nil)
	}
	t, err := normalize(h)
	if err != nil {
		e := err.(*Error)
		e.Host = authority // the whole of what the client wrote
		return "", "", e
	}
	if port == "" {
		if t.addr.Is6() {
			return t.wire, "[" + t.wire + "]", nil
		}
		return t.wire, t.wire, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case errors.Is(err, strconv.ErrSyntax):
		return "", "", malformed(authority, "port is not a decimal number", nil)
	case err != nil || n == 0:
		return "", "", malformed(authority, "port out of range 1–65535", nil)
	}
	return t.wire, net.JoinHostPort(t.wire, strconv.FormatUint(n, 10)), nil
}

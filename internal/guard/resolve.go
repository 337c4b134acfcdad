package guard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
)

// Resolver is the part of *net.Resolver that CheckResolved needs; tests
// pass a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// CheckResolved is CheckHost for targets carried by an upstream proxy: the
// proxy, not the gateway, connects, so Control never sees the address, and
// a name is resolved here and refused if any of its addresses is blocked
// (as the proxy may pick any). Literals and allow-listed names are not
// resolved. A failed lookup returns a plain error, not an *Error: the
// caller treats it as not refused and lets the proxy resolve, or fail, on
// its own.
func (a *Admission) CheckResolved(ctx context.Context, r Resolver, host string) error {
	if err := a.CheckHost(host); err != nil || a.AllowsHost(host) || isLiteral(host) {
		return err
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return errors.New("guard: no addresses for " + host)
	}
	for _, ip := range addrs {
		if err := a.CheckAddr(ip.Unmap()); err != nil {
			e := err.(*Error)
			return &Error{Host: host, Reason: e.Reason + " " + e.Host + " resolved from"}
		}
	}
	return nil
}

// isLiteral reports whether host is an address as CheckHost reads it (IPv6
// with or without brackets, or any IPv4 spelling), so it has no DNS name.
func isLiteral(host string) bool {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	_, numeric, _ := parseIPv4(canonicalName(h))
	return numeric
}

package admit

import (
	"context"
	"net"
	"net/netip"
)

// Resolver is the part of *net.Resolver that CheckResolved needs; tests
// pass a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// CheckResolved is CheckHost for targets carried by an upstream proxy: the
// proxy, not the gateway, connects, so Control never sees the address, and
// a name is resolved here (in its normalized form, as sent) and refused if
// any of its addresses is blocked, as the proxy may pick any. It fails
// closed: a name that does not resolve, or to nothing, is refused too
// ("unresolvable name", wrapping the lookup's error), since what the
// proxy's resolver would make of it is unknown. Literals and allow-listed
// names are not resolved.
func (a *Admission) CheckResolved(ctx context.Context, r Resolver, host string) error {
	t, err := normalize(host)
	if err != nil {
		return err
	}
	if err := a.checkTarget(host, t); err != nil || t.addr.IsValid() || a.allowHosts[t.key] {
		return err
	}
	addrs, err := r.LookupNetIP(ctx, "ip", t.wire)
	if err != nil || len(addrs) == 0 {
		return &Error{Host: host, Reason: "unresolvable name", Err: err}
	}
	for _, ip := range addrs {
		if err := a.CheckAddr(ip.Unmap()); err != nil {
			e := err.(*Error)
			return &Error{Host: host, Reason: e.Reason + " " + e.Host + " resolved from"}
		}
	}
	return nil
}

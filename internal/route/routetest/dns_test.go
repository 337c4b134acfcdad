package routetest

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// The name server answers its table, follows changes at once, and answers
// NXDOMAIN for unknown names.
func TestDNS(t *testing.T) {
	v4, v6 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1")
	d := NewDNS(t, map[string][]netip.Addr{"a.example.test": {v4, v6}})
	r := d.Resolver()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lookup := func(name string) ([]netip.Addr, error) {
		addrs, err := r.LookupNetIP(ctx, "ip", name)
		slices.SortFunc(addrs, netip.Addr.Compare)
		return addrs, err
	}
	if got, err := lookup("A.example.test"); err != nil || !slices.Equal(got, []netip.Addr{v4, v6}) {
		t.Errorf("lookup: %v, %v; want %v %v", got, err, v4, v6)
	}
	d.Set("a.example.test", netip.MustParseAddr("127.0.0.1"))
	if got, err := lookup("a.example.test"); err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("after the change: %v, %v; want 127.0.0.1", got, err)
	}
	if got, err := lookup("unknown.example.test"); err == nil {
		t.Errorf("unknown name resolved to %v", got)
	}
}

package guard_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/internal/guard"
)

// fakeResolver answers from a table and records the names it was asked.
type fakeResolver struct {
	addrs map[string][]string
	err   error

	mu    sync.Mutex
	asked []string
}

var _ guard.Resolver = (*fakeResolver)(nil)

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.asked = append(r.asked, network+" "+host)
	r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	var ips []netip.Addr
	for _, s := range r.addrs[host] {
		ips = append(ips, netip.MustParseAddr(s))
	}
	return ips, nil
}

func TestCheckResolved(t *testing.T) {
	t.Parallel()
	names := map[string][]string{
		"loopback.example": {"127.0.0.1"},
		"mixed.example":    {"93.184.216.34", "2606:4700::1", "10.0.0.7"},
		"mapped.example":   {"::ffff:169.254.169.254"},
		"public.example":   {"93.184.216.34", "2606:4700::1"},
		"internal.corp":    {"10.1.2.3"},
	}
	lookupErr := errors.New("no such host")
	tests := []struct {
		desc       string
		host       string
		allowHosts []string
		err        error
		reason     string // "" means it passes; see checkErr
		lookupErr  bool   // want a plain (not *guard.Error) error
		asked      bool   // whether the resolver is asked
	}{
		{desc: "resolves to loopback", host: "loopback.example", asked: true,
			reason: "blocked: loopback address 127.0.0.1 resolved from loopback.example"},
		{desc: "one private among public", host: "mixed.example", asked: true,
			reason: "private address 10.0.0.7 resolved from mixed.example"},
		{desc: "IPv4-mapped metadata", host: "mapped.example", asked: true,
			reason: "metadata address 169.254.169.254 resolved from"},
		{desc: "public", host: "public.example", asked: true},
		{desc: "allow-listed name", host: "internal.corp", allowHosts: []string{"internal.corp"}},
		{desc: "loopback literal", host: "127.0.0.1", reason: "loopback"},
		{desc: "decimal literal", host: "2130706433", reason: "loopback"},
		{desc: "public literal", host: "93.184.216.34"},
		{desc: "public IPv6 literal", host: "[2606:4700::1]"},
		{desc: "localhost", host: "localhost", reason: "loopback name"},
		{desc: "lookup error", host: "public.example", err: lookupErr, lookupErr: true, asked: true},
		{desc: "no addresses", host: "nowhere.example", lookupErr: true, asked: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			r := &fakeResolver{addrs: names, err: tc.err}
			err := guard.NewAdmission(nil, tc.allowHosts).CheckResolved(context.Background(), r, tc.host)
			if tc.lookupErr {
				var ge *guard.Error
				if err == nil || errors.As(err, &ge) {
					t.Fatalf("got %v, want a plain lookup error", err)
				}
				if tc.err != nil && !errors.Is(err, tc.err) {
					t.Fatalf("got %v, want it to wrap %v", err, tc.err)
				}
			} else {
				checkErr(t, err, tc.reason)
			}
			if asked := len(r.asked) > 0; asked != tc.asked {
				t.Errorf("resolver asked %q, want asked %v", r.asked, tc.asked)
			} else if asked && r.asked[0] != "ip "+tc.host {
				t.Errorf("resolver asked %q, want %q", r.asked[0], "ip "+tc.host)
			}
		})
	}
}

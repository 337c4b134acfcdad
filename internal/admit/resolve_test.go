package admit_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/internal/admit"
)

// fakeResolver answers from a table and records the names it was asked.
type fakeResolver struct {
	addrs map[string][]string
	err   error

	mu    sync.Mutex
	asked []string
}

var _ admit.Resolver = (*fakeResolver)(nil)

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.asked = append(r.asked, network+" "+host)
	r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	var ips []netip.Addr
	for _, s := range r.addrs[strings.TrimSuffix(host, ".")] { // a trailing dot only says the name is absolute
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
		asked      string // the name the resolver is asked for; "" = not asked
	}{
		{desc: "resolves to loopback", host: "loopback.example", asked: "loopback.example",
			reason: "blocked: loopback address 127.0.0.1 resolved from loopback.example"},
		{desc: "one private among public", host: "mixed.example", asked: "mixed.example",
			reason: "private address 10.0.0.7 resolved from mixed.example"},
		{desc: "IPv4-mapped metadata", host: "mapped.example", asked: "mapped.example",
			reason: "metadata address 169.254.169.254 resolved from"},
		{desc: "public", host: "public.example", asked: "public.example"},
		{desc: "full-width name, resolved as IDNA maps it", host: "ｐｕｂｌｉｃ.example", asked: "public.example"},
		{desc: "full-width name to loopback", host: "ｌｏｏｐｂａｃｋ.example", asked: "loopback.example", reason: "loopback address 127.0.0.1 resolved from"},
		{desc: "trailing dots, resolved as one", host: "public.example..", asked: "public.example."},
		{desc: "allow-listed name", host: "internal.corp", allowHosts: []string{"internal.corp"}},
		{desc: "loopback literal", host: "127.0.0.1", reason: "loopback"},
		{desc: "decimal literal", host: "2130706433", reason: "loopback"},
		{desc: "full-width literal", host: "１２７.０.０.１", reason: "loopback"},
		{desc: "public literal", host: "93.184.216.34"},
		{desc: "public IPv6 literal", host: "[2606:4700::1]"},
		{desc: "localhost", host: "localhost", reason: "loopback name"},
		{desc: "metadata name", host: "metadata.google.internal", reason: "metadata name"},
		{desc: "malformed", host: "a<b.example", reason: "invalid character"},
		{desc: "lookup error", host: "public.example", err: lookupErr, asked: "public.example",
			reason: "blocked: unresolvable name public.example: no such host"},
		{desc: "no addresses", host: "nowhere.example", asked: "nowhere.example", reason: "blocked: unresolvable name nowhere.example"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			r := &fakeResolver{addrs: names, err: tc.err}
			err := admit.New(nil, tc.allowHosts).CheckResolved(context.Background(), r, tc.host)
			checkErr(t, err, tc.reason)
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("got %v, want it to wrap %v", err, tc.err)
			}
			want := []string(nil)
			if tc.asked != "" {
				want = []string{"ip " + tc.asked}
			}
			if !slices.Equal(r.asked, want) {
				t.Errorf("resolver asked %q, want %q", r.asked, want)
			}
		})
	}
}

package guard_test

import (
	"net/netip"
	"testing"

	"github.com/switchyard/switchyard/internal/guard"
)

// FuzzCheckHost: CheckHost never panics, and never passes a host that is
// itself an IP address CheckAddr blocks.
func FuzzCheckHost(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f000001", "127.1", "0x7f.1",
		"169.254.169.254", "0251.0376.0251.0376", "0xa9fea9fe", "[::1]", "fe80::1%eth0",
		"::ffff:127.0.0.1", "64:ff9b::7f00:1", "localhost", "a.localhost.", "example.com",
		"0x", "0.", "1..1", "08", "4294967295", "", "[", "%", "1.2.3.4.5",
	} {
		f.Add(s)
	}
	a := guard.NewAdmission(nil, nil)
	f.Fuzz(func(t *testing.T, host string) {
		err := a.CheckHost(host)
		if err != nil {
			return
		}
		if ip, perr := netip.ParseAddr(host); perr == nil {
			if aerr := a.CheckAddr(ip); aerr != nil {
				t.Fatalf("CheckHost(%q) passed a blocked address: %v", host, aerr)
			}
		}
	})
}

package admit_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/idna"

	"github.com/switchyard/switchyard/internal/admit"
)

// FuzzAdmit: with the dialers' own reading of a host as the oracle, no host
// CheckHost admits reads as a blocked address or a blocked name, and the
// host NormalizeHostPort gives to send reads as the same destination.
// Nothing panics, and every refusal is a *admit.Error.
func FuzzAdmit(f *testing.F) {
	for _, s := range []string{
		// Numeric spellings.
		"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f000001", "127.1", "0x7f.1", "127.0.0.1.",
		"169.254.169.254", "0251.0376.0251.0376", "0xa9fea9fe", "169.16689662", "2852039166",
		"169.254.169.254..", "0", "0x", "0.", "1..1", "08", "4294967295", "4294967296", "1.2.3.4.5",
		// IDNA spellings.
		"１６９.２５４.１６９.２５４", "①⓪.⓪.⓪.①", "１２７.０.０.１", "ｌｏｃａｌｈｏｓｔ", "127。0。0。1",
		"𝟏𝟐𝟕.𝟎.𝟎.𝟏", "０ｘ７ｆ０００００１", "local\u00adhost", "loc\u200balhost", "١٢٧.٠.٠.١",
		"::ｆｆｆｆ:127.0.0.1", "ｍｅｔａｄａｔａ.google.internal", "bücher.example", "local\xffhost",
		// IPv6.
		"[::1]", "::1", "fe80::1%eth0", "::%]", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "64:ff9b::7f00:1",
		"[::169.254.169.254]", "[::10.0.0.1]", "[::ffff:0:169.254.169.254]", "[64:ff9b:1::a9fe:a9fe]",
		"[fec0::1]", "[2002:a9fe:a9fe::]", "[2001:0:4136:e378::80ff:fffe]", "[fd00:ec2::254]",
		"[100::1]", "[2001:db8::1]", "[2606:4700::1%x]:80",
		// Names.
		"localhost", "LocalHost.", "a.localhost", "localhost..", "localhost.localdomain", "ip6-localhost",
		"ip6-loopback", "metadata.google.internal", "Metadata.Google.Internal.", "metadata",
		"instance-data.ec2.internal", "instance-data", "printer.local", "nas.home.arpa",
		"168.63.129.16", "100.100.100.200", "198.18.0.1", "192.0.2.1", "example.com", "1.2.example",
		"", "[", "%", ".", "a<b", "[example.com]",
	} {
		f.Add(s)
	}
	a := admit.New(nil, nil)
	f.Fuzz(func(t *testing.T, host string) {
		if h, hp, err := admit.NormalizeHostPort(host, false); err == nil {
			if h2, hp2, err := admit.NormalizeHostPort(hp, false); h2 != h || hp2 != hp || err != nil {
				t.Fatalf("NormalizeHostPort(%q) = %q, %q, but of that %q, %q, %v", host, h, hp, h2, hp2, err)
			}
		} else if !isAdmitError(err) {
			t.Fatalf("NormalizeHostPort(%q): %v (%T), want a *admit.Error", host, err, err)
		}
		err := a.CheckHost(host)
		if err != nil {
			if !isAdmitError(err) {
				t.Fatalf("CheckHost(%q): %v (%T), want a *admit.Error", host, err, err)
			}
			return
		}
		read, ok := readHost(host)
		if !ok {
			t.Fatalf("CheckHost(%q) passed a host net/http cannot map", host)
		}
		for _, ip := range read.addrs {
			if err := a.CheckAddr(ip); err != nil {
				t.Fatalf("CheckHost(%q) passed a blocked address: %v", host, err)
			}
		}
		if read.name != "" {
			if err := a.CheckHost(read.name); err != nil {
				t.Fatalf("CheckHost(%q) passed what is sent as a blocked name: %v", host, err)
			}
		}
		wire, _, err := admit.NormalizeHostPort(host, false)
		if err != nil {
			return // the gateway refuses it before it checks
		}
		if again, ok := readHost(wire); !ok || !again.same(read) {
			t.Fatalf("CheckHost(%q) judged %+v, but what is sent, %q, reads as %+v", host, read, wire, again)
		}
	})
}

func isAdmitError(err error) bool {
	var ge *admit.Error
	return errors.As(err, &ge)
}

// hostReading is what the dialers and proxies may take a host for.
type hostReading struct {
	addrs []netip.Addr // each address it may be read as, without zone
	name  string       // else the name, lower case, without trailing dots
}

func (r hostReading) same(o hostReading) bool {
	return slices.Equal(r.addrs, o.addrs) && r.name == o.name
}

// readHost reads host as the routes' dialers and proxies may, written apart
// from this package: net/http's mapping of a non-ASCII host (its vendored
// idna.Lookup.ToASCII, before it dials or asks a proxy), then an address as
// net.ParseIP and netip read one, with or without brackets, and as
// inet_aton reads IPv4; else a name. ok is false when net/http cannot map
// the host.
func readHost(host string) (hostReading, bool) {
	h := host
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 {
			var err error
			if h, err = idna.Lookup.ToASCII(host); err != nil {
				return hostReading{}, false
			}
			break
		}
	}
	var r hostReading
	for _, lit := range []string{h, strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")} {
		if ip, err := netip.ParseAddr(lit); err == nil {
			r.addrs = append(r.addrs, ip.WithZone("").Unmap())
		}
		if ip := net.ParseIP(lit); ip != nil {
			r.addrs = append(r.addrs, netip.MustParseAddr(ip.String()).Unmap())
		}
	}
	bare := strings.ToLower(strings.TrimRight(h, "."))
	if ip, ok := inetAton(bare); ok {
		r.addrs = append(r.addrs, ip)
	}
	slices.SortFunc(r.addrs, netip.Addr.Compare)
	r.addrs = slices.Compact(r.addrs)
	if len(r.addrs) == 0 {
		r.name = bare
	}
	return r, true
}

// inetAton is glibc's inet_aton: one to four parts, each decimal, octal
// (leading 0) or hex (0x, alone meaning 0), the last filling the bytes the
// others leave.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint64
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		limit := uint64(0xff)
		if i == len(parts)-1 {
			limit = 1<<(8*(5-len(parts))) - 1
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil || v > limit {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			v <<= 24 - 8*i
		}
		n |= v
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

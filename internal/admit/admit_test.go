package admit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/admit"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		desc   string
		ip     string
		allow  []netip.Prefix
		reason string // "" means allowed
	}{
		{desc: "loopback", ip: "127.0.0.1", reason: "loopback"},
		{desc: "loopback range", ip: "127.255.1.2", reason: "loopback"},
		{desc: "IPv6 loopback", ip: "::1", reason: "loopback"},
		{desc: "10/8", ip: "10.1.2.3", reason: "private"},
		{desc: "172.16/12", ip: "172.31.255.255", reason: "private"},
		{desc: "192.168/16", ip: "192.168.0.1", reason: "private"},
		{desc: "CGNAT", ip: "100.64.0.1", reason: "CGNAT"},
		{desc: "link-local", ip: "169.254.1.1", reason: "link-local"},
		{desc: "metadata", ip: "169.254.169.254", reason: "metadata"},
		{desc: "IPv6 link-local", ip: "fe80::1", reason: "link-local"},
		{desc: "IPv6 link-local with zone", ip: "fe80::1%eth0", reason: "link-local"},
		{desc: "AWS IPv6 metadata", ip: "fd00:ec2::254", reason: "metadata"},
		{desc: "unique-local", ip: "fc00::1", reason: "unique-local"},
		{desc: "multicast", ip: "224.0.0.1", reason: "multicast"},
		{desc: "IPv6 multicast", ip: "ff02::1", reason: "multicast"},
		{desc: "unspecified", ip: "0.0.0.0", reason: "unspecified"},
		{desc: "IPv6 unspecified", ip: "::", reason: "unspecified"},
		{desc: "this network", ip: "0.1.2.3", reason: "this-network"},
		{desc: "broadcast", ip: "255.255.255.255", reason: "broadcast"},
		{desc: "IPv4-mapped loopback", ip: "::ffff:127.0.0.1", reason: "loopback address 127.0.0.1"},
		{desc: "IPv4-mapped metadata", ip: "::ffff:169.254.169.254", reason: "metadata"},
		{desc: "NAT64 of loopback", ip: "64:ff9b::7f00:1", reason: "loopback address 127.0.0.1 embedded"},
		{desc: "NAT64 of private", ip: "64:ff9b::10.0.0.1", reason: "private address 10.0.0.1 embedded"},
		{desc: "6to4 of private", ip: "2002:c0a8:1::", reason: "private address 192.168.0.1 embedded"},
		{desc: "Azure WireServer", ip: "168.63.129.16", reason: "metadata"},
		{desc: "Alibaba metadata", ip: "100.100.100.200", reason: "metadata"},
		{desc: "IETF protocol assignments", ip: "192.0.0.8", reason: "IETF protocol assignment"},
		{desc: "TEST-NET-1", ip: "192.0.2.1", reason: "documentation"},
		{desc: "TEST-NET-2", ip: "198.51.100.1", reason: "documentation"},
		{desc: "TEST-NET-3", ip: "203.0.113.255", reason: "documentation"},
		{desc: "benchmarking", ip: "198.18.0.1", reason: "benchmarking"},
		{desc: "benchmarking, top", ip: "198.19.255.255", reason: "benchmarking"},
		{desc: "IPv4-compatible metadata", ip: "::169.254.169.254", reason: "IPv4-compatible"},
		{desc: "IPv4-compatible private", ip: "::10.0.0.1", reason: "IPv4-compatible"},
		{desc: "IPv4-translated metadata", ip: "::ffff:0:169.254.169.254", reason: "IPv4-translated"},
		{desc: "local-use NAT64 of metadata", ip: "64:ff9b:1::a9fe:a9fe", reason: "metadata address 169.254.169.254 embedded in local-use NAT64"},
		{desc: "6to4 of metadata", ip: "2002:a9fe:a9fe::1", reason: "metadata address 169.254.169.254 embedded in 6to4"},
		{desc: "Teredo client loopback", ip: "2001:0:4136:e378::80ff:fffe", reason: "loopback address 127.0.0.1 embedded in Teredo"},
		{desc: "site-local", ip: "fec0::1", reason: "site-local"},
		{desc: "discard-only", ip: "100::1", reason: "discard-only"},
		{desc: "IPv6 benchmarking", ip: "2001:2::1", reason: "benchmarking"},
		{desc: "IPv6 documentation", ip: "2001:db8::1", reason: "documentation"},
		{desc: "IPv6 documentation, 3fff::/20", ip: "3fff:fff::1", reason: "documentation"},
		{desc: "SRv6 SID", ip: "5f00::1", reason: "SRv6"},
		{desc: "public IPv4", ip: "93.184.216.34"},
		{desc: "local-use NAT64 of public", ip: "64:ff9b:1::808:808"},
		{desc: "next to 198.18/15", ip: "198.20.0.1"},
		{desc: "next to 3fff::/20", ip: "3fff:1000::1"},
		{desc: "public IPv4 mapped", ip: "::ffff:8.8.8.8"},
		{desc: "public IPv6", ip: "2606:4700:4700::1111"},
		{desc: "NAT64 of public", ip: "64:ff9b::808:808"},
		{desc: "next to 172.16/12", ip: "172.32.0.1"},
		{desc: "allow-listed loopback", ip: "127.0.0.1", allow: loopback},
		{desc: "allow-listed loopback, mapped", ip: "::ffff:127.0.0.1", allow: loopback},
		{desc: "allow-list is not a blanket", ip: "10.0.0.1", allow: loopback, reason: "private"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			err := admit.New(tc.allow, nil).CheckAddr(netip.MustParseAddr(tc.ip))
			checkErr(t, err, tc.reason)
		})
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc       string
		host       string
		allowHosts []string
		reason     string // "" means it passes
	}{
		{desc: "dotted", host: "127.0.0.1", reason: "blocked: loopback address 127.0.0.1"},
		{desc: "decimal", host: "2130706433", reason: "loopback address 127.0.0.1 as 2130706433"},
		{desc: "octal", host: "0177.0.0.1", reason: "loopback"},
		{desc: "octal, padded", host: "00000177.0.0.01", reason: "loopback"},
		{desc: "hex", host: "0x7f000001", reason: "loopback"},
		{desc: "hex, upper case", host: "0X7F.0X0.0X0.0X1", reason: "loopback"},
		{desc: "short", host: "127.1", reason: "loopback"},
		{desc: "short, three parts", host: "127.0.1", reason: "loopback"},
		{desc: "trailing dot", host: "127.0.0.1.", reason: "loopback"},
		{desc: "metadata dotted", host: "169.254.169.254", reason: "metadata"},
		{desc: "metadata decimal", host: "2852039166", reason: "metadata"},
		{desc: "metadata octal", host: "0251.0376.0251.0376", reason: "metadata"},
		{desc: "metadata hex", host: "0xa9fea9fe", reason: "metadata"},
		{desc: "metadata mixed", host: "0xa9.254.0251.0xfe", reason: "metadata"},
		{desc: "metadata short", host: "169.16689662", reason: "metadata"},
		{desc: "zero", host: "0", reason: "unspecified"},
		{desc: "IPv6 loopback bracketed", host: "[::1]", reason: "loopback"},
		{desc: "IPv6 with zone", host: "fe80::1%eth0", reason: "link-local"},
		{desc: "zone ending in a bracket", host: "::%]", reason: "unspecified"}, // found by FuzzCheckHost
		{desc: "IPv4-mapped", host: "::ffff:127.0.0.1", reason: "loopback address 127.0.0.1 as ::ffff:127.0.0.1"},
		{desc: "IPv4-mapped hex", host: "[::ffff:7f00:1]", reason: "loopback"},
		{desc: "NAT64", host: "64:ff9b::a9fe:a9fe", reason: "metadata"},
		{desc: "localhost", host: "localhost", reason: "loopback name"},
		{desc: "localhost, upper case, dot", host: "LocalHost.", reason: "loopback name"},
		{desc: "under .localhost", host: "app.localhost", reason: "loopback name"},
		{desc: "octal out of range", host: "0400.0.0.1", reason: `malformed target "0400.0.0.1": invalid numeric address`},
		{desc: "bad octal digit", host: "08.0.0.1", reason: "invalid numeric address"},
		{desc: "five parts", host: "1.2.3.4.5", reason: "invalid numeric address"},
		{desc: "too big", host: "4294967296", reason: "invalid numeric address"},
		{desc: "empty", host: "", reason: `malformed target "": empty host`},
		{desc: "only dots", host: "..", reason: "empty host"},
		{desc: "full-width metadata", host: "１６９.２５４.１６９.２５４", reason: "blocked: metadata address 169.254.169.254 as １６９.２５４.１６９.２５４"},
		{desc: "circled digits", host: "①⓪.⓪.⓪.①", reason: "private address 10.0.0.1 as"},
		{desc: "full-width loopback", host: "１２７.０.０.１", reason: "loopback address 127.0.0.1"},
		{desc: "ideographic full stops", host: "127。0。0。1", reason: "loopback address 127.0.0.1"},
		{desc: "mathematical digits", host: "𝟏𝟐𝟕.𝟎.𝟎.𝟏", reason: "loopback address 127.0.0.1"},
		{desc: "full-width hex", host: "０ｘ７ｆ０００００１", reason: "loopback address 127.0.0.1"},
		{desc: "full-width localhost", host: "ｌｏｃａｌｈｏｓｔ", reason: "blocked: loopback name localhost as ｌｏｃａｌｈｏｓｔ"},
		{desc: "soft hyphen in localhost", host: "local\u00adhost", reason: "loopback name"},
		{desc: "metadata, two trailing dots", host: "169.254.169.254..", reason: "metadata"},
		{desc: "localhost, two trailing dots", host: "localhost..", reason: "loopback name"},
		{desc: "localhost, three trailing dots", host: "localhost...", reason: "loopback name"},
		{desc: "localhost.localdomain", host: "localhost.localdomain", reason: "loopback name"},
		{desc: "ip6-localhost", host: "ip6-localhost", reason: "loopback name"},
		{desc: "ip6-loopback", host: "IP6-Loopback", reason: "loopback name"},
		{desc: "GCP metadata name", host: "metadata.google.internal", reason: "metadata name"},
		{desc: "GCP metadata name, case, dot", host: "Metadata.Google.Internal.", reason: "metadata name"},
		{desc: "GCP short metadata name", host: "metadata", reason: "metadata name"},
		{desc: "AWS metadata name", host: "instance-data.ec2.internal", reason: "metadata name"},
		{desc: "AWS short metadata name", host: "instance-data", reason: "metadata name"},
		{desc: "private-use TLD", host: "db.corp.internal", reason: "private-use name"},
		{desc: "mDNS", host: "printer.local", reason: "link-local name"},
		{desc: "home network", host: "nas.home.arpa", reason: "home network name"},
		{desc: "IPv4-compatible", host: "[::169.254.169.254]", reason: "IPv4-compatible"},
		{desc: "IPv4-compatible private", host: "[::10.0.0.1]", reason: "IPv4-compatible"},
		{desc: "IPv4-translated", host: "[::ffff:0:169.254.169.254]", reason: "IPv4-translated"},
		{desc: "local-use NAT64", host: "[64:ff9b:1::a9fe:a9fe]", reason: "metadata address 169.254.169.254 embedded"},
		{desc: "site-local", host: "[fec0::1]", reason: "site-local"},
		{desc: "IDNA refuses", host: "١٢٧.٠.٠.١", reason: `malformed target "١٢٧.٠.٠.١": not a valid internationalized host name`},
		{desc: "IDNA refuses a colon", host: "::ｆｆｆｆ:127.0.0.1", reason: "not a valid internationalized host name"},
		{desc: "invalid UTF-8", host: "local\xffhost", reason: "not UTF-8"},
		{desc: "bad character", host: "a<b.example", reason: `malformed target "a<b.example": invalid character '<' in host name`},
		{desc: "brackets around a name", host: "[example.com]", reason: "invalid character '['"},
		{desc: "public name", host: "example.com"},
		{desc: "public IDN", host: "bücher.example"},
		{desc: "full-width public name", host: "ｅｘａｍｐｌｅ.com"},
		{desc: "metadata elsewhere", host: "metadata.example.com"},
		{desc: "internal elsewhere", host: "internal.example.com"},
		{desc: "name with underscore", host: "_srv.example.com"},
		{desc: "public dotted", host: "93.184.216.34"},
		{desc: "public decimal", host: "134744072"},
		{desc: "name with numeric labels", host: "1.2.example"},
		{desc: "not localhost", host: "localhost.example.com"},
		{desc: "allow-listed name", host: "localhost", allowHosts: []string{"LOCALHOST."}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			err := admit.New(nil, tc.allowHosts).CheckHost(tc.host)
			checkErr(t, err, tc.reason)
		})
	}
}

// checkErr wants nil when reason is "", else a *admit.Error whose text
// contains reason and starts as its kind says: a refusal "blocked: ", a
// malformed target "malformed target ".
func checkErr(t *testing.T, err error, reason string) {
	t.Helper()
	var ge *admit.Error
	switch {
	case reason == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case reason == "":
	case !errors.As(err, &ge):
		t.Fatalf("got %v (%T), want a *admit.Error about %q", err, err, reason)
	case !strings.Contains(err.Error(), reason):
		t.Fatalf("got %q, want it to name %q", err, reason)
	case ge.Malformed != strings.HasPrefix(err.Error(), "malformed target ") || !ge.Malformed && !strings.HasPrefix(err.Error(), "blocked: "):
		t.Fatalf("got %q (malformed %v): the text does not say what kind of refusal it is", err, ge.Malformed)
	}
}

// A real dial through Control to a 127.0.0.1 listener is refused before
// connecting, unless 127.0.0.0/8 is allow-listed.
func TestControl(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	tests := []struct {
		desc    string
		allow   []netip.Prefix
		wantErr bool
	}{
		{desc: "blocked", wantErr: true},
		{desc: "allow-listed", allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			d := net.Dialer{Timeout: 5 * time.Second, Control: admit.New(tc.allow, nil).Control()}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			var ge *admit.Error
			if c != nil || !errors.As(err, &ge) || ge.Reason != "loopback address" {
				t.Fatalf("dial: %v, %v: want a loopback refusal", c, err)
			}
		})
	}
	t.Cleanup(func() {
		// Only the allow-listed dial may have reached the listener.
		if n := len(accepted); n > 1 {
			t.Errorf("%d connections accepted, want at most 1", n)
		}
	})
}

// DialControl skips the connect-time check only for hosts allow-listed by
// name; any other host gets Control, which refuses a blocked address.
func TestDialControl(t *testing.T) {
	t.Parallel()
	a := admit.New(nil, []string{"intranet.example"})
	tests := []struct {
		desc    string
		host    string
		checked bool
	}{
		{desc: "allow-listed name", host: "Intranet.Example.", checked: false},
		{desc: "other name", host: "rebind.example", checked: true},
		{desc: "address", host: "127.0.0.1", checked: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			control := a.DialControl(tc.host)
			if (control != nil) != tc.checked {
				t.Fatalf("DialControl(%q) checks: %v, want %v", tc.host, control != nil, tc.checked)
			}
			if control != nil {
				checkErr(t, control("tcp", "127.0.0.1:80", nil), "loopback address")
			}
		})
	}
}

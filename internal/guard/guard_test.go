package guard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/guard"
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
		{desc: "public IPv4", ip: "93.184.216.34"},
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
			err := guard.NewAdmission(tc.allow, nil).CheckAddr(netip.MustParseAddr(tc.ip))
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
		{desc: "octal out of range", host: "0400.0.0.1", reason: "malformed numeric"},
		{desc: "bad octal digit", host: "08.0.0.1", reason: "malformed numeric"},
		{desc: "five parts", host: "1.2.3.4.5", reason: "malformed numeric"},
		{desc: "too big", host: "4294967296", reason: "malformed numeric"},
		{desc: "empty", host: "", reason: "empty host"},
		{desc: "public name", host: "example.com"},
		{desc: "public dotted", host: "93.184.216.34"},
		{desc: "public decimal", host: "134744072"},
		{desc: "name with numeric labels", host: "1.2.example"},
		{desc: "not localhost", host: "localhost.example.com"},
		{desc: "allow-listed name", host: "localhost", allowHosts: []string{"LOCALHOST."}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			err := guard.NewAdmission(nil, tc.allowHosts).CheckHost(tc.host)
			checkErr(t, err, tc.reason)
		})
	}
}

// checkErr wants nil when reason is "", else a *guard.Error whose text
// contains reason.
func checkErr(t *testing.T, err error, reason string) {
	t.Helper()
	var ge *guard.Error
	switch {
	case reason == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case reason == "":
	case !errors.As(err, &ge):
		t.Fatalf("got %v (%T), want a *guard.Error about %q", err, err, reason)
	case !strings.Contains(err.Error(), reason) || !strings.HasPrefix(err.Error(), "blocked: "):
		t.Fatalf("got %q, want it to name %q", err, reason)
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
			d := net.Dialer{Timeout: 5 * time.Second, Control: guard.NewAdmission(tc.allow, nil).Control()}
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
			var ge *guard.Error
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
	a := guard.NewAdmission(nil, []string{"intranet.example"})
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

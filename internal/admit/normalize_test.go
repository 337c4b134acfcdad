package admit_test

import (
	"testing"

	"github.com/switchyard/switchyard/internal/admit"
)

func TestNormalizeHostPort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		authority string
		needPort  bool
		host      string // with hostport, the result; both "" when malformed
		hostport  string
		reason    string // when malformed; see checkErr
	}{
		{desc: "name and port", authority: "example.com:80", needPort: true, host: "example.com", hostport: "example.com:80"},
		{desc: "case kept, port canonical", authority: "Example.COM:0080", host: "Example.COM", hostport: "Example.COM:80"},
		{desc: "highest port", authority: "example.com:65535", needPort: true, host: "example.com", hostport: "example.com:65535"},
		{desc: "default port", authority: "example.com", host: "example.com", hostport: "example.com"},
		{desc: "empty port is the default", authority: "example.com:", host: "example.com", hostport: "example.com"},
		{desc: "IPv6", authority: "[::1]:80", needPort: true, host: "::1", hostport: "[::1]:80"},
		{desc: "IPv6, default port", authority: "[2606:4700::1]", host: "2606:4700::1", hostport: "[2606:4700::1]"},
		{desc: "IPv6 with zone", authority: "[fe80::1%eth0]:80", host: "fe80::1%eth0", hostport: "[fe80::1%eth0]:80"},
		{desc: "IPv4-mapped, unmapped", authority: "[::ffff:127.0.0.1]:80", host: "127.0.0.1", hostport: "127.0.0.1:80"},
		{desc: "hex, canonical", authority: "0x7f.1:443", needPort: true, host: "127.0.0.1", hostport: "127.0.0.1:443"},
		{desc: "decimal, canonical", authority: "2130706433", host: "127.0.0.1", hostport: "127.0.0.1"},
		{desc: "full-width, as IDNA maps it", authority: "１２７.０.０.１:80", host: "127.0.0.1", hostport: "127.0.0.1:80"},
		{desc: "IDN", authority: "ｂüｃｈｅｒ.example:80", host: "xn--bcher-kva.example", hostport: "xn--bcher-kva.example:80"},
		{desc: "trailing dots collapsed", authority: "example.com..:80", host: "example.com.", hostport: "example.com.:80"},
		{desc: "missing port", authority: "example.com", needPort: true, reason: `malformed target "example.com": want host:port`},
		{desc: "empty port", authority: "example.com:", needPort: true, reason: "want host:port"},
		{desc: "IPv6 without port", authority: "[::1]", needPort: true, reason: "want host:port"},
		{desc: "empty host", authority: ":29000", reason: `malformed target ":29000": empty host`},
		{desc: "empty", authority: "", reason: "empty host"},
		{desc: "port 0", authority: "example.com:0", reason: `malformed target "example.com:0": port out of range 1–65535`},
		{desc: "port 65536", authority: "example.com:65536", needPort: true, reason: "port out of range"},
		{desc: "huge port", authority: "example.com:99999999999999999999", reason: "port out of range"},
		{desc: "named port", authority: "example.com:http", reason: "port is not a decimal number"},
		{desc: "signed port", authority: "example.com:+80", reason: "port is not a decimal number"},
		{desc: "negative port", authority: "example.com:-1", reason: "port is not a decimal number"},
		{desc: "port with underscore", authority: "example.com:8_0", reason: "port is not a decimal number"},
		{desc: "full-width port", authority: "example.com:８０", reason: "port is not a decimal number"},
		{desc: "two ports", authority: "example.com:80:80", reason: "invalid character ':'"},
		{desc: "space", authority: "a b:80", reason: "control character or space"},
		{desc: "tab", authority: "a\tb:80", needPort: true, reason: "control character or space"},
		{desc: "DEL", authority: "a\x7fb:80", reason: "control character or space"},
		{desc: "IDNA refuses", authority: "١٢٧.٠.٠.١:80", reason: `malformed target "١٢٧.٠.٠.١:80": not a valid internationalized host name`},
		{desc: "full-width colon", authority: "example.com：80", reason: "not a valid internationalized host name"},
		{desc: "bad numeric", authority: "08.0.0.1:80", reason: "invalid numeric address"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			host, hostport, err := admit.NormalizeHostPort(tc.authority, tc.needPort)
			if tc.reason != "" {
				checkErr(t, err, tc.reason)
				if host != "" || hostport != "" {
					t.Errorf("got %q, %q with the error", host, hostport)
				}
				return
			}
			if err != nil || host != tc.host || hostport != tc.hostport {
				t.Fatalf("got %q, %q, %v; want %q, %q", host, hostport, err, tc.host, tc.hostport)
			}
			// What is sent reads back as itself.
			if h, hp, err := admit.NormalizeHostPort(hostport, tc.needPort); h != host || hp != hostport || err != nil {
				t.Errorf("again: got %q, %q, %v", h, hp, err)
			}
		})
	}
}

package route

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func TestParseListRoutes(t *testing.T) {
	t.Parallel()
	type want struct {
		id, host, user, pass string // pass "" = no password
		scheme               Scheme
		labels               string // engine.Labels.String()
		maxInflight, tier    int
		cost, weight         float64
		perRequest, perGB    float64
	}
	tests := []struct {
		desc string
		line string
		want want
	}{
		{desc: "http url with credentials", line: "http://user:pass@192.0.2.1:8080",
			want: want{id: "http://192.0.2.1:8080~04f8996d", scheme: HTTP, host: "192.0.2.1:8080", user: "user", pass: "pass"}},
		{desc: "https without credentials", line: "https://proxy.example.com:443",
			want: want{id: "https://proxy.example.com:443", scheme: HTTPS, host: "proxy.example.com:443"}},
		{desc: "socks5 with percent-encoded credentials", line: "socks5://us%40er:p%3Ass%2Fw%2Bd@198.51.100.7:1080",
			want: want{id: "socks5://198.51.100.7:1080~f6011dca", scheme: SOCKS5, host: "198.51.100.7:1080", user: "us@er", pass: "p:ss/w+d"}},
		{desc: "scheme and host case folded, user name not", line: "HTTP://User:Pass@Proxy.Example.COM:3128",
			want: want{id: "http://proxy.example.com:3128~b512d97e", scheme: HTTP, host: "proxy.example.com:3128", user: "User", pass: "Pass"}},
		{desc: "unencoded specials in password", line: "http://u:p@ss/w#rd?x:y@203.0.113.5:80",
			want: want{id: "http://203.0.113.5:80~0bfe935e", scheme: HTTP, host: "203.0.113.5:80", user: "u", pass: "p@ss/w#rd?x:y"}},
		{desc: "colon in socks5 user", line: "socks5://a%3Ab:pw@198.51.100.7:1080",
			want: want{id: "socks5://198.51.100.7:1080~6783a31e", scheme: SOCKS5, host: "198.51.100.7:1080", user: "a:b", pass: "pw"}},
		{desc: "user without password", line: "socks5://u@203.0.113.5:1080",
			want: want{id: "socks5://203.0.113.5:1080~0bfe935e", scheme: SOCKS5, host: "203.0.113.5:1080", user: "u"}},
		{desc: "empty password", line: "http://u:@203.0.113.5:80",
			want: want{id: "http://203.0.113.5:80~0bfe935e", scheme: HTTP, host: "203.0.113.5:80", user: "u"}},
		{desc: "lone trailing slash", line: "http://203.0.113.5:80/",
			want: want{id: "http://203.0.113.5:80", scheme: HTTP, host: "203.0.113.5:80"}},
		{desc: "ipv6 canonicalized", line: "http://[2001:DB8:0::1]:8080",
			want: want{id: "http://[2001:db8::1]:8080", scheme: HTTP, host: "[2001:db8::1]:8080"}},
		{desc: "port leading zeros", line: "http://203.0.113.5:0080",
			want: want{id: "http://203.0.113.5:80", scheme: HTTP, host: "203.0.113.5:80"}},
		{desc: "ipv4-mapped ipv6 unmapped", line: "http://[::ffff:192.0.2.1]:8080",
			want: want{id: "http://192.0.2.1:8080", scheme: HTTP, host: "192.0.2.1:8080"}},
		{desc: "host:port", line: "192.0.2.1:3128",
			want: want{id: "http://192.0.2.1:3128", scheme: HTTP, host: "192.0.2.1:3128"}},
		{desc: "host:port:user:pass takes the password as written", line: "gw.example.com:3128:user:p@ss#w/r%41d",
			want: want{id: "http://gw.example.com:3128~04f8996d", scheme: HTTP, host: "gw.example.com:3128", user: "user", pass: "p@ss#w/r%41d"}},
		{desc: "host:port:user:pass with ipv6", line: "[2001:db8::2]:3128:u:p",
			want: want{id: "http://[2001:db8::2]:3128~0bfe935e", scheme: HTTP, host: "[2001:db8::2]:3128", user: "u", pass: "p"}},
		{desc: "direct", line: "direct", want: want{id: "direct", scheme: Direct}},
		{desc: "direct any case with labels", line: "DIRECT region=home",
			want: want{id: "direct", scheme: Direct, labels: "region=home"}},
		{desc: "labels sorted", line: "192.0.2.1:80 region=us provider=acme",
			want: want{id: "http://192.0.2.1:80", scheme: HTTP, host: "192.0.2.1:80", labels: "provider=acme region=us"}},
		{desc: "labels with tabs and commas", line: "192.0.2.1:80\tregion=us,provider=acme ,",
			want: want{id: "http://192.0.2.1:80", scheme: HTTP, host: "192.0.2.1:80", labels: "provider=acme region=us"}},
		{desc: "reserved labels consumed", line: "http://u:p@192.0.2.1:80 id=us-1 max_inflight=20 cost=0.4 weight=2.5 region=us",
			want: want{id: "us-1", scheme: HTTP, host: "192.0.2.1:80", user: "u", pass: "p", labels: "region=us", maxInflight: 20, cost: 0.4, weight: 2.5}},
		{desc: "tier and prices", line: "192.0.2.1:80 tier=2 price_per_request=0.002 price_per_gb=4.5 provider=acme",
			want: want{id: "http://192.0.2.1:80", scheme: HTTP, host: "192.0.2.1:80", labels: "provider=acme", tier: 2, perRequest: 0.002, perGB: 4.5}},
		{desc: "zero max_inflight and cost", line: "192.0.2.1:80 max_inflight=0 cost=0",
			want: want{id: "http://192.0.2.1:80", scheme: HTTP, host: "192.0.2.1:80"}},
		{desc: "trailing comment", line: "  192.0.2.1:80 region=us # main exit, p#1",
			want: want{id: "http://192.0.2.1:80", scheme: HTTP, host: "192.0.2.1:80", labels: "region=us"}},
		{desc: "trailing comment after tab", line: "192.0.2.1:80:u:pw#1\t#note",
			want: want{id: "http://192.0.2.1:80~0bfe935e", scheme: HTTP, host: "192.0.2.1:80", user: "u", pass: "pw#1"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes, err := ParseList("proxies.txt", []byte(tt.line))
			if err != nil {
				t.Fatalf("ParseList(%q): %v", tt.line, err)
			}
			if len(routes) != 1 {
				t.Fatalf("ParseList(%q) = %d routes, want 1", tt.line, len(routes))
			}
			r := routes[0]
			var got want
			got.id, got.scheme, got.labels, got.maxInflight, got.cost, got.weight = r.ID, r.Scheme, r.Labels.String(), r.MaxInflight, r.Cost, r.Weight
			got.tier = int(r.Tier)
			if r.Prices != nil {
				got.perRequest, got.perGB = r.Prices.PerRequest, r.Prices.PerGB
			}
			if r.URL != nil {
				got.host = r.URL.Host
				if r.URL.Scheme != string(r.Scheme) {
					t.Errorf("URL scheme %q, route scheme %q", r.URL.Scheme, r.Scheme)
				}
				if r.URL.Path != "" || r.URL.RawQuery != "" || r.URL.Fragment != "" {
					t.Errorf("URL %q has path, query or fragment", r.Redacted())
				}
				if r.URL.User != nil {
					got.user = r.URL.User.Username()
					got.pass, _ = r.URL.User.Password()
				}
			} else if r.Scheme != Direct {
				t.Errorf("route %s has no URL", r.ID)
			}
			if got != tt.want {
				t.Errorf("ParseList(%q) =\n %+v\nwant\n %+v", tt.line, got, tt.want)
			}
			if r.Line != 1 {
				t.Errorf("Line = %d, want 1", r.Line)
			}
		})
	}
}

func TestParseListErrors(t *testing.T) {
	t.Parallel()
	long := "192.0.2.1:80 k=" + strings.Repeat("v", maxLineLen)
	tests := []struct {
		desc string
		list string
		want string // "proxies.txt:LINE: reason" prefix of the error
	}{
		{desc: "empty", list: "", want: "proxies.txt: no routes"},
		{desc: "only comments", list: "# a\n\n   # b\n", want: "proxies.txt: no routes"},
		{desc: "unknown scheme", list: "ftp://192.0.2.1:21", want: `proxies.txt:1: unknown scheme "ftp" (want http, https, socks5 or gateway)`},
		{desc: "socks4", list: "# x\nsocks4://192.0.2.1:1080", want: `proxies.txt:2: unknown scheme "socks4"`},
		{desc: "url missing port", list: "http://192.0.2.1", want: "proxies.txt:1: missing port"},
		{desc: "url empty port", list: "http://192.0.2.1:", want: "proxies.txt:1: missing port"},
		{desc: "colon missing port", list: "proxy.example.com", want: "proxies.txt:1: missing port"},
		{desc: "port not a number", list: "192.0.2.1:8o", want: "proxies.txt:1: invalid port: want a number from 1 to 65535"},
		{desc: "port with sign", list: "http://192.0.2.1:+80", want: "proxies.txt:1: invalid port"},
		{desc: "port too long", list: "192.0.2.1:000080", want: "proxies.txt:1: invalid port"},
		{desc: "port zero", list: "192.0.2.1:0", want: "proxies.txt:1: port out of range: want a number from 1 to 65535"},
		{desc: "port too big", list: "http://192.0.2.1:65536", want: "proxies.txt:1: port out of range"},
		{desc: "url empty host", list: "http://:80", want: "proxies.txt:1: empty host"},
		{desc: "url empty host after credentials", list: "http://u:p@:80", want: "proxies.txt:1: empty host"},
		{desc: "colon empty host", list: ":80", want: "proxies.txt:1: empty host"},
		{desc: "invalid host", list: "http://pro!xy:80", want: `proxies.txt:1: invalid host "pro!xy"`},
		{desc: "ipv6 without brackets", list: "2001:db8::1:8080", want: "proxies.txt:1: IPv6 addresses need brackets"},
		{desc: "ipv6 url without brackets", list: "socks5://2001:db8::1:8080", want: "proxies.txt:1: IPv6 addresses need brackets"},
		{desc: "bad ipv6", list: "http://[2001:db8::zz]:80", want: `proxies.txt:1: invalid IPv6 address "2001:db8::zz"`},
		{desc: "ipv4 in brackets", list: "http://[192.0.2.1]:80", want: `proxies.txt:1: invalid IPv6 address "192.0.2.1"`},
		{desc: "ipv6 zone", list: "http://[fe80::1%25eth0]:80", want: "proxies.txt:1: invalid IPv6 address"},
		{desc: "ipv6 unclosed", list: "http://[2001:db8::1:80", want: `proxies.txt:1: IPv6 address without closing "]"`},
		{desc: "ipv6 no port", list: "[2001:db8::1]", want: "proxies.txt:1: missing port"},
		{desc: "ipv6 junk after bracket", list: "[2001:db8::1]x:80", want: `proxies.txt:1: want ":port" after "]"`},
		{desc: "path", list: "http://192.0.2.1:80/proxy", want: "proxies.txt:1: a proxy URL takes no path, query or fragment"},
		{desc: "double slash", list: "http://192.0.2.1:80//", want: "proxies.txt:1: a proxy URL takes no path"},
		{desc: "query", list: "http://192.0.2.1:80?x=1", want: "proxies.txt:1: a proxy URL takes no path"},
		{desc: "fragment", list: "http://192.0.2.1:80#top", want: "proxies.txt:1: a proxy URL takes no path"},
		{desc: "empty user", list: "http://:pw@192.0.2.1:80", want: "proxies.txt:1: empty user name"},
		{desc: "empty userinfo", list: "http://@192.0.2.1:80", want: "proxies.txt:1: empty user name"},
		{desc: "bad escape in user", list: "http://u%zz:pw@192.0.2.1:80", want: "proxies.txt:1: invalid percent-encoding in the user name"},
		{desc: "bad escape in password", list: "http://u:100%@192.0.2.1:80", want: "proxies.txt:1: invalid percent-encoding in the password (write % as %25)"},
		{desc: "control character in password", list: "http://u:a%0D%0Ab@192.0.2.1:80", want: "proxies.txt:1: password contains a control character"},
		{desc: "colon in http user", list: "https://a%3Ab:pw@192.0.2.1:443", want: `proxies.txt:1: an HTTP proxy user name may not contain ":"`},
		{desc: "control character in user", list: "192.0.2.1:80:u\x00:pw", want: "proxies.txt:1: user name contains a control character"},
		{desc: "socks5 user too long", list: "socks5://" + strings.Repeat("u", 256) + ":p@192.0.2.1:1080", want: "proxies.txt:1: SOCKS5 user name longer than 255 bytes"},
		{desc: "socks5 password too long", list: "socks5://u:" + strings.Repeat("p", 256) + "@192.0.2.1:1080", want: "proxies.txt:1: SOCKS5 password longer than 255 bytes"},
		{desc: "colon user without password", list: "192.0.2.1:80:user", want: "proxies.txt:1: want host:port or host:port:user:pass"},
		{desc: "colon empty password", list: "192.0.2.1:80:user:", want: "proxies.txt:1: empty password in host:port:user:pass"},
		{desc: "colon empty user", list: "192.0.2.1:80::pw", want: "proxies.txt:1: empty user name"},
		{desc: "colon password with colon", list: "192.0.2.1:80:user:pa:ss", want: `proxies.txt:1: too many ":" for host:port:user:pass: in this form the password may not contain ":"`},
		{desc: "credentials without scheme", list: "user:pw@192.0.2.1:80", want: "proxies.txt:1: want host:port or host:port:user:pass (for user:pass@host:port, add a scheme: http://user:pass@host:port)"},
		{desc: "label without value", list: "192.0.2.1:80 region", want: `proxies.txt:1: label "region": missing "="`},
		{desc: "gateway without steering", list: "gateway://u:secret@192.0.2.1:7777", want: `proxies.txt:1: a gateway route needs template="…" or preset=`},
		{desc: "gateway without user", list: "gateway://192.0.2.1:7777 preset=oxylabs", want: "proxies.txt:1: a gateway route needs the account's user name"},
		{desc: "gateway unknown preset", list: "gateway://u:secret@192.0.2.1:7777 preset=acme", want: `proxies.txt:1: gateway option preset: unknown preset "acme"`},
		{desc: "gateway unknown field", list: "# x\ngateway://u:secret@192.0.2.1:7777 template=\"{user}-sesion-{sesion}\"", want: `proxies.txt:2: template "{user}-sesion-{sesion}": unknown field {sesion}`},
		{desc: "gateway unbalanced", list: `gateway://u:secret@192.0.2.1:7777 template="{user}[-session-{session}"`, want: `proxies.txt:1: template "{user}[-session-{session}": "[" is never closed`},
		{desc: "gateway unclosed quote", list: `gateway://u:secret@192.0.2.1:7777 template="{user}`, want: "proxies.txt:1: template: the quote is never closed"},
		{desc: "gateway option twice", list: "gateway://u:secret@192.0.2.1:7777 preset=oxylabs sessions=1 sessions=2", want: "proxies.txt:1: gateway option sessions given twice"},
		{desc: "gateway sessions zero", list: "gateway://u:secret@192.0.2.1:7777 preset=oxylabs sessions=0", want: "proxies.txt:1: gateway option sessions: want a whole number, 1 or more"},
		{desc: "gateway ttl too short", list: "gateway://u:secret@192.0.2.1:7777 preset=oxylabs session_ttl=30s", want: "proxies.txt:1: gateway option session_ttl: want a duration of a minute or more"},
		{desc: "gateway bad session_ids", list: "gateway://u:secret@192.0.2.1:7777 preset=oxylabs session_ids=keep", want: "proxies.txt:1: gateway option session_ids: want mint or pass"},
		{desc: "gateway label the template fills", list: "gateway://u:secret@192.0.2.1:7777 preset=brightdata region=us", want: `proxies.txt:1: label "region=us": the template fills {region}`},
		{desc: "label uppercase key", list: "192.0.2.1:80 Region=us", want: `proxies.txt:1: label "Region=us": key must be lowercase`},
		{desc: "label duplicate", list: "192.0.2.1:80 region=us region=eu", want: `proxies.txt:1: duplicate label key "region"`},
		{desc: "label after comma in address", list: "192.0.2.1:80,region=us", want: "proxies.txt:1: invalid port"},
		{desc: "duplicate id label", list: "192.0.2.1:80 id=a id=b", want: `proxies.txt:1: duplicate label key "id"`},
		{desc: "tier above the costliest", list: "192.0.2.1:80 tier=8", want: `proxies.txt:1: label "tier=8": want a whole number from 0 (the cheapest) to 7`},
		{desc: "tier not a number", list: "192.0.2.1:80 tier=residential", want: `proxies.txt:1: label "tier=residential": want a whole number from 0 (the cheapest) to 7`},
		{desc: "negative price", list: "192.0.2.1:80 price_per_gb=-1", want: `proxies.txt:1: label "price_per_gb=-1": `},
		{desc: "max_inflight negative", list: "192.0.2.1:80 max_inflight=-1", want: `proxies.txt:1: label "max_inflight=-1": want a whole number, 0 (unlimited) or more`},
		{desc: "max_inflight fraction", list: "192.0.2.1:80 max_inflight=1.5", want: `proxies.txt:1: label "max_inflight=1.5": want a whole number`},
		{desc: "max_inflight overflow", list: "192.0.2.1:80 max_inflight=99999999999999999999", want: `proxies.txt:1: label "max_inflight=99999999999999999999": want a whole number`},
		{desc: "cost negative", list: "192.0.2.1:80 cost=-0.5", want: `proxies.txt:1: label "cost=-0.5": want a finite number, 0 or more`},
		{desc: "cost infinite", list: "192.0.2.1:80 cost=Inf", want: `proxies.txt:1: label "cost=Inf": want a finite number`},
		{desc: "cost overflow", list: "192.0.2.1:80 cost=1e999", want: `proxies.txt:1: label "cost=1e999": want a finite number`},
		{desc: "cost nan", list: "192.0.2.1:80 cost=NaN", want: `proxies.txt:1: label "cost=NaN": want a finite number`},
		{desc: "weight word", list: "192.0.2.1:80 weight=high", want: `proxies.txt:1: label "weight=high": want a finite number`},
		{desc: "weight zero", list: "192.0.2.1:80 weight=0", want: `proxies.txt:1: label "weight=0": want a number above 0`},
		{desc: "line too long", list: "direct\n" + long, want: "proxies.txt:2: line longer than 4096 bytes"},
		{desc: "long comment", list: "direct\n#" + strings.Repeat("x", maxLineLen), want: "proxies.txt:2: line longer than 4096 bytes"},
		{desc: "duplicate address", list: "http://u@192.0.2.1:80\n\n# c\nhttp://u@192.0.2.1:80",
			want: `proxies.txt:4: duplicate route id "http://192.0.2.1:80~0bfe935e" (first on line 1)`},
		{desc: "duplicate spelled differently", list: "HTTP://u:a@Proxy.Example.com:080\nhttp://u:b@proxy.example.com:80",
			want: `proxies.txt:2: duplicate route id "http://proxy.example.com:80~0bfe935e" (first on line 1)`},
		{desc: "duplicate colon and url forms", list: "192.0.2.1:80:u:a\nhttp://u:a@192.0.2.1:80",
			want: `proxies.txt:2: duplicate route id "http://192.0.2.1:80~0bfe935e" (first on line 1)`},
		{desc: "duplicate explicit id", list: "192.0.2.1:80 id=x\n192.0.2.2:80 id=x", want: `proxies.txt:2: duplicate route id "x" (first on line 1)`},
		{desc: "explicit id taking direct", list: "direct\n192.0.2.2:80 id=direct", want: `proxies.txt:2: duplicate route id "direct" (first on line 1)`},
		{desc: "two direct lines", list: "direct\ndirect region=eu", want: `proxies.txt:2: duplicate route id "direct" (first on line 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes, err := ParseList("proxies.txt", []byte(tt.list))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ParseList(%q) error = %v, want prefix %q", tt.list, err, tt.want)
			}
			if routes != nil {
				t.Errorf("ParseList(%q) = %v on error, want nil", tt.list, routes)
			}
		})
	}
}

// TestParseListSecrets checks that a password reaches neither errors nor
// anything printed about a route, whatever is wrong with its line.
func TestParseListSecrets(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3tPw"
	tests := []struct {
		desc    string
		list    string
		wantErr bool
	}{
		{desc: "url", list: "http://user:S3cr3tPw@192.0.2.1:80"},
		{desc: "url percent-encoded", list: "socks5://user:S3cr%33tP%77@192.0.2.1:80"},
		{desc: "url with specials", list: "https://user:S3cr3tPw/@#?:@proxy.example.com:443"},
		{desc: "colon form", list: "192.0.2.1:80:user:S3cr3tPw region=us"},
		{desc: "explicit id", list: "http://user:S3cr3tPw@192.0.2.1:80 id=r1"},
		{desc: "unknown scheme", list: "ftp://user:S3cr3tPw@192.0.2.1:21", wantErr: true},
		{desc: "missing port", list: "http://user:S3cr3tPw@192.0.2.1", wantErr: true},
		{desc: "port out of range", list: "http://user:S3cr3tPw@192.0.2.1:99999", wantErr: true},
		{desc: "missing host", list: "http://user:S3cr3tPw", wantErr: true},
		{desc: "missing host with slash", list: "http://user:S3cr3tPw/", wantErr: true},
		{desc: "numeric password without host", list: "http://user:123456", wantErr: true},
		{desc: "path", list: "http://user:S3cr3tPw@192.0.2.1:80/x", wantErr: true},
		{desc: "bad host", list: "http://user:S3cr3tPw@bad!host:80", wantErr: true},
		{desc: "bad escape", list: "http://user:S3cr3tPw%zz@192.0.2.1:80", wantErr: true},
		{desc: "control character", list: "http://user:S3cr3tPw%0A@192.0.2.1:80", wantErr: true},
		{desc: "socks5 too long", list: "socks5://user:S3cr3tPw" + strings.Repeat("x", 250) + "@192.0.2.1:80", wantErr: true},
		{desc: "colon too many fields", list: "192.0.2.1:80:user:S3cr3tPw:x", wantErr: true},
		{desc: "colon port out of range", list: "192.0.2.1:99999:user:S3cr3tPw", wantErr: true},
		{desc: "colon control character", list: "192.0.2.1:80:user:S3cr3tPw\x7f", wantErr: true},
		{desc: "no scheme", list: "user:S3cr3tPw@192.0.2.1:80", wantErr: true},
		{desc: "bad label", list: "http://user:S3cr3tPw@192.0.2.1:80 region", wantErr: true},
		{desc: "bad reserved label", list: "http://user:S3cr3tPw@192.0.2.1:80 weight=0", wantErr: true},
		{desc: "duplicate", list: "http://user:S3cr3tPw@192.0.2.1:80\n192.0.2.1:80:user:S3cr3tPw", wantErr: true},
		{desc: "long line", list: "http://user:S3cr3tPw@192.0.2.1:80 k=" + strings.Repeat("v", maxLineLen), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes, err := ParseList("proxies.txt", []byte(tt.list))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseList(%q) succeeded, want an error", tt.list)
				}
				for _, s := range []string{secret, "123456"} {
					if strings.Contains(err.Error(), s) {
						t.Fatalf("ParseList(%q) error %q shows the password", tt.list, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseList(%q): %v", tt.list, err)
			}
			r := routes[0]
			if pw, _ := r.URL.User.Password(); !strings.HasPrefix(pw, secret) {
				t.Fatalf("password = %q, want prefix %q", pw, secret)
			}
			if !strings.Contains(r.Redacted(), "://***:***@") {
				t.Errorf("Redacted() = %q, want ***:***", r.Redacted())
			}
			for _, shown := range []string{
				r.ID, r.Redacted(), r.Labels.String(),
				fmt.Sprint(r), fmt.Sprintf("%v %+v %s", routes, &r, r), fmt.Sprintf("%#v", r),
			} {
				if strings.Contains(shown, secret) {
					t.Errorf("%q shows the password", shown)
				}
			}
		})
	}
}

// TestDefaultIDHoldsNoCredentials checks that the id of a line without id=
// names the proxy and a fingerprint of the user name, never the user name
// or the password in any spelling: ids reach every client. The ids are
// fixed here, since routes keep their state across restarts by them.
func TestDefaultIDHoldsNoCredentials(t *testing.T) {
	t.Parallel()
	const pass = "Pw9Secret"
	tests := []struct {
		desc, line string
		user, pass string // as decoded
		want       string
	}{
		{desc: "url", line: "http://Acct7Name:Pw9Secret@192.0.2.1:8080",
			user: "Acct7Name", pass: pass, want: "http://192.0.2.1:8080~6c9d343c"},
		{desc: "sub-account on the same proxy", line: "http://customer-acme-session-s9x-country-us:Pw9Secret@192.0.2.1:8080",
			user: "customer-acme-session-s9x-country-us", pass: pass, want: "http://192.0.2.1:8080~81a35ab4"},
		{desc: "api key as user name, empty password", line: "http://KEYzq8vRtWm3NpLx:@proxy.example.com:3128",
			user: "KEYzq8vRtWm3NpLx", want: "http://proxy.example.com:3128~f4600df7"},
		{desc: "api key as user name, no password", line: "https://KEYzq8vRtWm3NpLx@proxy.example.com:443",
			user: "KEYzq8vRtWm3NpLx", want: "https://proxy.example.com:443~f4600df7"},
		{desc: "percent-encoded", line: "socks5://acct%40corp%2Fus:Pw%3A9Secret@198.51.100.7:1080",
			user: "acct@corp/us", pass: "Pw:9Secret", want: "socks5://198.51.100.7:1080~14fc11f9"},
		{desc: "colon form", line: "gw.example.com:3128:Acct7Name:Pw9Secret",
			user: "Acct7Name", pass: pass, want: "http://gw.example.com:3128~6c9d343c"},
		{desc: "colon form with ipv6", line: "[2001:db8::2]:3128:Acct7Name:Pw9Secret region=eu",
			user: "Acct7Name", pass: pass, want: "http://[2001:db8::2]:3128~6c9d343c"},
	}
	var lines []string
	for _, tt := range tests {
		lines = append(lines, tt.line)
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			routes, err := ParseList("proxies.txt", []byte(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			r := routes[0]
			if pw, _ := r.URL.User.Password(); r.URL.User.Username() != tt.user || pw != tt.pass {
				t.Fatalf("credentials %v, want %s:%s", r.URL.User, tt.user, tt.pass)
			}
			if r.ID != tt.want {
				t.Errorf("id = %q, want %q", r.ID, tt.want)
			}
			for _, secret := range []string{tt.user, tt.pass} {
				if secret == "" {
					continue
				}
				for _, spelled := range []string{secret, strings.ToLower(secret), url.PathEscape(secret), url.QueryEscape(secret), url.User(secret).String()} {
					for _, shown := range []string{r.ID, r.Redacted(), fmt.Sprint(r)} {
						if strings.Contains(shown, spelled) {
							t.Errorf("%q shows %q", shown, spelled)
						}
					}
				}
			}
		})
	}
	// Sub-accounts of one proxy stay apart.
	if _, err := ParseList("proxies.txt", []byte(strings.Join(lines, "\n"))); err != nil {
		t.Errorf("all the lines as one list: %v", err)
	}
}

func TestParseListLines(t *testing.T) {
	t.Parallel()
	list := "\xef\xbb\xbf# header\r\n" +
		"\r\n" +
		"  # indented comment\r\n" +
		"192.0.2.1:80\r\n" +
		"\t \r\n" +
		"http://u:p@192.0.2.2:80 # trailing\n" +
		"# http://192.0.2.3:80\n" +
		" direct \t region=home"
	routes, err := ParseList("proxies.txt", []byte(list))
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		id   string
		line int
	}
	var got []line
	for _, r := range routes {
		got = append(got, line{r.ID, int(r.Line)})
	}
	want := []line{{"http://192.0.2.1:80", 4}, {"http://192.0.2.2:80~0bfe935e", 6}, {"direct", 8}}
	if !slices.Equal(got, want) {
		t.Errorf("routes = %v, want %v", got, want)
	}
	if l := routes[2].Labels; !slices.Equal(l, engine.Labels{{Key: "region", Value: "home"}}) {
		t.Errorf("direct labels = %v", l)
	}
}

func TestLoadList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.txt")
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(good, []byte("192.0.2.1:80\ndirect\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("direct\n192.0.2.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if routes, err := LoadList(good); err != nil || len(routes) != 2 {
		t.Errorf("LoadList(good) = %v, %v; want 2 routes", routes, err)
	}
	if _, err := LoadList(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: missing port") {
		t.Errorf("LoadList(bad) error = %v, want %q prefix", err, bad+":2: missing port")
	}
	missing := filepath.Join(dir, "missing.txt")
	if _, err := LoadList(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadList(missing) error = %v, want not-exist naming the path", err)
	}
}

// TestExampleList keeps proxies.example.txt working as shipped (direct only)
// and every example in it valid: its lines indented by four spaces after
// "#" are uncommented and parsed as one list.
func TestExampleList(t *testing.T) {
	t.Parallel()
	const path = "../../proxies.example.txt"
	routes, err := LoadList(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 || routes[0].Scheme != Direct {
		t.Errorf("%s as shipped = %v, want only direct", path, routes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var examples []string
	for l := range strings.Lines(string(data)) {
		if ex, ok := strings.CutPrefix(l, "#    "); ok {
			examples = append(examples, ex)
		}
	}
	routes, err = ParseList("examples", []byte(strings.Join(examples, "")))
	if err != nil {
		t.Fatalf("examples in %s: %v", path, err)
	}
	if len(routes) != len(examples) || len(routes) < 10 {
		t.Errorf("%d examples gave %d routes", len(examples), len(routes))
	}
	for _, s := range []Scheme{HTTP, HTTPS, SOCKS5} {
		if !slices.ContainsFunc(routes, func(r Route) bool { return r.Scheme == s }) {
			t.Errorf("no %s example", s)
		}
	}
}

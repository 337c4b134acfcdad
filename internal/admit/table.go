package admit

import "net/netip"

// The blocks are defined here and nowhere else; docs/security.md lists
// each one with its source, and a test keeps the two in step.

// blocked lists the refused ranges, most specific first so that the reason
// names the narrowest match. Sources: RFC 6890 and the IANA IPv4 and IPv6
// Special-Purpose Address Registries, unless a comment says otherwise.
var blocked = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"}, // RFC 1918
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata address"},  // Alibaba Cloud, inside CGNAT
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT) address"}, // RFC 6598
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata address"},  // AWS, GCP, Azure, Oracle, …
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address"},    // RFC 3927
	{netip.MustParsePrefix("168.63.129.16/32"), "metadata address"},    // Azure WireServer: a public address
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"}, // RFC 5737
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"}, // RFC 2544
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible address"},           // RFC 4291 §2.5.5.1, deprecated
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated address"}, // RFC 2765
	{netip.MustParsePrefix("100::/64"), "discard-only address"},           // RFC 6666
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking address"},        // RFC 5180
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},     // RFC 3849
	{netip.MustParsePrefix("3fff::/20"), "documentation address"},         // RFC 9637
	{netip.MustParsePrefix("5f00::/16"), "SRv6 SID address"},              // RFC 9602
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata address"},      // AWS, over IPv6
	{netip.MustParsePrefix("fc00::/7"), "unique-local address"},           // RFC 4193
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},            // RFC 3879, deprecated
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

// embedders are the IPv6 ranges that carry an IPv4 address, which is
// judged in their place; IPv4-mapped addresses (::ffff:0:0/96) are simply
// unmapped. Translators and relays reach the IPv4 address.
var embedders = []struct {
	prefix netip.Prefix
	name   string
	v4     func(b [16]byte) []netip.Addr
}{
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", last32},             // RFC 6052
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64", last32}, // RFC 8215, in RFC 6052's /96 format
	{netip.MustParsePrefix("2002::/16"), "6to4", func(b [16]byte) []netip.Addr { // RFC 3056: bits 16–47
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	}},
	{netip.MustParsePrefix("2001::/32"), "Teredo", func(b [16]byte) []netip.Addr { // RFC 4380: the server, and the client inverted
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}
	}},
}

// last32 is the IPv4 address in the last 32 bits.
func last32(b [16]byte) []netip.Addr { return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))} }

// blockedNames are the names refused as written, before any DNS, and with
// sub the names under them too, most specific first. On Direct routes the
// addresses any other name resolves to are checked at connect time; on
// proxy routes, only with ResolveProxyTargets.
var blockedNames = []struct {
	name   string
	sub    bool
	reason string
}{
	{"localhost", true, "loopback name"},                   // RFC 6761 §6.3
	{"localhost.localdomain", false, "loopback name"},      // /etc/hosts of Red Hat and others
	{"ip6-localhost", false, "loopback name"},              // /etc/hosts of Debian and others
	{"ip6-loopback", false, "loopback name"},               // ditto
	{"metadata.google.internal", false, "metadata name"},   // GCP
	{"metadata", false, "metadata name"},                   // GCP, through the VM's search domain
	{"instance-data.ec2.internal", false, "metadata name"}, // AWS
	{"instance-data", false, "metadata name"},              // AWS, through the VM's search domain
	{"internal", true, "private-use name"},                 // ICANN's reserved private-use TLD
	{"local", true, "link-local name"},                     // RFC 6762 (mDNS)
	{"home.arpa", true, "home network name"},               // RFC 8375
}

package route

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/engine"
)

// maxLineLen bounds a list line: no route needs more, and a longer line is
// most likely a binary or wrongly chosen file.
const maxLineLen = 4096

// LoadList reads and parses the proxy list at path; errors name the path as
// given.
func LoadList(path string) ([]Route, error) {
	// A device or a pipe (/dev/zero, a FIFO) would be read forever.
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseList(path, data)
}

// ParseList parses a proxy list (the format proxies.example.txt documents)
// into routes in file order. name prefixes errors as "name:line: reason".
// Errors quote the scheme, host and labels of a bad line but never the line
// itself, so credentials stay out of logs even when the line is malformed.
func ParseList(name string, data []byte) ([]Route, error) {
	// Sized for a route a line: growing them line by line was a third of
	// the parse of a million-route list.
	lines := bytes.Count(data, []byte("\n")) + 1
	routes := make([]Route, 0, lines)
	firstLine := make(map[string]int, lines) // route id → line that defined it
	n := 0
	// Windows editors save UTF-8 with a byte order mark.
	for raw := range bytes.Lines(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))) {
		n++
		raw = bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte("\n")), []byte("\r"))
		if len(raw) > maxLineLen {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, n, maxLineLen)
		}
		text := strings.Trim(cutComment(string(raw)), " \t")
		if text == "" {
			continue
		}
		r, err := parseLine(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if first, dup := firstLine[r.ID]; dup {
			return nil, fmt.Errorf("%s:%d: duplicate route id %q (first on line %d)", name, n, r.ID, first)
		}
		firstLine[r.ID] = n
		r.Line = int32(n)
		routes = append(routes, r)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%s: no routes: add proxy lines, or a line \"direct\" to use the gateway's own connection", name)
	}
	return routes, nil
}

// cutComment drops a comment. "#" starts one only at the beginning of the
// line or after a space or tab, so a "#" inside a password is kept.
func cutComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// parseLine parses one non-empty, comment-free line: an address, then labels.
func parseLine(text string) (Route, error) {
	addr, rest := text, ""
	if i := strings.IndexAny(text, " \t"); i >= 0 {
		addr, rest = text[:i], text[i+1:]
	}
	r, err := parseAddr(addr)
	if err != nil {
		return Route{}, err
	}
	if r.Gateway != nil {
		if rest, err = r.takeGateway(rest); err != nil {
			return Route{}, err
		}
	}
	labels, err := engine.ParseLabels(rest)
	if err != nil {
		return Route{}, err
	}
	if err := r.takeReserved(labels); err != nil {
		return Route{}, err
	}
	if r.Gateway != nil {
		for _, k := range r.Gateway.Template.Labels() {
			if v, has := r.Labels.Get(k); has {
				return Route{}, fmt.Errorf("label %q: the template fills {%s}, so the route takes every %s= a request asks for", k+"="+v, k, k)
			}
		}
	}
	return r, nil
}

// takeReserved moves the reserved labels (id, max_inflight, cost, weight,
// tier, price_per_request, price_per_gb) into their fields and keeps the
// others as the route's labels.
func (r *Route) takeReserved(labels engine.Labels) error {
	kept := labels[:0]
	for _, l := range labels {
		var err error
		switch l.Key {
		case "id":
			r.ID = l.Value
		case "max_inflight":
			r.MaxInflight, err = strconv.Atoi(l.Value)
			if err != nil || r.MaxInflight < 0 {
				err = errors.New("want a whole number, 0 (unlimited) or more")
			}
		case "cost":
			r.Cost, err = parseNonNegative(l.Value)
		case "tier":
			var tier int
			tier, err = engine.ParseTier(l.Value)
			r.Tier = int32(tier)
		case "price_per_request", "price_per_gb":
			var v float64
			if v, err = parseNonNegative(l.Value); err == nil && v > 0 {
				if r.Prices == nil {
					r.Prices = &Prices{}
				}
				if l.Key == "price_per_request" {
					r.Prices.PerRequest = v
				} else {
					r.Prices.PerGB = v
				}
			}
		case "weight":
			r.Weight, err = parseNonNegative(l.Value)
			// The engine reads weight 0 as "unset" (1), the opposite of
			// what weight=0 seems to say.
			if err == nil && r.Weight == 0 {
				err = errors.New("want a number above 0 (to stop using a route, comment its line out)")
			}
		default:
			kept = append(kept, l)
		}
		if err != nil {
			return fmt.Errorf("label %q: %w", l.Key+"="+l.Value, err)
		}
	}
	r.Labels = kept
	return nil
}

func parseNonNegative(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, errors.New("want a finite number, 0 or more")
	}
	return v, nil
}

// parseAddr parses the address of a line: "direct", a proxy URL, or
// host:port[:user:pass]. The route's ID is derived from it.
func parseAddr(addr string) (Route, error) {
	if strings.EqualFold(addr, string(Direct)) {
		return Route{ID: string(Direct), Scheme: Direct}, nil
	}
	var r Route
	var err error
	// Only a scheme token before "://" makes a URL: otherwise a mistyped
	// host:port:user:pass whose password holds "://" would be quoted in an
	// "unknown scheme" error.
	if scheme, rest, ok := strings.Cut(addr, "://"); ok && isSchemeToken(scheme) {
		r, err = parseURL(scheme, rest)
	} else {
		r, err = parseColonForm(addr)
	}
	if err != nil {
		return Route{}, err
	}
	r.ID = defaultID(r.Scheme, r.URL)
	if r.Gateway != nil {
		r.ID = gatewayScheme + strings.TrimPrefix(r.ID, string(r.Scheme))
	}
	return r, nil
}

// defaultID is the id of a proxy line without id=: scheme://host:port, then
// "~" and a fingerprint of the user name when there is one. Ids are shown to
// every client (X-Switchyard-Route), in metrics and in logs, and providers
// put API keys and steering parameters in the user name, so no credential
// is in the id; the fingerprint keeps sub-accounts of one gateway apart,
// with ids that survive restarts and a password change.
//
// The fingerprint is 32 bits of an unkeyed SHA-256 (a key would have to be
// configured alike on every gateway sharing a store), so a guessed user
// name can be confirmed against it. That is accepted: a name that can be
// guessed is no credential, and one that is (an API key) is far beyond
// guessing, 32 bits of its hash giving nothing to go on. A name that must
// not even be confirmable takes an id=. Two names on one proxy sharing a
// fingerprint (odds about n²/2³³ for n of them) are refused as a duplicate
// id, which id= also settles.
func defaultID(s Scheme, u *url.URL) string {
	id := string(s) + "://" + u.Host
	if u.User != nil {
		sum := sha256.Sum256([]byte(u.User.Username()))
		id += "~" + hex.EncodeToString(sum[:4])
	}
	return id
}

// isSchemeToken reports whether s is a URI scheme (RFC 3986 §3.1).
func isSchemeToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// parseURL parses the part after "scheme://": [user[:pass]@]host:port[/].
func parseURL(scheme, rest string) (Route, error) {
	s := Scheme(strings.ToLower(scheme))
	var gw *Gateway
	if s == gatewayScheme {
		// A provider gateway is an HTTP proxy steered by its username.
		s, gw = HTTP, &Gateway{}
	}
	if s != HTTP && s != HTTPS && s != SOCKS5 {
		return Route{}, fmt.Errorf("unknown scheme %q (want http, https, socks5 or gateway)", scheme)
	}
	hostport := rest
	var user *url.Userinfo
	// The last "@" ends the credentials, so that unencoded "@", "/", "?"
	// and "#" in a pasted password are read as the password, not as a host
	// or path that an error message would then quote.
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		var err error
		if user, err = parseUserinfo(s, rest[:i]); err != nil {
			return Route{}, err
		}
		hostport = rest[i+1:]
	}
	hostport = strings.TrimSuffix(hostport, "/")
	if strings.ContainsAny(hostport, "/?#") {
		return Route{}, errors.New("a proxy URL takes no path, query or fragment")
	}
	host, port, err := cutHost(hostport)
	if err != nil {
		return Route{}, err
	}
	p, err := parsePort(port)
	if err != nil {
		return Route{}, err
	}
	if gw != nil && user == nil {
		return Route{}, errors.New("a gateway route needs the account's user name: gateway://USER:PASS@host:port")
	}
	return Route{Scheme: s, URL: &url.URL{Scheme: string(s), User: user, Host: net.JoinHostPort(host, p)}, Gateway: gw}, nil
}

// parseUserinfo parses percent-encoded "user[:pass]".
func parseUserinfo(s Scheme, raw string) (*url.Userinfo, error) {
	rawUser, rawPass, hasPass := strings.Cut(raw, ":")
	user, err := url.PathUnescape(rawUser)
	if err != nil {
		return nil, errors.New("invalid percent-encoding in the user name")
	}
	pass, err := url.PathUnescape(rawPass)
	if err != nil {
		// Neither the escape nor the password is quoted: both are secret.
		return nil, errors.New("invalid percent-encoding in the password (write % as %25)")
	}
	if err := checkCredentials(s, user, pass); err != nil {
		return nil, err
	}
	if !hasPass {
		return url.User(user), nil
	}
	return url.UserPassword(user, pass), nil
}

// parseColonForm parses host:port and host:port:user:pass, both HTTP proxies.
func parseColonForm(addr string) (Route, error) {
	r, err := parseColonFields(addr)
	if err != nil && strings.Contains(addr, "@") {
		err = fmt.Errorf("%w (for user:pass@host:port, add a scheme: http://user:pass@host:port)", err)
	}
	return r, err
}

func parseColonFields(addr string) (Route, error) {
	host, rest, err := cutHost(addr)
	if err != nil {
		return Route{}, err
	}
	fields := strings.Split(rest, ":")
	switch len(fields) {
	case 1, 3:
	case 2:
		return Route{}, errors.New("want host:port or host:port:user:pass")
	default:
		return Route{}, errors.New(`too many ":" for host:port:user:pass: in this form the password may not contain ":" ` +
			`(use the form http://user:pass@host:port)`)
	}
	p, err := parsePort(fields[0])
	if err != nil {
		return Route{}, err
	}
	u := &url.URL{Scheme: string(HTTP), Host: net.JoinHostPort(host, p)}
	if len(fields) == 3 {
		user, pass := fields[1], fields[2]
		if pass == "" {
			return Route{}, errors.New("empty password in host:port:user:pass")
		}
		if err := checkCredentials(HTTP, user, pass); err != nil {
			return Route{}, err
		}
		u.User = url.UserPassword(user, pass)
	}
	return Route{Scheme: HTTP, URL: u}, nil
}

// checkCredentials rejects credentials that cannot be sent: control
// characters would corrupt the Proxy-Authorization header, Basic auth ends
// the user name at the first ":" (RFC 7617), and SOCKS5 carries each field
// in at most 255 bytes (RFC 1929).
func checkCredentials(s Scheme, user, pass string) error {
	switch {
	case user == "":
		return errors.New("empty user name")
	case s != SOCKS5 && strings.Contains(user, ":"):
		return errors.New(`an HTTP proxy user name may not contain ":"`)
	case hasControl(user):
		return errors.New("user name contains a control character")
	case hasControl(pass):
		return errors.New("password contains a control character")
	case s == SOCKS5 && len(user) > 255:
		return errors.New("SOCKS5 user name longer than 255 bytes")
	case s == SOCKS5 && len(pass) > 255:
		return errors.New("SOCKS5 password longer than 255 bytes")
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// cutHost splits s into its host (a name, an IPv4 address or a bracketed
// IPv6 address) and what follows the ":" after it. The host comes back in
// canonical form, so that one proxy spelled two ways gets one id.
func cutHost(s string) (host, rest string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New(`IPv6 address without closing "]"`)
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", "", fmt.Errorf("invalid IPv6 address %q", s[1:end])
		}
		host, s = a.Unmap().String(), s[end+1:]
		if s != "" && s[0] != ':' {
			return "", "", errors.New(`want ":port" after "]"`)
		}
	} else {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
			return "", "", errors.New("IPv6 addresses need brackets: [2001:db8::1]:port")
		}
		host, _, _ = strings.Cut(s, ":")
		if err := checkHostname(host); err != nil {
			return "", "", err
		}
		host, s = strings.ToLower(host), s[len(host):]
	}
	rest, ok := strings.CutPrefix(s, ":")
	if !ok {
		return "", "", errors.New("missing port")
	}
	return host, rest, nil
}

// checkHostname accepts DNS names and IPv4 addresses.
func checkHostname(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if len(h) > 253 {
		return errors.New("host name longer than 253 characters")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return fmt.Errorf("invalid host %q", h)
		}
	}
	return nil
}

// parsePort parses a decimal port and returns it in canonical form ("080"
// is "80"). The text is not quoted in errors: in a malformed URL it may be
// part of the password.
func parsePort(s string) (string, error) {
	if s == "" {
		return "", errors.New("missing port")
	}
	if len(s) > 5 || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return "", errors.New("invalid port: want a number from 1 to 65535")
	}
	p, _ := strconv.Atoi(s) // at most 5 digits: cannot fail
	if p < 1 || p > 65535 {
		return "", errors.New("port out of range: want a number from 1 to 65535")
	}
	return strconv.Itoa(p), nil
}

// String returns the route id. It exists so that printing a Route with %v
// shows the id: without it fmt would print URL.String(), password included.
func (r Route) String() string { return r.ID }

package route

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// sentinel replaces passwords in FuzzParseList's rebuilt lists: a password
// that occurs nowhere else, so finding it in an id is a leak, not chance.
const sentinel = "Zq9SentinelPw"

func FuzzParseList(f *testing.F) {
	for _, s := range []string{
		"http://user:pass@192.0.2.1:8080",
		"HTTPS://User:p%40ss@Proxy.Example.com:443/",
		"socks5://u:p@ss/w#rd@[2001:db8::1]:1080 region=eu",
		"192.0.2.1:3128",
		"192.0.2.1:3128:user:p@ss#1 id=r1 max_inflight=5 cost=0.5 weight=2",
		"[2001:db8::2]:80:u:pw",
		"direct region=home,provider=self",
		"\xef\xbb\xbf# comment\r\n\r\n  192.0.2.1:80 # trailing\r\ndirect\n",
		"http://u:a@192.0.2.1:80\nhttp://u:b@192.0.2.1:80",
		"ftp://u:secret@192.0.2.1:21",
		"http://u:secret@192.0.2.1:99999",
		"192.0.2.1:80:u:pa:ss",
		"user:secret@192.0.2.1:80",
		"http://u:%zz@192.0.2.1:80",
		"192.0.2.1:80 weight=0 cost=NaN max_inflight=-1",
		"2001:db8::1:8080",
		`gateway://acct:secret@pr.example.net:7777 template="{user}-session-{session}-country-{region}" sessions=1000 session_ttl=10m`,
		"gateway://acct:secret@pr.example.net:7777 preset=oxylabs session_ids=pass provider=oxy",
		`gateway://u:pw@192.0.2.1:7777 template="{user}[-s-{session}" region=us`,
		"gateway://192.0.2.1:7777 preset=decodo",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		routes, err := ParseList("fuzz.txt", []byte(list))
		if err != nil {
			if routes != nil || !strings.HasPrefix(err.Error(), "fuzz.txt:") {
				t.Fatalf("ParseList(%q) = %d routes, error %q", list, len(routes), err)
			}
			return
		}
		checkRoutes(t, list, routes)

		// A list rebuilt from the routes parses to the same routes.
		again, ok := rebuild(routes, "")
		if !ok {
			return // escaping made a line too long
		}
		got, err := ParseList("rebuilt", []byte(again))
		if err != nil {
			t.Fatalf("ParseList(%q) = %v; rebuilt as %q: %v", list, routes, again, err)
		}
		for i, r := range routes {
			if !sameRoute(r, got[i]) {
				t.Fatalf("ParseList(%q)[%d] = %+v, rebuilt as %q: %+v", list, i, r, again, got[i])
			}
		}

		// Ids and Redacted do not depend on the password.
		if strings.Contains(list, sentinel) {
			return
		}
		swapped, ok := rebuild(routes, sentinel)
		if !ok {
			return
		}
		got, err = ParseList("swapped", []byte(swapped))
		if err != nil {
			t.Fatalf("ParseList(%q) = %v; with passwords swapped %q: %v", list, routes, swapped, err)
		}
		for i, r := range got {
			if r.ID != routes[i].ID || r.Redacted() != routes[i].Redacted() {
				t.Fatalf("changing the password of %q changed its id or redacted form: %q %q, want %q %q",
					swapped, r.ID, r.Redacted(), routes[i].ID, routes[i].Redacted())
			}
			if strings.Contains(r.ID, sentinel) || strings.Contains(r.Redacted(), sentinel) {
				t.Fatalf("ParseList(%q) shows the password: id %q, redacted %q", swapped, r.ID, r.Redacted())
			}
		}
	})
}

// checkRoutes checks the invariants of a parsed list.
func checkRoutes(t *testing.T, list string, routes []Route) {
	t.Helper()
	if len(routes) == 0 {
		t.Fatalf("ParseList(%q) = no routes and no error", list)
	}
	lines := strings.Split(list, "\n")
	ids := make(map[string]bool)
	for i, r := range routes {
		if r.ID == "" || ids[r.ID] {
			t.Fatalf("ParseList(%q): route %d has empty or duplicate id %q", list, i, r.ID)
		}
		ids[r.ID] = true
		if r.Line < 1 || int(r.Line) > len(lines) || i > 0 && r.Line <= routes[i-1].Line {
			t.Fatalf("ParseList(%q): route %d on line %d", list, i, r.Line)
		}
		if (r.URL == nil) != (r.Scheme == Direct) || r.URL != nil && r.URL.Scheme != string(r.Scheme) {
			t.Fatalf("ParseList(%q): route %d: scheme %q with URL %v", list, i, r.Scheme, r.URL != nil)
		}
		for _, k := range []string{"id", "max_inflight", "cost", "weight"} {
			if _, has := r.Labels.Get(k); has {
				t.Fatalf("ParseList(%q): route %d keeps reserved label %q", list, i, k)
			}
		}
		if r.MaxInflight < 0 || !(r.Cost >= 0) || !(r.Weight >= 0) || math.IsInf(r.Cost+r.Weight, 0) {
			t.Fatalf("ParseList(%q): route %d: max_inflight %d, cost %v, weight %v", list, i, r.MaxInflight, r.Cost, r.Weight)
		}
		if r.URL == nil {
			continue
		}
		if r.URL.User == nil {
			continue
		}
		// The fingerprint is hex: a short secret may be in it by chance.
		id, _, _ := strings.Cut(r.ID, "~")
		pw, _ := r.URL.User.Password()
		for _, secret := range []string{r.URL.User.Username(), pw} {
			if alone(lines[r.Line-1], secret) && (strings.Contains(id, secret) || strings.Contains(r.Redacted(), secret)) {
				t.Fatalf("ParseList(%q): id %q or redacted %q shows a credential", list, r.ID, r.Redacted())
			}
		}
	}
}

// alone reports whether secret is at least 4 characters and, ignoring case,
// not a substring of the rest of line, so that finding it in the id means
// it leaked. Only simple cases are judged: an alphanumeric secret, written
// as is (the line has no percent-encoding).
func alone(line, secret string) bool {
	if len(secret) < 4 || strings.ContainsFunc(secret, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) || strings.Contains(line, "%") {
		return false
	}
	line, secret = strings.ToLower(line), strings.ToLower(secret)
	// Exactly one occurrence, overlapping ones counted: the secret's own.
	i := strings.Index(line, secret)
	return i >= 0 && !strings.Contains(line[i+1:], secret)
}

// rebuild writes routes as a list, from URL.String() and the labels, with
// each password replaced by password unless that is "". ok is false if a
// line grew past the line limit.
func rebuild(routes []Route, password string) (list string, ok bool) {
	var b strings.Builder
	for _, r := range routes {
		line := string(Direct)
		if r.URL != nil {
			u := *r.URL
			if _, has := u.User.Password(); has && password != "" {
				u.User = url.UserPassword(u.User.Username(), password)
			}
			line = u.String()
			if r.Gateway != nil {
				line = gatewayScheme + strings.TrimPrefix(line, string(r.Scheme)) + " " + r.Gateway.String()
			}
		}
		// Derived ids hold "://", which no label value may, so a valid
		// id label means the id was explicit (or is "direct").
		if _, err := engine.ParseLabels("id=" + r.ID); err == nil {
			line += " id=" + r.ID
		}
		if r.MaxInflight != 0 {
			line += " max_inflight=" + strconv.Itoa(r.MaxInflight)
		}
		if r.Cost != 0 {
			line += " cost=" + formatFloat(r.Cost)
		}
		if r.Weight != 0 {
			line += " weight=" + formatFloat(r.Weight)
		}
		if len(r.Labels) > 0 {
			line += " " + r.Labels.String()
		}
		if len(line) > maxLineLen {
			return "", false
		}
		b.WriteString(line + "\n")
	}
	return b.String(), true
}

// formatFloat writes v exactly, without the "+" that label values may not
// hold.
func formatFloat(v float64) string {
	return strings.Replace(strconv.FormatFloat(v, 'g', -1, 64), "e+", "e", 1)
}

func sameRoute(a, b Route) bool {
	return a.ID == b.ID && a.Scheme == b.Scheme && a.Redacted() == b.Redacted() &&
		(a.URL == nil) == (b.URL == nil) && (a.URL == nil || a.URL.String() == b.URL.String()) &&
		a.Labels.String() == b.Labels.String() &&
		a.MaxInflight == b.MaxInflight && a.Cost == b.Cost && a.Weight == b.Weight &&
		(a.Gateway == nil) == (b.Gateway == nil) && (a.Gateway == nil || a.Gateway.String() == b.Gateway.String())
}

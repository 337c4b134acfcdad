package provider

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func FuzzParse(f *testing.F) {
	for _, p := range Presets {
		f.Add(p.Template)
	}
	for _, s := range []string{
		"{user}-session-{session}-country-{region}", "{user}[", "{user}]", "{user}{session}", "[{user}]",
		"{user}[-a-{session}][-b-{region}][-c-{city}][-d-{state}][-e-{asn}][-f-{ttl}]", "{us", "{}", "{user}-{ttl}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			if tpl != nil {
				t.Fatalf("Parse(%q) returned a template with error %v", src, err)
			}
			return
		}
		if tpl.String() != src || !tpl.Has(User) {
			t.Fatalf("Parse(%q) = %q, has user %v", src, tpl.String(), tpl.Has(User))
		}
		// Filled with safe values, a template always builds, and only of
		// characters a user name may carry.
		v := Values{User: "u", Session: "s", TTL: "1", Labels: engine.Labels{{Key: "asn", Value: "a"}, {Key: "city", Value: "c"}, {Key: "region", Value: "r"}, {Key: "state", Value: "t"}}}
		u, err := tpl.Username(&v)
		if err != nil {
			t.Fatalf("Parse(%q).Username(all) = %v", src, err)
		}
		for i := 0; i < len(u); i++ {
			if !literalByte(u[i]) {
				t.Fatalf("Parse(%q).Username = %q: byte %q", src, u, u[i])
			}
		}
	})
}

// FuzzUsername checks that no session id or label value a client sends
// can add a parameter: a username either is refused or has exactly the
// separators of the same template filled with one-letter values.
func FuzzUsername(f *testing.F) {
	f.Add("abc123", "us", "paris")
	f.Add("a-country-fr", "us-sessid-x", "")
	f.Add("x_y", "u:s", "p.a")
	f.Add("", "", "")
	f.Add(strings.Repeat("z", MaxValue+1), "US", "a b")
	templates := make([]*Template, 0, len(Presets)+1)
	for _, p := range append(Presets, Preset{Template: "{user}-session-{session}-country-{region}-city-{city}"}) {
		tpl, err := Parse(p.Template)
		if err != nil {
			f.Fatal(err)
		}
		templates = append(templates, tpl)
	}
	f.Fuzz(func(t *testing.T, session, region, city string) {
		var labels engine.Labels
		if region != "" {
			labels = append(labels, engine.Label{Key: "region", Value: region})
		}
		if city != "" {
			labels = append(labels, engine.Label{Key: "city", Value: city})
		}
		for _, tpl := range templates {
			v := Values{User: "u", Session: session, TTL: "10", Labels: labels}
			u, err := tpl.Username(&v)
			if err != nil {
				continue
			}
			ref := Values{User: "u", Session: one(session), TTL: "1", Labels: nil}
			for _, l := range labels {
				ref.Labels = append(ref.Labels, engine.Label{Key: l.Key, Value: "x"})
			}
			want, err := tpl.Username(&ref)
			if err != nil {
				t.Fatalf("%s: reference build failed: %v", tpl, err)
			}
			if separators(u) != separators(want) {
				t.Fatalf("%s with session %q, region %q, city %q = %q: other separators than %q", tpl, session, region, city, u, want)
			}
		}
	})
}

// one is "x" for a value given, "" for none.
func one(s string) string {
	if s == "" {
		return ""
	}
	return "x"
}

// separators is s without its letters and digits.
func separators(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x80 && alnum(byte(r)) {
			return -1
		}
		return r
	}, s)
}

package provider

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc, src, want string
	}{
		{"empty", "", "empty template"},
		{"unknown field", "{user}-sesion-{sesion}", "unknown field {sesion}"},
		{"unclosed brace", "{user}-session-{session", `"{" at byte 15 is never closed`},
		{"stray close brace", "{user}}", `"}" at byte 6 without "{"`},
		{"unclosed bracket", "{user}[-session-{session}", `"[" is never closed`},
		{"stray close bracket", "{user}]", `"]" at byte 6 without "["`},
		{"nested", "{user}[-a-[{session}]]", "do not nest"},
		{"group without field", "{user}[-x]", "has no field"},
		{"field twice", "{user}-{region}-{region}", "field {region} given twice"},
		{"optional user", "[{user}]", "{user} cannot be optional"},
		{"no user", "acct-session-{session}", "no {user}"},
		{"colon", "{user}:{session}", `character ':'`},
		{"space", "{user} -x", `character ' '`},
		{"run together", "{user}{session}", "must be set off"},
		{"letter delimiter", "{user}x{session}", "must be set off"},
		{"omitted group joins", "{user}[-s-{session}-]{region}", "must be set off"},
		{"too long", "{user}" + strings.Repeat("-", maxTemplate), "longer than"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.src, err, tc.want)
			}
		})
	}
}

func TestUsername(t *testing.T) {
	t.Parallel()
	us := engine.Labels{{Key: "region", Value: "us"}}
	for _, tc := range []struct {
		desc, src string
		v         Values
		want      string
		err       string
	}{
		{"all given", "{user}-session-{session}-country-{region}", Values{User: "acct", Session: "abc", Labels: us}, "acct-session-abc-country-us", ""},
		{"required missing", "{user}-session-{session}-country-{region}", Values{User: "acct", Session: "abc"}, "", "{region}: no value"},
		{"optional left out", "{user}[-country-{region}][-session-{session}]", Values{User: "acct"}, "acct", ""},
		{"optional sent", "{user}[-country-{region}][-session-{session}]", Values{User: "acct", Session: "s1", Labels: us}, "acct-country-us-session-s1", ""},
		{"ttl with session", "customer-{user}[-sessid-{session}-sesstime-{ttl}]", Values{User: "u", Session: "x", TTL: Minutes(DefaultTTL)}, "customer-u-sessid-x-sesstime-10", ""},
		{"group needs all", "customer-{user}[-sessid-{session}-sesstime-{ttl}]", Values{User: "u", TTL: "10"}, "customer-u", ""},
		{"user as written", "{user}[-session-{session}]", Values{User: "brd-customer-1-zone-r"}, "brd-customer-1-zone-r", ""},
		{"dash in session", "{user}-session-{session}", Values{User: "u", Session: "a-country-fr"}, "", "letters and digits only"},
		{"dash in label", "{user}-country-{region}", Values{User: "u", Labels: engine.Labels{{Key: "region", Value: "us-sessid-1"}}}, "", "letters and digits only"},
		{"long value", "{user}-session-{session}", Values{User: "u", Session: strings.Repeat("a", MaxValue+1)}, "", "longer than"},
		{"other labels ignored", "{user}[-country-{region}]", Values{User: "u", Labels: engine.Labels{{Key: "provider", Value: "x-y"}}}, "u", ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tpl, err := Parse(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Username(&tc.v)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Username = %q, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Username = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPresetsParse(t *testing.T) {
	t.Parallel()
	for _, p := range Presets {
		tpl, err := Parse(p.Template)
		if err != nil {
			t.Fatalf("preset %s: %v", p.Name, err)
		}
		// Every preset rotates without a session: the session is optional.
		if u, err := tpl.Username(&Values{User: "u", TTL: "10"}); err != nil || strings.Contains(u, "{") {
			t.Fatalf("preset %s without a session: %q, %v", p.Name, u, err)
		}
		if p.Source == "" {
			t.Fatalf("preset %s names no source", p.Name)
		}
	}
	if _, err := PresetByName("nope"); err == nil || !strings.Contains(err.Error(), "oxylabs") {
		t.Fatalf("PresetByName(nope) = %v, want the known names", err)
	}
}

func TestLabels(t *testing.T) {
	t.Parallel()
	tpl, err := Parse("{user}[-city-{city}][-country-{region}]")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tpl.Labels(), ","); got != "region,city" {
		t.Fatalf("Labels = %s, want region,city", got)
	}
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"{user}-session-{session}", true},
		{"{user}[-session-{session}]", false},
		{"{user}", false},
	} {
		tpl, err := Parse(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := tpl.Requires(Session); got != tc.want {
			t.Errorf("Parse(%q).Requires(Session) = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestPassedID(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"abc123", "a-b", "x:y.z", strings.Repeat("a", 26)} {
		id := PassedID(s)
		if !Safe(id) || len(id) > maxPassed || id != PassedID(s) {
			t.Fatalf("PassedID(%q) = %q: want a stable id of at most %d letters and digits", s, id, maxPassed)
		}
	}
	if PassedID("abc123") != "abc123" {
		t.Fatal("a safe id is not passed as it is")
	}
	if a, b := NewID(), NewID(); !Safe(a) || len(a) != idLen || a == b {
		t.Fatal("NewID is not a fresh id of letters and digits")
	}
}

// BenchmarkUsername is the cost of building one attempt's username: one
// allocation, the string.
func BenchmarkUsername(b *testing.B) {
	p, _ := PresetByName("oxylabs")
	tpl, err := Parse(p.Template)
	if err != nil {
		b.Fatal(err)
	}
	v := Values{User: "acct", Session: "abcdef123456", TTL: "10", Labels: engine.Labels{{Key: "region", Value: "US"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Username(&v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestUsernameAllocs(t *testing.T) {
	tpl, err := Parse("{user}[-country-{region}][-session-{session}]")
	if err != nil {
		t.Fatal(err)
	}
	v := Values{User: "acct", Session: "abc", Labels: engine.Labels{{Key: "region", Value: "us"}}}
	if n := testing.AllocsPerRun(100, func() { _, _ = tpl.Username(&v) }); n > 1 {
		t.Fatalf("Username allocates %v times, want 1", n)
	}
}

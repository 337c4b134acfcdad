package gateway

import (
	"net/http"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// FuzzParseControl: any proxy username and control headers either fail
// with an error or yield a valid session and labels; nothing panics.
func FuzzParseControl(f *testing.F) {
	for _, seed := range []struct{ user, session, labels string }{
		{"acct-session-abc123-region-us", "", ""},
		{"acct-session-abc-region-us-provider-acme", "abc", "tier=1"},
		{"acct", "s1", "region=us,provider=x"},
		{"acct-session", "", ""},
		{"acct-region-us-region-de", "", ""},
		{"-session--", "", "=,,"},
		{"acct-session-a b", "x\x00", "region"},
		{"acct-Region-US", "", ""},
	} {
		f.Add(seed.user, seed.session, seed.labels)
	}
	f.Fuzz(func(t *testing.T, user, session, labels string) {
		h := http.Header{}
		h.Set("Proxy-Authorization", basic(user, "pw"))
		if session != "" {
			h.Set(headerSession, session)
		}
		if labels != "" {
			h.Set(headerLabels, labels)
		}
		c, err := parseControl(h)
		if err != nil {
			return
		}
		if checkSession(c.session) != nil {
			t.Fatalf("accepted invalid session %q", c.session)
		}
		again, err := engine.ParseLabels(c.labels.String())
		if err != nil || again.String() != c.labels.String() {
			t.Fatalf("accepted labels %q that do not round-trip: %v", c.labels, err)
		}
	})
}

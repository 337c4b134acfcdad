package target

import "testing"

// TestDirectory follows what probes are told of a target as users'
// traffic reaches it and a reload changes the rules.
func TestDirectory(t *testing.T) {
	t.Parallel()
	health := New([]Rule{{Hosts: []string{"www.shop.test"}, Policy: Policy{ProbePath: "/health", BlockSignatures: []string{"captcha"}}}})
	ping := New([]Rule{{Hosts: []string{"*.shop.test"}, Policy: Policy{ProbePath: "/ping"}}})
	d := NewDirectory(health)
	steps := []struct {
		desc    string
		step    func()
		url     string
		neutral string
		policy  bool // PolicyOf finds a rule
	}{
		{"nothing noted: the key itself", func() {}, "http://shop.test/", "", false},
		{"an origin noted", func() { d.NoteOrigin("shop.test", "www.shop.test:8080") }, "http://www.shop.test:8080/health", "www.shop.test:443", true},
		{"a reload keeps the origin", func() { d = d.With(ping) }, "http://www.shop.test:8080/ping", "www.shop.test:443", true},
		{"no rules", func() { d = d.With(nil) }, "http://www.shop.test:8080/", "www.shop.test:443", false},
		{"another origin", func() { d.NoteOrigin("other.test", "[2001:db8::1]:81") }, "http://www.shop.test:8080/", "[2001:db8::1]:443", false},
	}
	for _, st := range steps {
		st.step()
		if got := d.ProbeURL("shop.test"); got != st.url {
			t.Errorf("%s: probe URL %q, want %q", st.desc, got, st.url)
		}
		if got := d.NeutralAuthority(); got != st.neutral {
			t.Errorf("%s: neutral authority %q, want %q", st.desc, got, st.neutral)
		}
		if got := d.PolicyOf("shop.test") != nil; got != st.policy {
			t.Errorf("%s: policy found %v, want %v", st.desc, got, st.policy)
		}
	}
	if !d.Known("shop.test") || d.Known("unknown.test") {
		t.Error("Known does not follow the origins noted")
	}
}

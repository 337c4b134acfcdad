package target

import (
	"testing"

	"github.com/switchyard/switchyard/internal/pacing"
)

func TestDefaultKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ host, want string }{
		{"example.com", "example.com"},
		{"www.example.com", "example.com"},
		{"WWW.Example.COM.", "example.com"},
		{"img.cdn.example.co.uk", "example.co.uk"},
		{"co.uk", "co.uk"},
		{"localhost", "localhost"},
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"user.github.io", "user.github.io"},
	}
	for _, tc := range tests {
		if got := DefaultKey(tc.host); got != tc.want {
			t.Errorf("DefaultKey(%q) = %q, want %q", tc.host, got, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	shop := Policy{ProbePath: "/robots.txt", Pace: pacing.Limits{Rate: 5}}
	img := Policy{ProbePath: "/img"}
	all := Policy{BlockSignatures: []string{"captcha"}}
	r := New([]Rule{
		{Hosts: []string{"img.example.com"}, Policy: img},
		{Hosts: []string{"example.com", "*.example.com", "example.net"}, Key: "example", Policy: shop},
		{Hosts: []string{"*.example.org"}, Policy: img},
		{Hosts: []string{"*"}, Policy: all},
	})
	tests := []struct {
		host, key string
		want      *Policy
	}{
		{"img.example.com", "example.com", &img}, // first rule wins over the later wildcard
		{"www.example.com", "example", &shop},
		{"EXAMPLE.com.", "example", &shop},
		{"example.net", "example", &shop},
		{"a.b.example.org", "example.org", &img},
		{"example.org", "example.org", &all}, // *.x does not match x itself
		{"other.test", "other.test", &all},
	}
	for _, tc := range tests {
		key, p := r.Resolve(tc.host)
		if key != tc.key || p == nil || p.ProbePath != tc.want.ProbePath || len(p.BlockSignatures) != len(tc.want.BlockSignatures) {
			t.Errorf("Resolve(%q) = %q, %+v; want %q, %+v", tc.host, key, p, tc.key, tc.want)
		}
	}
	if key, p := New(nil).Resolve("www.example.com"); key != "example.com" || p != nil {
		t.Errorf("no rules: %q %+v", key, p)
	}
}

func TestPace(t *testing.T) {
	t.Parallel()
	r := New([]Rule{
		{Hosts: []string{"*.example.com"}, Policy: Policy{Pace: pacing.Limits{Rate: 1}}},
		{Hosts: []string{"a.test", "b.test"}, Key: "ab", Policy: Policy{Pace: pacing.Limits{Rate: 2}}},
		{Hosts: []string{"example.net"}, Policy: Policy{Pace: pacing.Limits{Rate: 3}}},
	})
	tests := []struct {
		key  string
		want float64
	}{
		{"example.com", 1}, // the key of www.example.com finds the *.example.com rule
		{"ab", 2},
		{"example.net", 3},
		{"other.test", 0},
	}
	for _, tc := range tests {
		if got := r.Pace(tc.key).Rate; got != tc.want {
			t.Errorf("Pace(%q).Rate = %v, want %v", tc.key, got, tc.want)
		}
	}
	if !r.Paces() || New([]Rule{{Hosts: []string{"*"}}}).Paces() {
		t.Error("Paces wrong")
	}
}

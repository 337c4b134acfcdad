package engine

import (
	"slices"
	"strings"
	"testing"
)

func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{
		"",
		",,, ,\t",
		"region=us provider=acme",
		"region=us,provider=acme\tcity=nyc",
		"région=us city=zürich",
		"=",
		"a==b",
		"region=us region=eu",
		"Region=us",
		"k=v:1.2_3-X",
		strings.Repeat("k", 64) + "=" + strings.Repeat("v", 128),
		strings.Repeat("a=b,", 1000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLabels(s)
		if err != nil {
			if l != nil {
				t.Fatalf("ParseLabels(%q) = %v with error %v", s, l, err)
			}
			return
		}
		for i, lb := range l {
			if i > 0 && l[i-1].Key >= lb.Key {
				t.Fatalf("ParseLabels(%q) = %v: keys not sorted and unique", s, l)
			}
			if got, err := parseLabel(lb.Key+"="+lb.Value, false); err != nil || got != lb {
				t.Fatalf("ParseLabels(%q) returned label %v that fails validation: %v", s, lb, err)
			}
		}
		again, err := ParseLabels(l.String())
		if err != nil || !slices.Equal(again, l) {
			t.Fatalf("ParseLabels(%q).String() = %q re-parses to %v, %v", s, l.String(), again, err)
		}
	})
}

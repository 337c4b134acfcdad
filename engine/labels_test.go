package engine

import (
	"slices"
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	t.Parallel()
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	tests := []struct {
		in      string
		want    Labels
		wantErr string // substring of the error; "" means success
	}{
		{in: "", want: nil},
		{in: " \t,, ", want: nil},
		{in: "region=us", want: Labels{{"region", "us"}}},
		{in: "region=us provider=acme", want: Labels{{"provider", "acme"}, {"region", "us"}}},
		{in: "region=us,provider=acme", want: Labels{{"provider", "acme"}, {"region", "us"}}},
		{in: " ,\tregion=us ,\t, provider=acme,", want: Labels{{"provider", "acme"}, {"region", "us"}}},
		{in: "k.1_a-b=Val:2.x_Y-z", want: Labels{{"k.1_a-b", "Val:2.x_Y-z"}}},
		{in: long("k", 64) + "=" + long("V", 128), want: Labels{{long("k", 64), long("V", 128)}}},

		{in: "region", wantErr: `label "region": missing "="`},
		{in: "Region=us", wantErr: `label "Region=us": key must be lowercase [a-z0-9_.-]`},
		{in: "=us", wantErr: `label "=us": empty key`},
		{in: "region=", wantErr: `label "region=": empty value`},
		{in: "a==b", wantErr: `label "a==b": value has invalid character '='`},
		{in: "régión=us", wantErr: `label "régión=us": key has invalid character 'é'`},
		{in: "city=zürich", wantErr: `value has invalid character 'ü'`},
		{in: "k=\xff", wantErr: `value has invalid character "\xff"`},
		{in: "a\nb=c", wantErr: `key has invalid character '\n'`},
		{in: long("k", 65) + "=v", wantErr: "key longer than 64 characters"},
		{in: "k=" + long("v", 129), wantErr: "value longer than 128 characters"},
		{in: "region=us provider=acme region=eu", wantErr: `duplicate label key "region"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLabels(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseLabels(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("ParseLabels(%q) = %v on error, want nil", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLabels(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParseLabels(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

func TestLabelsStringRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"region=us", "region=us"},
		{"provider=acme,region=us", "provider=acme region=us"},
		{"z=1\ta=2 m=3", "a=2 m=3 z=1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			l, err := ParseLabels(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if s := l.String(); s != tt.want {
				t.Fatalf("String() = %q, want %q", s, tt.want)
			}
			again, err := ParseLabels(l.String())
			if err != nil || !slices.Equal(again, l) {
				t.Fatalf("ParseLabels(String()) = %v, %v; want %v", again, err, l)
			}
		})
	}
}

func TestLabelsGet(t *testing.T) {
	t.Parallel()
	l := Labels{{"provider", "acme"}, {"region", "us"}}
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"provider", "acme", true},
		{"region", "us", true},
		{"city", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			got, ok := l.Get(tt.key)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Get(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLabelsMatches(t *testing.T) {
	t.Parallel()
	route := Labels{{"city", "nyc"}, {"provider", "acme"}, {"region", "us"}}
	tests := []struct {
		name   string
		labels Labels
		c      Labels
		want   bool
	}{
		{"no constraints", route, nil, true},
		{"no labels no constraints", nil, nil, true},
		{"one match", route, Labels{{"region", "us"}}, true},
		{"all match", route, Labels{{"city", "nyc"}, {"provider", "acme"}, {"region", "us"}}, true},
		{"unsorted constraints", route, Labels{{"region", "us"}, {"city", "nyc"}}, true},
		{"wrong value", route, Labels{{"region", "eu"}}, false},
		{"missing key", route, Labels{{"asn", "7922"}}, false},
		{"one of two fails", route, Labels{{"region", "us"}, {"provider", "other"}}, false},
		{"unlabeled route", nil, Labels{{"region", "us"}}, false},
		{"values are case-sensitive", route, Labels{{"city", "NYC"}}, false},
		{"any value", Labels{{"region", AnyValue}}, Labels{{"region", "de"}}, true},
		{"any value, other key", Labels{{"region", AnyValue}}, Labels{{"city", "nyc"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.labels.Matches(tt.c); got != tt.want {
				t.Errorf("%v.Matches(%v) = %v, want %v", tt.labels, tt.c, got, tt.want)
			}
		})
	}
}

// Not parallel: AllocsPerRun counts every goroutine's allocations.
func TestLabelsMatchesAllocs(t *testing.T) {
	route := Labels{{"city", "nyc"}, {"provider", "acme"}, {"region", "us"}}
	c := Labels{{"region", "us"}, {"provider", "acme"}}
	if n := testing.AllocsPerRun(100, func() {
		if !route.Matches(c) {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Fatalf("Matches allocates %v times per call, want 0", n)
	}
}

func TestParseRouteLabels(t *testing.T) {
	t.Parallel()
	got, err := ParseRouteLabels("region=* provider=x")
	if err != nil || got.String() != "provider=x region=*" {
		t.Fatalf("ParseRouteLabels = %v, %v", got, err)
	}
	if _, err := ParseLabels("region=*"); err == nil {
		t.Fatal("ParseLabels took AnyValue: a request could ask for it")
	}
}

package engine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Label limits. Values are longer than keys because they carry operator data
// (ISP names, city codes, session ids) while keys are a small vocabulary.
const (
	maxLabelKey   = 64
	maxLabelValue = 128
)

// Labels is a route's set of key=value labels, sorted by key, keys unique.
// The same type holds a request's hard constraints: a constraint is just a
// label the route must carry.
type Labels []Label

// Label is one key=value pair of Labels.
type Label struct{ Key, Value string }

// ParseLabels parses "k=v k2=v2" or "k=v,k2=v2": labels are separated by any
// run of spaces, tabs or commas, so the same parser serves route configs and
// the X-Switchyard-Labels header. Keys are 1..64 characters of [a-z0-9_.-]
// and values 1..128 characters of [A-Za-z0-9_.:-]. Uppercase keys are
// rejected rather than folded, so that what an operator wrote is what is
// matched. Duplicate keys are an error. Empty input yields empty Labels.
func ParseLabels(s string) (Labels, error) { return parseLabels(s, false) }

// ParseRouteLabels is ParseLabels for a route's labels as the engine
// holds them, where a value may also be AnyValue: a route's labels sent
// between nodes (internal/cluster).
func ParseRouteLabels(s string) (Labels, error) { return parseLabels(s, true) }

func parseLabels(s string, anyValue bool) (Labels, error) {
	var l Labels
	for tok := range strings.FieldsFuncSeq(s, isLabelSep) {
		lb, err := parseLabel(tok, anyValue)
		if err != nil {
			return nil, err
		}
		l = append(l, lb)
	}
	slices.SortFunc(l, func(a, b Label) int { return strings.Compare(a.Key, b.Key) })
	for i := 1; i < len(l); i++ {
		if l[i].Key == l[i-1].Key {
			return nil, fmt.Errorf("duplicate label key %q", l[i].Key)
		}
	}
	return l, nil
}

func isLabelSep(r rune) bool { return r == ' ' || r == '\t' || r == ',' }

// parseLabel parses and validates one "key=value" token; anyValue lets
// the value be AnyValue.
func parseLabel(tok string, anyValue bool) (Label, error) {
	key, value, ok := strings.Cut(tok, "=")
	if !ok {
		return Label{}, fmt.Errorf("label %q: missing \"=\"", tok)
	}
	if err := checkLabelKey(key); err != nil {
		return Label{}, fmt.Errorf("label %q: %w", tok, err)
	}
	if anyValue && value == AnyValue {
		return Label{Key: key, Value: value}, nil
	}
	if err := checkLabelValue(value); err != nil {
		return Label{}, fmt.Errorf("label %q: %w", tok, err)
	}
	if key == TierKey {
		if _, err := ParseTier(value); err != nil {
			return Label{}, fmt.Errorf("label %q: %w", tok, err)
		}
	}
	return Label{Key: key, Value: value}, nil
}

func checkLabelKey(k string) error {
	if k == "" {
		return errors.New("empty key")
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		case 'A' <= c && c <= 'Z':
			return errors.New("key must be lowercase [a-z0-9_.-]")
		default:
			return fmt.Errorf("key has invalid character %s, want [a-z0-9_.-]", badChar(k[i:]))
		}
	}
	// Only ASCII gets here, so bytes are characters.
	if len(k) > maxLabelKey {
		return fmt.Errorf("key longer than %d characters", maxLabelKey)
	}
	return nil
}

func checkLabelValue(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '.', c == ':', c == '-':
		default:
			return fmt.Errorf("value has invalid character %s, want [A-Za-z0-9_.:-]", badChar(v[i:]))
		}
	}
	if len(v) > maxLabelValue {
		return fmt.Errorf("value longer than %d characters", maxLabelValue)
	}
	return nil
}

// badChar quotes the character at the start of s, or its first byte if that
// is not valid UTF-8, so that the error shows what the user actually sent.
func badChar(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("%q", s[:1])
	}
	return fmt.Sprintf("%q", r)
}

// Get returns the value of key. A linear scan: route label sets are small,
// and it stays correct even on Labels built by hand out of order.
func (l Labels) Get(key string) (string, bool) {
	for _, lb := range l {
		if lb.Key == key {
			return lb.Value, true
		}
	}
	return "", false
}

// String returns the canonical form "k=v k2=v2", which ParseLabels accepts.
func (l Labels) String() string {
	var b strings.Builder
	for i, lb := range l {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(lb.Key)
		b.WriteByte('=')
		b.WriteString(lb.Value)
	}
	return b.String()
}

// AnyValue as a route label's value matches every value of its key: a
// provider gateway route whose username template has {region} carries
// region=us and region=de alike (docs/design/014-provider-gateways.md).
// ParseLabels refuses it, so no request asks for it and no list line
// writes it.
const AnyValue = "*"

// TierKey is the label a request asks for a cost tier with: tier=N is
// served by routes of tier N or above, from N up as for a target that
// escalated to N (tier.go), never below. A route's tier is not one of its
// labels (the route list takes tier= apart), so Matches passes over the
// key; a client's tier=1 asks for tier 1 whatever the target's tier is.
const TierKey = "tier"

// MinTier is the cost tier c asks for with TierKey, 0 when it asks for
// none, or an error naming a value that is no tier.
func (c Labels) MinTier() (int, error) {
	v, ok := c.Get(TierKey)
	if !ok {
		return 0, nil
	}
	n, err := ParseTier(v)
	if err != nil {
		return 0, fmt.Errorf("label %s=%s: %w", TierKey, v, err)
	}
	return n, nil
}

// ParseTier reads a cost tier, 0 (the cheapest) to MaxTier: a route
// list's tier= and a request's TierKey.
func ParseTier(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxTier {
		return 0, fmt.Errorf("want a whole number from 0 (the cheapest) to %d", MaxTier)
	}
	return n, nil
}

// Matches reports whether l satisfies every constraint in c: each key of c
// but TierKey must be present in l with the same value, or with AnyValue.
// It runs on the routing hot path for every candidate route, so it does
// not allocate.
func (l Labels) Matches(c Labels) bool {
	for _, want := range c {
		if want.Key == TierKey {
			continue
		}
		if v, ok := l.Get(want.Key); !ok || v != want.Value && v != AnyValue {
			return false
		}
	}
	return true
}

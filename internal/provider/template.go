// Package provider is what Switchyard knows of provider gateways
// (docs/design/014-provider-gateways.md): one proxy endpoint backed by a
// rotating pool, steered by parameters in the proxy username. It parses the
// username template of a gateway route once, builds the username of each
// attempt from it, names the common conventions (presets), and keeps the
// bounded table of provider sessions (sub-exits) a gateway route has open.
package provider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Field is what a template placeholder is filled with.
type Field uint8

// The fields a template may name. User, Session and TTL are the gateway's;
// the others are label fields, filled from the request's label of the same
// key (region=us fills {region}).
const (
	literal Field = iota // not a field: a part of fixed text
	User                 // the user name of the route's URL, as written
	Session              // the provider session id (minted or passed through)
	TTL                  // session_ttl in whole minutes
	Region
	City
	State
	ASN
)

var fieldNames = [...]string{User: "user", Session: "session", TTL: "ttl", Region: "region", City: "city", State: "state", ASN: "asn"}

func (f Field) String() string { return fieldNames[f] }

// Limits of a template.
const (
	maxTemplate = 256 // bytes: longer than any provider's convention
	maxGroups   = 6   // optional parts: each is checked in every combination (checkDelimited)
	// MaxValue bounds a filled value (a session id, a label value).
	MaxValue = 64
)

// Template is a parsed username template: fixed text, {field}
// placeholders and [optional parts], an optional part being sent only
// when every field in it has a value ("{user}[-session-{session}]" sends
// the session parameter only for requests with a session). Immutable.
type Template struct {
	src      string
	parts    []part
	fields   uint16 // bit per Field named
	optional uint16 // bit per Field named inside an optional part
}

type part struct {
	text  string // literal parts
	field Field  // literal for fixed text
	group int8   // index of the optional part it belongs to; -1 for none
}

// String is the template as written; it holds no credential.
func (t *Template) String() string { return t.src }

// Has reports whether the template names f.
func (t *Template) Has(f Field) bool { return t.fields&(1<<f) != 0 }

// Requires reports whether every username of the template sends f: f is
// named outside the optional parts.
func (t *Template) Requires(f Field) bool { return t.Has(f) && t.optional&(1<<f) == 0 }

// Labels are the label keys the template can express, in Field order: a
// gateway route matches any value of them (docs/design/014).
func (t *Template) Labels() []string {
	var keys []string
	for f := Region; int(f) < len(fieldNames); f++ {
		if t.Has(f) {
			keys = append(keys, f.String())
		}
	}
	return keys
}

// Parse parses a username template. Errors name the problem and, where
// there is one, the byte offset; they quote the template, which holds no
// credential ({user} stands for the user name).
func Parse(src string) (*Template, error) {
	if src == "" {
		return nil, errors.New("empty template")
	}
	if len(src) > maxTemplate {
		return nil, fmt.Errorf("template longer than %d bytes", maxTemplate)
	}
	t := &Template{src: src}
	group, groups := int8(-1), 0
	groupFields := false // the open optional part has a field
	for i := 0; i < len(src); {
		switch c := src[i]; {
		case c == '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("template %q: \"{\" at byte %d is never closed", src, i)
			}
			name := src[i+1 : i+end]
			f := fieldByName(name)
			switch {
			case f == literal:
				return nil, fmt.Errorf("template %q: unknown field {%s} (want one of %s)", src, name, strings.Join(fieldNames[1:], ", "))
			case t.Has(f):
				return nil, fmt.Errorf("template %q: field {%s} given twice", src, name)
			case f == User && group >= 0:
				return nil, fmt.Errorf("template %q: {user} cannot be optional", src)
			}
			t.fields |= 1 << f
			if group >= 0 {
				t.optional |= 1 << f
			}
			t.parts = append(t.parts, part{field: f, group: group})
			groupFields = groupFields || group >= 0
			i += end + 1
		case c == '}':
			return nil, fmt.Errorf("template %q: \"}\" at byte %d without \"{\"", src, i)
		case c == '[':
			if group >= 0 {
				return nil, fmt.Errorf("template %q: \"[\" at byte %d inside an optional part (they do not nest)", src, i)
			}
			if groups == maxGroups {
				return nil, fmt.Errorf("template %q: more than %d optional parts", src, maxGroups)
			}
			group, groupFields = int8(groups), false
			groups++
			i++
		case c == ']':
			if group < 0 {
				return nil, fmt.Errorf("template %q: \"]\" at byte %d without \"[\"", src, i)
			}
			if !groupFields {
				return nil, fmt.Errorf("template %q: the optional part ending at byte %d has no field", src, i)
			}
			group = -1
			i++
		case literalByte(c):
			j := i
			for j < len(src) && literalByte(src[j]) {
				j++
			}
			t.parts = append(t.parts, part{text: src[i:j], group: group})
			i = j
		default:
			return nil, fmt.Errorf("template %q: character %q at byte %d cannot be sent in a user name (want letters, digits and ._~+=-)", src, c, i)
		}
	}
	if group >= 0 {
		return nil, fmt.Errorf("template %q: \"[\" is never closed", src)
	}
	if !t.Has(User) {
		return nil, fmt.Errorf("template %q: no {user}: the provider would not know the account", src)
	}
	if err := t.checkDelimited(groups); err != nil {
		return nil, fmt.Errorf("template %q: %w", src, err)
	}
	return t, nil
}

func fieldByName(name string) Field {
	for f, n := range fieldNames {
		if n != "" && n == name {
			return Field(f)
		}
	}
	return literal
}

// literalByte reports whether c may be fixed text of a template.
func literalByte(c byte) bool {
	return alnum(c) || strings.IndexByte("._~+=-", c) >= 0
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// checkDelimited makes sure that, whichever optional parts are sent, every
// field is set off from what is around it by a character no value can
// hold: values are letters and digits only (Values), so a value can never
// pass for, or run into, a parameter of its own.
func (t *Template) checkDelimited(groups int) error {
	for mask := 0; mask < 1<<groups; mask++ {
		var prev *part
		for i := range t.parts {
			p := &t.parts[i]
			if p.group >= 0 && mask&(1<<p.group) == 0 {
				continue
			}
			if prev != nil && (p.field != literal && !endsDelimited(prev) || prev.field != literal && !startsDelimited(p)) {
				f := p.field
				if f == literal {
					f = prev.field
				}
				return fmt.Errorf("field {%s} must be set off by a character other than a letter or digit (such as \"-\")", f)
			}
			prev = p
		}
	}
	return nil
}

func endsDelimited(p *part) bool   { return p.field == literal && !alnum(p.text[len(p.text)-1]) }
func startsDelimited(p *part) bool { return p.field == literal && !alnum(p.text[0]) }

// Values are what one attempt's username is filled with. Session and label
// values must be letters and digits only, at most MaxValue bytes: with the
// delimiters Parse insists on, no client-supplied value can add a
// parameter. User is the operator's and goes in as written.
type Values struct {
	User    string
	Session string        // "" for none
	TTL     string        // session_ttl in whole minutes as sent ("10"; Minutes); "" for none
	Labels  engine.Labels // the request's hard constraints
}

// FillError is why a username could not be built: a field that must be
// sent has no value, or a value is not safe to send.
type FillError struct {
	Field  Field
	Reason string
}

func (e *FillError) Error() string { return "{" + e.Field.String() + "}: " + e.Reason }

// Username builds the username of v. It allocates once, the result.
func (t *Template) Username(v *Values) (string, error) {
	n, err := t.walk(v, nil)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(n)
	t.walk(v, &b)
	return b.String(), nil
}

// walk checks v against the template and returns the username's length;
// with b, it also writes the username there.
func (t *Template) walk(v *Values, b *strings.Builder) (int, error) {
	n := 0
	for i := 0; i < len(t.parts); {
		p := &t.parts[i]
		if p.group >= 0 {
			end := i
			for end < len(t.parts) && t.parts[end].group == p.group {
				end++
			}
			if !t.filled(v, i, end) {
				i = end
				continue
			}
		}
		s, err := t.value(v, p)
		if err != nil {
			return 0, err
		}
		n += len(s)
		if b != nil {
			b.WriteString(s)
		}
		i++
	}
	return n, nil
}

// filled reports whether every field of parts[from:to] has a value.
func (t *Template) filled(v *Values, from, to int) bool {
	for _, p := range t.parts[from:to] {
		if s, _ := lookup(v, p.field); p.field != literal && s == "" {
			return false
		}
	}
	return true
}

// value is the text p stands for in v's username.
func (t *Template) value(v *Values, p *part) (string, error) {
	if p.field == literal {
		return p.text, nil
	}
	s, checked := lookup(v, p.field)
	switch {
	case s == "":
		return "", &FillError{Field: p.field, Reason: "no value (the route cannot carry a request without it)"}
	case checked:
		return s, nil
	case len(s) > MaxValue:
		return "", &FillError{Field: p.field, Reason: fmt.Sprintf("value longer than %d bytes", MaxValue)}
	case !Safe(s):
		return "", &FillError{Field: p.field, Reason: "value may hold letters and digits only"}
	}
	return s, nil
}

// lookup is field f's value in v, and whether it needs no check (the
// operator's user name, the ttl's digits).
func lookup(v *Values, f Field) (s string, checked bool) {
	switch f {
	case User:
		return v.User, true
	case Session:
		return v.Session, false
	case TTL:
		return v.TTL, true
	}
	s, _ = v.Labels.Get(f.String())
	return s, false
}

// Safe reports whether s is a value a username may carry: letters and
// digits, nothing that a provider could read as a separator.
func Safe(s string) bool {
	for i := 0; i < len(s); i++ {
		if !alnum(s[i]) {
			return false
		}
	}
	return s != ""
}

// Minutes is d in whole minutes as a template's {ttl} sends it, "" when
// under a minute.
func Minutes(d time.Duration) string {
	if m := int64(d / time.Minute); m > 0 {
		return strconv.FormatInt(m, 10)
	}
	return ""
}

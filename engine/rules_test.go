package engine

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// DefaultRules hands out copies: a caller that edits its table (as config
// does for [engine.cooldowns]) changes neither the default nor an engine
// built from it.
func TestDefaultRulesIsACopy(t *testing.T) {
	t.Parallel()
	want := DefaultRules().Class[Blocked].Cooldown
	e, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	edited := DefaultRules()
	edited.Class[Blocked].Cooldown = want + time.Hour
	edited.Version = "edited"
	if got := DefaultRules(); got.Class[Blocked].Cooldown != want || got.Version == "edited" {
		t.Fatalf("editing a copy changed DefaultRules: %v, %q", got.Class[Blocked].Cooldown, got.Version)
	}
	if got := e.Config().Rules.Rule(Blocked).Cooldown; got != want {
		t.Fatalf("editing a copy changed an engine's rules: blocked cooldown %v, want %v", got, want)
	}

	// An engine's own table is its own too.
	e.Config().Rules.Class[Blocked].Cooldown = want + time.Minute
	other, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := other.Config().Rules.Rule(Blocked).Cooldown; got != want {
		t.Fatalf("one engine's table is another's: blocked cooldown %v, want %v", got, want)
	}
}

// docs/design/006-model.md shows the default rule table; a class added or
// a rule changed must change the note too.
func TestModelNoteShowsTheRuleTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/design/006-model.md")
	if err != nil {
		t.Fatal(err)
	}
	dash := func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	}
	rules := DefaultRules()
	for c := range Class(numClasses) {
		r := rules.Rule(c)
		var scope string
		switch r.Scope {
		case ScopeRoute | ScopeTarget:
			scope = "route + target"
		case ScopeRoute:
			scope = "route"
		case ScopeTarget:
			scope = "target"
		default:
			scope = "none"
		}
		var effects []string
		for _, e := range []struct {
			on   bool
			name string
		}{{r.Breaker, "breaker"}, {r.Retry, "retry"}, {r.AtOnce, "at once"}, {r.Incident, "incident"}, {r.Timeout, "timeout"}} {
			if e.on {
				effects = append(effects, e.name)
			}
		}
		var cooldown, coolAfter string
		if r.Cooldown > 0 {
			cooldown = r.Cooldown.String()
		}
		if r.CoolAfter > 0 {
			coolAfter = strconv.Itoa(r.CoolAfter)
		}
		row := "| `" + c.String() + "` | " + scope + " | " + dash(strings.Join(effects, ", ")) + " | " + dash(cooldown) + " | " + dash(coolAfter) + " |\n"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/design/006-model.md has no row %q", row)
		}
	}
}

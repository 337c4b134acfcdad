package engine

import (
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

package sim

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

// builtinFiles are the built-in scenarios. The same files ship in the
// repository's scenarios/ directory for users to copy; a test keeps the
// two identical.
//
//go:embed scenarios/*.toml
var builtinFiles embed.FS

// builtinNames orders the built-in scenarios from the everyday mix through
// one failure mode each to the pool at scale.
var builtinNames = []string{
	"mixed", "slow-mix", "blackholes", "pool-of-3", "half-blackholed", "slowing",
	"limits-everywhere", "limits-saturated", "limits-roomy", "burst-bans", "short-bans", "target-bans", "most-banned", "rate-limited", "outage", "flapping",
	"soft-ban", "identical-pages", "flaky-403", "auth-mix", "site-down", "slow-vs-fast", "new-exits", "tiers", "large",
}

// BuiltinNames lists the built-in scenarios in the order bench runs them.
func BuiltinNames() []string { return slices.Clone(builtinNames) }

// Builtin returns the built-in scenario called name.
func Builtin(name string) (*Scenario, error) {
	if !slices.Contains(builtinNames, name) {
		return nil, fmt.Errorf("unknown built-in scenario %q (want %s)", name, strings.Join(builtinNames, ", "))
	}
	data, err := builtinFiles.ReadFile("scenarios/" + name + ".toml")
	if err != nil {
		return nil, err
	}
	return ParseScenario(name+".toml", data)
}

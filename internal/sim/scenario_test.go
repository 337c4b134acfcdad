package sim

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// scnHead is the valid start of the files below: five lines, so a case's
// own lines start at line 6.
const scnHead = `tasks = 10
[[targets]]
name = "shop"
[[routes]]
name = "a"
`

func TestParseScenarioErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		src  string
		want string
	}{
		{"syntax error", "tasks = 10\n[[targets]\nname = 'x'\n", "bad.toml:2: "},
		{"bad value", "tasks = 10\n[[targets]]\nname = 'x'\nweight = 2x\n", "bad.toml:4: "},
		{"control character", "\x01", "bad.toml:1: "}, // the library gives no offset
		{"key defined twice", "tasks = 10\ntasks = 11\n", "bad.toml:2: Key 'tasks' has already been defined"},
		{"unknown top-level key", "tasks = 10\ntask = 3\n", "bad.toml:2: task: unknown key"},
		{"unknown key in a behaviour", scnHead + "[[routes]]\nname = 'b'\n[[routes.behaviours]]\nkind = 'dead'\n[[routes]]\nname = 'c'\n[[routes.behaviours]]\nkind = 'ratelimit'\ntarget = 'shop'\nrsp = 3\n",
			"bad.toml:15: routes[2].behaviours[0].rsp: unknown key"},
		{"unknown table", scnHead + "[[route]]\nname = 'b'\n", "bad.toml:6: route[0]: unknown key"},
		{"unknown kind", scnHead + "[[routes]]\nname = 'b'\n[[routes.behaviours]]\nkind = 'dead'\n[[routes.behaviours]]\nkind = 'deda'\n",
			`bad.toml:11: routes[1].behaviours[1]: unknown kind "deda" (want dead, blackhole, errors, auth, ban, ratelimit, softban, slow, degrade, flap, outage, burstban)`},
		{"missing kind", scnHead + "[[routes.behaviours]]\nfrom = '1m'\n", "bad.toml:6: routes[0].behaviours[0]: missing kind"},
		{"key of another kind", scnHead + "[[routes.behaviours]]\nkind = 'dead'\nrps = 3\n", `bad.toml:8: routes[0].behaviours[0].rps: not a key of kind "dead"`},
		{"ratelimit without rps", scnHead + "[[routes.behaviours]]\nkind = 'ratelimit'\ntarget = 'shop'\n", "bad.toml:7: routes[0].behaviours[0]: ratelimit needs rps"},
		{"ban without target", scnHead + "[[routes.behaviours]]\nkind = 'ban'\n", "bad.toml:6: routes[0].behaviours[0].target: ban needs a target"},
		{"burstban without limit", scnHead + "[[routes.behaviours]]\nkind = 'burstban'\nwindow = '1m'\n", "bad.toml:7: routes[0].behaviours[0]: burstban needs limit"},
		{"neither tasks nor duration", "[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml: tasks: missing: give tasks or duration"},
		{"negative duration", "duration = '-1s'\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml:1: duration: must not be negative"},
		{"zero client attempts", "tasks = 1\nclient_attempts = 0\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml:2: client_attempts: must be positive"},
		{"retry_refusals not a boolean", "tasks = 1\nretry_refusals = 1\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml:2: retry_refusals: want a boolean, not an integer"},
		{"ban without target", scnHead + "[[routes.behaviours]]\nkind = 'ban'\n", "routes[0].behaviours[0].target: ban needs a target"},
		{"errors without p", scnHead + "[[routes.behaviours]]\nkind = 'errors'\n", "bad.toml:7: routes[0].behaviours[0]: errors needs p"},
		{"tier above the costliest", "tasks = 1\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\ntier = 8\n", "routes[0].tier: must be in [0, 7]"},
		{"negative price", "tasks = 1\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\nprice_per_request = -1\n", "routes[0].price_per_request: must not be negative"},
		{"slow without factor", scnHead + "[[routes.behaviours]]\nkind = 'slow'\n", "routes[0].behaviours[0]: slow needs factor"},
		{"degrade without factor", scnHead + "[[routes.behaviours]]\nkind = 'degrade'\nuntil = '1m'\n", "routes[0].behaviours[0]: degrade needs factor"},
		{"degrade without until", scnHead + "[[routes.behaviours]]\nkind = 'degrade'\nfactor = 2\n", "routes[0].behaviours[0].until: degrade needs until"},
		{"flap without period", scnHead + "[[routes.behaviours]]\nkind = 'flap'\n", "routes[0].behaviours[0]: flap needs period"},
		{"zero period", scnHead + "[[routes.behaviours]]\nkind = 'flap'\nperiod = '0s'\n", "bad.toml:8: routes[0].behaviours[0].period: must be positive"},
		{"negative latency", scnHead + "latency = '-5ms'\n", "bad.toml:6: routes[0].latency: must be positive"},
		{"negative jitter", scnHead + "jitter = -0.1\n", "bad.toml:6: routes[0].jitter: must not be negative"},
		{"negative joins", scnHead + "joins = '-1m'\n", "bad.toml:6: routes[0].joins: must not be negative"},
		{"zero count", scnHead + "count = 0\n", "bad.toml:6: routes[0].count: must be positive"},
		{"too many routes", scnHead + "count = 600000\n[[routes]]\nname = 'b'\ncount = 600000\n", "bad.toml:9: routes[1].count: more than 1000000 routes"},
		{"infinite factor", scnHead + "[[routes.behaviours]]\nkind = 'slow'\nfactor = inf\n", "bad.toml:8: routes[0].behaviours[0].factor: must be a finite number"},
		{"negative p", scnHead + "[[routes.behaviours]]\nkind = 'errors'\np = -0.5\n", "bad.toml:8: routes[0].behaviours[0].p: must be between 0 and 1"},
		{"p above 1", scnHead + "[[routes.behaviours]]\nkind = 'softban'\np = 1.5\n", "routes[0].behaviours[0].p: must be between 0 and 1"},
		{"negative rps", scnHead + "[[routes.behaviours]]\nkind = 'ratelimit'\ntarget = 'shop'\nrps = -1\n", "bad.toml:9: routes[0].behaviours[0].rps: must be positive"},
		{"negative from", scnHead + "[[routes.behaviours]]\nkind = 'dead'\nfrom = '-1m'\n", "bad.toml:8: routes[0].behaviours[0].from: must not be negative"},
		{"unknown target", scnHead + "[[routes.behaviours]]\nkind = 'ban'\ntarget = 'nope'\n", `bad.toml:8: routes[0].behaviours[0].target: unknown target "nope"`},
		{"until before from", scnHead + "[[routes.behaviours]]\nkind = 'outage'\nfrom = '2m'\nuntil = '1m'\n", "bad.toml:9: routes[0].behaviours[0].until: must be after from"},
		{"until equal to from", scnHead + "[[routes.behaviours]]\nkind = 'outage'\nfrom = '2m'\nuntil = '2m'\n", "routes[0].behaviours[0].until: must be after from"},
		{"bad duration", scnHead + "latency = '5 s'\n", `bad.toml:6: routes[0].latency: bad duration "5 s"`},
		{"duration as a number", scnHead + "latency = 5\n", `bad.toml:6: routes[0].latency: want a duration string like "250ms", not an integer`},
		{"wrong type", "tasks = 'many'\n", "bad.toml:1: tasks: want an integer, not a string"},
		{"missing tasks", "[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml: tasks: missing"},
		{"zero tasks and no duration", "tasks = 0\n[[targets]]\nname = 'x'\n[[routes]]\nname = 'a'\n", "bad.toml:1: tasks: a scenario needs tasks or a duration"},
		{"zero workers", "workers = 0\n" + scnHead, "bad.toml:1: workers: must be positive"},
		{"negative seed", "seed = -1\n" + scnHead, "bad.toml:1: seed: must not be negative"},
		{"negative think", "think = '-1s'\n" + scnHead, "bad.toml:1: think: must not be negative"},
		{"no routes", "tasks = 10\n[[targets]]\nname = 'x'\n", "bad.toml: routes: at least one [[routes]] is needed"},
		{"no targets", "tasks = 10\n[[routes]]\nname = 'a'\n", "bad.toml: targets: at least one [[targets]] is needed"},
		{"target without name", "tasks = 10\n[[targets]]\nweight = 2\n[[routes]]\nname = 'a'\n", "bad.toml:2: targets[0].name: missing"},
		{"duplicate target", scnHead + "[[targets]]\nname = 'shop'\n", `bad.toml:7: targets[1].name: duplicate target "shop"`},
		{"negative weight", "tasks = 10\n[[targets]]\nname = 'x'\nweight = -1\n[[routes]]\nname = 'a'\n", "bad.toml:4: targets[0].weight: must not be negative"},
		{"all weights zero", "tasks = 10\n[[targets]]\nname = 'x'\nweight = 0\n[[routes]]\nname = 'a'\n", "targets: every weight is 0"},
		{"route named twice", scnHead + "count = 2\n[[routes]]\nname = 'a-2'\n", `bad.toml:8: routes[1].name: route "a-2" is named twice`},
		{"unknown down class", scnHead + "[[targets.down]]\nclass = 'boom'\n", `bad.toml:7: targets[0].down[0].class: unknown class "boom"`},
		{"down window answering ok", scnHead + "[[targets.down]]\nclass = 'ok'\n", "bad.toml:7: targets[0].down[0].class: a down target cannot answer ok"},
		{"down window until before from", scnHead + "[[targets.down]]\nfrom = '2m'\nuntil = '1m'\n", "bad.toml:8: targets[0].down[0].until: must be after from"},
		{"inline behaviour: line of its array", scnHead + "behaviours = [{kind = 'ban'}]\n", "bad.toml:6: routes[0].behaviours[0].target: ban needs a target"},
		{"structure of the wrong type", "tasks = 10\nroutes = 5\n", "bad.toml: toml: line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			s, err := ParseScenario("bad.toml", []byte(tt.src))
			if err == nil {
				t.Fatalf("ParseScenario = %+v, want error %q", s, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseScenarioDefaults(t *testing.T) {
	t.Parallel()
	src := scnHead + `[[routes.behaviours]]
kind = "softban"
target = "shop"
[[routes.behaviours]]
kind = "ratelimit"
target = "shop"
rps = 2
[[targets.down]]
from = "1m"
`
	got, err := ParseScenario("dir/minimal.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Scenario{
		Name:           "minimal",
		Seed:           1,
		Tasks:          10,
		Workers:        32,
		AttemptTimeout: 30 * time.Second,
		MaxAttempts:    3,
		ClientTimeout:  10 * time.Second,
		ClientAttempts: 3,
		TaskDeadline:   60 * time.Second,
		Targets:        []TargetSpec{{Name: "shop", Weight: 1, Down: []DownWindow{{From: time.Minute, Class: engine.Target5xx}}}},
		Routes: []RouteGroup{{Name: "a", Count: 1, Latency: 200 * time.Millisecond, Jitter: 0.3, Weight: 1, Behaviours: []Behaviour{
			{Kind: KindSoftban, Target: "shop", P: 1},
			{Kind: KindRatelimit, Target: "shop", RPS: 2, RetryAfter: 30 * time.Second},
		}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseScenario =\n%+v\nwant\n%+v", got, want)
	}
}

// scnEveryKind uses every key and every kind, so the round trip covers them.
const scnEveryKind = `name = "every-kind"
description = "one of each"
seed = 0
duration = "10m"
tasks = 100
workers = 3
attempt_timeout = "2s"
max_attempts = 2
client_timeout = "5s"
client_attempts = 2
task_deadline = "1h30m"
think = "15ms"
session_tasks = 4
retry_refusals = true

[[targets]]
name = "shop"
weight = 0.5
[[targets.down]]
from = "1m"
until = "2m"
class = "target_timeout"
[[targets.down]]
from = "3m"

[[targets]]
name = "news"
weight = 2

[[routes]]
name = "every"
count = 3
latency = "150ms"
jitter = 0
max_inflight = 4
[[routes.behaviours]]
kind = "dead"
from = "10s"
until = "20s"
[[routes.behaviours]]
kind = "blackhole"
target = "news"
[[routes.behaviours]]
kind = "errors"
p = 0
[[routes.behaviours]]
kind = "auth"
[[routes.behaviours]]
kind = "ban"
target = "shop"
[[routes.behaviours]]
kind = "ratelimit"
target = "shop"
rps = 0.25
[[routes.behaviours]]
kind = "softban"
p = 0.125
[[routes.behaviours]]
kind = "slow"
factor = 1.5
[[routes.behaviours]]
kind = "degrade"
until = "5m"
factor = 3
[[routes.behaviours]]
kind = "flap"
period = "45s"
[[routes.behaviours]]
kind = "burstban"
target = "shop"
limit = 20
window = "1m"
penalty = "2m"
[[routes.behaviours]]
kind = "outage"
from = "1m"
`

func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	sources := map[string][]byte{"every-kind": []byte(scnEveryKind)}
	for _, name := range BuiltinNames() {
		data, err := builtinFiles.ReadFile("scenarios/" + name + ".toml")
		if err != nil {
			t.Fatal(err)
		}
		sources[name] = data
	}
	for name, data := range sources {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseScenario(name+".toml", data)
			if err != nil {
				t.Fatal(err)
			}
			scnRoundTrip(t, s)
		})
	}
}

// scnRoundTrip checks that s encodes to a file that parses back to s.
func scnRoundTrip(t *testing.T, s *Scenario) {
	t.Helper()
	enc, err := s.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	back, err := ParseScenario("encoded.toml", enc)
	if err != nil {
		t.Fatalf("parsing the encoded scenario: %v\n%s", err, enc)
	}
	if !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip changed the scenario:\n got %+v\nwant %+v\nfile:\n%s", back, s, enc)
	}
}

func TestEncodeRejectsHugeSeed(t *testing.T) {
	t.Parallel()
	s, err := ParseScenario("s.toml", []byte(scnHead))
	if err != nil {
		t.Fatal(err)
	}
	s.Seed = math.MaxUint64
	if _, err := s.Encode(); err == nil {
		t.Error("Encode accepted a seed TOML cannot hold")
	}
}

func TestValidateCodeBuiltScenario(t *testing.T) {
	t.Parallel()
	s, err := ParseScenario("s.toml", []byte(scnHead))
	if err != nil {
		t.Fatal(err)
	}
	// A field of another kind would be lost by Encode.
	s.Routes[0].Behaviours = []Behaviour{{Kind: KindDead, Factor: 2}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `routes[0].behaviours[0].factor: not a key of kind "dead"`) {
		t.Errorf("Validate = %v, want a factor error", err)
	}
}

func TestLoadScenario(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte(scnHead), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(scnHead+"colour = 'red'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadScenario(good)
	if err != nil || s.Name != "good" {
		t.Errorf("LoadScenario(good) = %+v, %v; want the scenario named good", s, err)
	}
	if _, err := LoadScenario(bad); err == nil || !strings.Contains(err.Error(), bad+":6: routes[0].colour: unknown key") {
		t.Errorf("LoadScenario(bad) error = %v, want it to name %s:6", err, bad)
	}
	if _, err := LoadScenario(filepath.Join(dir, "missing.toml")); err == nil {
		t.Error("LoadScenario of a missing file succeeded")
	}
}

func TestBuiltin(t *testing.T) {
	t.Parallel()
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			w := s.World()
			shape := struct{ routes, targets, minutes, workers [2]int }{
				[2]int{3, 100}, [2]int{2, 10}, [2]int{3, 10}, [2]int{8, 32},
			}
			if name == "large" {
				shape = struct{ routes, targets, minutes, workers [2]int }{
					[2]int{10_000, 10_000}, [2]int{50, 50}, [2]int{15, 15}, [2]int{256, 256},
				}
			}
			for _, c := range []struct {
				what   string
				got    int
				within [2]int
			}{
				{"routes", w.Routes(), shape.routes},
				{"targets", w.Targets(), shape.targets},
				{"minutes", int(s.Duration / time.Minute), shape.minutes},
				{"workers", s.Workers, shape.workers},
			} {
				if c.got < c.within[0] || c.got > c.within[1] {
					t.Errorf("%s = %d, want %d…%d", c.what, c.got, c.within[0], c.within[1])
				}
			}
			if s.Name != name || s.Description == "" {
				t.Errorf("name %q, description %q: want %q and a description", s.Name, s.Description, name)
			}
		})
	}
	if _, err := Builtin("nope"); err == nil || !strings.Contains(err.Error(), "mixed") {
		t.Errorf("Builtin(nope) error = %v, want one listing the names", err)
	}
}

// TestBuiltinFilesMatchExamples keeps the embedded scenarios and the
// user-facing copies in scenarios/ from drifting apart.
func TestBuiltinFilesMatchExamples(t *testing.T) {
	t.Parallel()
	examples, err := filepath.Glob("../../scenarios/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, path := range examples {
		names = append(names, strings.TrimSuffix(filepath.Base(path), ".toml"))
	}
	embedded, err := builtinFiles.ReadDir("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	var builtin []string
	for _, e := range embedded {
		builtin = append(builtin, strings.TrimSuffix(e.Name(), ".toml"))
	}
	want := slices.Sorted(slices.Values(BuiltinNames()))
	if !slices.Equal(names, want) || !slices.Equal(builtin, want) {
		t.Fatalf("scenarios/ has %v and the embedded files are %v; want both to be %v", names, builtin, want)
	}
	for _, path := range examples {
		example, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		inside, err := builtinFiles.ReadFile("scenarios/" + filepath.Base(path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(example, inside) {
			t.Errorf("%s differs from internal/sim/scenarios/%s; copy one over the other", path, filepath.Base(path))
		}
	}
}

// FuzzParseScenario checks that no input panics the parser and that what
// it accepts encodes and parses back unchanged.
func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(scnEveryKind))
	for _, name := range BuiltinNames() {
		if name == "large" {
			continue // the others cover its keys, faster
		}
		data, err := builtinFiles.ReadFile("scenarios/" + name + ".toml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario("fuzz.toml", data)
		if err != nil {
			return
		}
		scnRoundTrip(t, s)
	})
}

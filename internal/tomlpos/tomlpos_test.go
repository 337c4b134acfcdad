package tomlpos

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// file is valid TOML (TestFileDecodes checks) with one of each thing the
// scanner must see past or into.
const file = `# comment = 1
a = 1
description = """
tasks = 1 [x]
"""
literal = '''
[not.a.table]
'''
"quoted.key" = 1
'single' = 2
"with = and ]" = 3
[engine]
  alpha = 0.2 # comment
  cooldowns.blocked = "1m"
list = [
  "x = 1",
  ["nested", "[still]"],
  { name = "inline" },
] # after the array
after_list = "#not a comment"
inline = { b = 1, c = { d = 2 } }
[engine.limits]
blocked = "1m"
[ "spaced" . header ] # comment
k = 1
[[routes]]
name = "a"
[[routes.behaviours]]
kind = "x"
[[routes.behaviours]]
kind = "y"
[routes.behaviours.extra]
e = 1
[[routes]]
name = "b"
behaviours = [
  { kind = "z" },
]
escaped = "a \" = [ "
[extra]
k = 3
`

func TestFileDecodes(t *testing.T) {
	t.Parallel()
	var v map[string]any
	if _, err := toml.Decode(file, &v); err != nil {
		t.Fatal(err)
	}
}

func TestLine(t *testing.T) {
	t.Parallel()
	ix := Scan([]byte(file))
	tests := []struct {
		desc string
		path string
		want int
	}{
		{"top-level key", "a", 2},
		{"multi-line string", "description", 3},
		{"key inside a multi-line string", "tasks", 0},
		{"table inside a literal multi-line string", "not.a.table", 0},
		{"quoted key with a dot", `"quoted.key"`, 9},
		{"single-quoted key", "single", 10},
		{"quoted key with = and ]", `"with = and ]"`, 11},
		{"table", "engine", 12},
		{"indented key", "engine.alpha", 13},
		{"dotted key", "engine.cooldowns.blocked", 14},
		{"multi-line array", "engine.list", 15},
		{"key after a multi-line array", "engine.after_list", 20},
		{"inline table", "engine.inline", 21},
		{"key in an inline table, by its parent", "engine.inline.c.d", 21},
		{"sub-table", "engine.limits.blocked", 23},
		{"spaced, quoted header", "spaced.header.k", 25},
		{"element of an array of tables", "routes[0]", 26},
		{"key of the first element", "routes[0].name", 27},
		{"nested array of tables", "routes[0].behaviours[0].kind", 29},
		{"its second element", "routes[0].behaviours[1].kind", 31},
		{"table under a nested element", "routes[0].behaviours[1].extra.e", 33},
		{"key of the second element", "routes[1].name", 35},
		{"array of inline tables", "routes[1].behaviours", 36},
		{"element of an inline array, by its parent", "routes[1].behaviours[0].kind", 36},
		{"key after an escaped quote", "routes[1].escaped", 39},
		{"missing key, by its table", "routes[1].nope", 34},
		{"missing element, by its array", "routes[5].name", 0},
		{"table after them", "extra.k", 41},
		{"missing", "nope", 0},
	}
	for _, tc := range tests {
		if got := ix.Line(tc.path); got != tc.want {
			t.Errorf("%s: Line(%s) = %d, want %d", tc.desc, tc.path, got, tc.want)
		}
	}
}

func TestFirst(t *testing.T) {
	t.Parallel()
	ix := Scan([]byte(file))
	tests := []struct {
		desc     string
		key      toml.Key
		wantPath string
		wantLine int
	}{
		{"plain key", toml.Key{"engine", "alpha"}, "engine.alpha", 13},
		{"array of tables", toml.Key{"routes"}, "routes[0]", 26},
		{"key of the first element that has it", toml.Key{"routes", "escaped"}, "routes[1].escaped", 39},
		{"nested array of tables", toml.Key{"routes", "behaviours", "kind"}, "routes[0].behaviours[0].kind", 29},
		{"quoted part", toml.Key{"quoted.key"}, `"quoted.key"`, 9},
		{"missing", toml.Key{"routes", "nope"}, "routes.nope", 0},
	}
	for _, tc := range tests {
		path, line := ix.First(tc.key)
		if path != tc.wantPath || line != tc.wantLine {
			t.Errorf("%s: First(%s) = %s, %d; want %s, %d", tc.desc, tc.key, path, line, tc.wantPath, tc.wantLine)
		}
	}
}

// FuzzScan checks that no input panics the scanner and that every line it
// names is one of the input's.
func FuzzScan(f *testing.F) {
	f.Add([]byte(file), "routes[0].behaviours[1].kind")
	f.Add([]byte("[[a]]\n[[a.b]]\nc = [\n'''\n]\n"), "a[0].b[0].c")
	f.Add([]byte(`["a]"]`+"\n"+`x = "\`), `"a]".x`)
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		ix := Scan(data)
		lines := strings.Count(string(data), "\n") + 1
		if n := ix.Line(path); n < 0 || n > lines {
			t.Fatalf("Line(%q) = %d, outside 0…%d", path, n, lines)
		}
		if _, n := ix.First(strings.Split(path, ".")); n < 0 || n > lines {
			t.Fatalf("First(%q) = %d, outside 0…%d", path, n, lines)
		}
	})
}

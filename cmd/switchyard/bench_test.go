package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runBench runs the bench subcommand and returns its exit code and output.
func runBench(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := bench(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBenchJSONIsDeterministic(t *testing.T) {
	t.Parallel()
	args := []string{"-scenario", "mixed", "-tasks", "1500", "-policies", "round_robin,switchyard,proxyops,oracle", "-json"}
	code, first, stderr := runBench(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, second, _ := runBench(t, args...)
	strip := func(s string) []map[string]any {
		var rows []map[string]any
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			var row map[string]any
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			delete(row, "attempts_per_wall_s") // wall-clock speed, the only non-simulated field
			rows = append(rows, row)
		}
		return rows
	}
	a, b := strip(first), strip(second)
	if len(a) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(a), first)
	}
	for _, key := range []string{"scenario", "policy", "tasks", "completion_rate", "attempts_per_completed", "wasted_attempts",
		"p50_ms", "p95_ms", "p99_ms", "detect_ms", "recover_ms", "false_ejections"} {
		if _, ok := a[0][key]; !ok {
			t.Errorf("JSON lacks %q", key)
		}
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("same seed, different output:\n%s\n%s", ja, jb)
	}
}

func TestBenchTableAndPlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plot := filepath.Join(dir, "p.svg")
	code, out, stderr := runBench(t, "-scenario", "outage,auth-mix", "-tasks", "800", "-policies", "random,switchyard", "-plot", plot)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"scenario outage", "scenario auth-mix", "switchyard", "random"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"p-outage.svg", "p-auth-mix.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(data, new(struct{})); err != nil {
			t.Errorf("%s is not XML: %v", name, err)
		}
	}
}

func TestBenchRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("name = \"x\"\ntasks = 10\n[[targets]]\nname = \"a\"\n[[routes]]\nname = \"r\"\n[[routes.behaviours]]\nkind = \"deda\"\n"), 0o644)
	tests := []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"unknown scenario", []string{"-scenario", "nope"}, 2, "nope"},
		{"bad scenario file", []string{"-scenario", bad}, 2, "bad.toml:8"},
		{"unknown policy", []string{"-scenario", "mixed", "-tasks", "10", "-policies", "magic"}, 1, `unknown policy "magic"`},
		{"bad sweep", []string{"-sweep", "gamma=x"}, 2, "not a number"},
		{"unknown sweep parameter", []string{"-sweep", "beta=1"}, 2, "unknown parameter"},
		{"negative tasks", []string{"-tasks", "-3"}, 2, "-tasks"},
		{"no seeds", []string{"-seeds", "0"}, 2, "-seeds"},
		{"plot of several seeds", []string{"-seeds", "2", "-plot", filepath.Join(dir, "p.svg")}, 2, "one seed"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runBench(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

func TestBenchSeedsPrintsTheMean(t *testing.T) {
	t.Parallel()
	code, out, stderr := runBench(t, "-scenario", "pool-of-3", "-duration", "10s", "-policies", "switchyard,oracle", "-seeds", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "mean of 3 seeds") || !strings.Contains(out, " min ") {
		t.Errorf("table:\n%s\nwant the mean of 3 seeds with the ratio's range", out)
	}
}

func TestBenchSweepAddsPolicies(t *testing.T) {
	t.Parallel()
	code, out, stderr := runBench(t, "-scenario", "mixed", "-tasks", "500", "-policies", "switchyard", "-sweep", "gamma=1,3", "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{`"policy":"switchyard"`, `"policy":"switchyard[gamma=1]"`, `"policy":"switchyard[gamma=3]"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

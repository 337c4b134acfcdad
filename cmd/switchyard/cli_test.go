package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/logtest"
)

// Asking a command for its help is no error: exit 0, usage printed. A bad
// flag still is.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	commands := []struct {
		name string
		run  func(args []string, out *logtest.Buffer) int
	}{
		{"serve", func(args []string, out *logtest.Buffer) int { return serve(context.Background(), args, out, nil) }},
		{"check-config", func(args []string, out *logtest.Buffer) int { return checkConfig(args, out, out) }},
		{"demo", func(args []string, out *logtest.Buffer) int { return demoCmd(context.Background(), args, out, out) }},
		{"bench", func(args []string, out *logtest.Buffer) int { return bench(args, out, out) }},
		{"fetch", func(args []string, out *logtest.Buffer) int { return fetchCmd(context.Background(), args, out, out) }},
		{"download", func(args []string, out *logtest.Buffer) int {
			return downloadCmd(context.Background(), args, out, false)
		}},
	}
	for _, c := range commands {
		for _, tc := range []struct {
			desc string
			arg  string
			code int
		}{
			{desc: "--help", arg: "--help", code: 0},
			{desc: "-h", arg: "-h", code: 0},
			{desc: "a bad flag", arg: "--no-such-flag", code: 2},
		} {
			t.Run(c.name+" "+tc.desc, func(t *testing.T) {
				t.Parallel()
				var out logtest.Buffer
				if code := c.run([]string{tc.arg}, &out); code != tc.code {
					t.Errorf("switchyard %s %s exited %d, want %d; printed:\n%s", c.name, tc.arg, code, tc.code, out.String())
				}
				if !strings.Contains(out.String(), "usage: switchyard "+c.name) && !strings.Contains(out.String(), "Usage of "+c.name) {
					t.Errorf("switchyard %s %s printed no usage:\n%s", c.name, tc.arg, out.String())
				}
			})
		}
	}
}

func TestVersionLine(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		desc string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{desc: "a release", ok: true, want: "switchyard v1.2.3 revision " + rev + " go1.26.0",
			info: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/switchyard/switchyard", Version: "v1.2.3"},
				Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}},
		{desc: "a work tree with changes", ok: true, want: "switchyard (devel) revision " + rev + " (modified) go1.26.0",
			info: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/switchyard/switchyard", Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}},
		{desc: "no VCS information", ok: true, want: "switchyard (devel) go1.26.0",
			info: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/switchyard/switchyard"}}},
		{desc: "no build information", ok: false, want: "switchyard: no build information in this binary"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := versionLine(tc.info, tc.ok); got != tc.want {
				t.Errorf("versionLine = %q, want %q", got, tc.want)
			}
		})
	}
}

// A binary built from this repository says which revision it is, to
// `version` and to `--version` alike.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the build records no revision")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a linked git worktree (.git is a file): go build records no revision there")
	}
	bin := filepath.Join(t.TempDir(), "switchyard")
	// -buildvcs=true wins over a GOFLAGS=-buildvcs=false in the environment.
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "revision " + strings.TrimSpace(string(head))
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("switchyard %s: %v\n%s", arg, err, out)
		}
		line := strings.TrimSpace(string(out))
		if !strings.HasPrefix(line, "switchyard ") || !strings.Contains(line, want) {
			t.Errorf("switchyard %s printed %q, want the module version and %q", arg, line, want)
		}
	}
}

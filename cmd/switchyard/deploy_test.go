package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const unitPath = "../../deploy/switchyard.service"

// The systemd unit runs serve sandboxed, reloads with SIGHUP, and is one
// systemd itself accepts: systemd-analyze verify, when the machine has it,
// with no complaint, and an exposure score that stays low.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=/usr/local/bin/switchyard serve --config /etc/switchyard/switchyard.toml",
		"ExecReload=/bin/kill -HUP $MAINPID",
		"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
		"PrivateDevices=yes", "CapabilityBoundingSet=\n", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
		"SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("%s lacks %q", unitPath, want)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze on this machine: the unit is not verified")
	}
	// verify wants ExecStart's binary to exist: any executable will do.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "switchyard.service")
	body := strings.Replace(string(unit), "ExecStart=/usr/local/bin/switchyard ", "ExecStart="+self+" ", 1)
	if err := os.WriteFile(copyPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// verify exits 0 on options it ignores: any word about the unit is one.
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "switchyard.service") {
			t.Errorf("systemd-analyze verify: %s", strings.TrimSpace(line))
		}
	}

	out, err = exec.Command(analyze, "security", "--offline=yes", copyPath).CombinedOutput()
	if err != nil {
		t.Logf("systemd-analyze security --offline not available (%v): exposure not checked", err)
		return
	}
	m := regexp.MustCompile(`Overall exposure level for switchyard\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security's output:\n%s", out)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2 {
		t.Errorf("exposure level %.1f, want at most 2 (OK):\n%s", level, out)
	}
}

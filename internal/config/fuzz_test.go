package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary files to the loader: it must never panic, every
// refusal is one line, and whatever it accepts can be printed.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("../../switchyard.example.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add(routesOK)
	f.Add(routesOK + "[engine]\nalpha = 1.5\n")
	f.Add(routesOK + "[engine.cooldowns]\nblocked = \"1m\"\n")
	f.Add(routesOK + "[[targets]]\nhosts = [\"*\"]\nrate = -1.0\n")
	f.Add(routesOK + "[[users]]\nname = \"a\"\npassword = \"env:X\"\n")
	f.Add("[routes]\ninline = [\"direct\", \"socks5://u:p@[::1]:1080 region=us\"]\n")
	f.Add("a.b.c = 1\n[x]\ny = { z = 2 }\n")
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "proxies.txt"), []byte("direct\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "switchyard.toml") // never written: load gets the bytes
	f.Fuzz(func(t *testing.T, body string) {
		c, err := load(Source{Path: path, Env: []string{}}, []byte(body))
		if err != nil {
			if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
				t.Fatalf("bad message %q", msg)
			}
			return
		}
		if err := c.WriteEffective(io.Discard); err != nil {
			t.Fatalf("accepted but cannot print: %v", err)
		}
	})
}

package pacefile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

var saved = engine.SavedPace{
	Pairs: []engine.SavedPair{{
		Route: "http://192.0.2.1:3128", Target: "shop.example", Rate: 3.6, Ceiling: 4,
		Cut: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), Active: time.Date(2026, 12, 6, 10, 5, 0, 0, time.UTC),
	}},
	Targets: []engine.SavedTarget{{Target: "shop.example", Frozen: 4}},
}

// TestSaveLoad: what Save writes, Load reads back whole, and the file is
// its owner's alone with no temporary file left beside it.
func TestSaveLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "pace.json")
	if _, ok, err := Load(path); ok || err != nil {
		t.Fatalf("no file yet: %v, %v; want nothing and no error", ok, err)
	}
	for range 2 { // the second replaces the first
		if err := Save(path, saved, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := Load(path)
	if err != nil || !ok || !reflect.DeepEqual(got, saved) {
		t.Fatalf("loaded %+v, %v, %v; want %+v", got, ok, err, saved)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want the one saved", len(entries))
	}
}

// TestLoadErrors: a file that cannot be read as saved pacing says which
// and, for bad JSON, where.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ desc, data, want string }{
		{"not JSON", "{\n \"version\": 1,\n oops\n}", "pace.json:3: invalid character"},
		{"a rate that is a string", "{\"version\": 1,\n\"pairs\": [{\"rate\": \"fast\"}]}", "pace.json:2: json: cannot unmarshal string"},
		{"another version", `{"version": 2}`, "pace.json: format version 2, want 1"},
		{"no version", `{}`, "pace.json: format version 0, want 1"},
		{"empty", ``, "pace.json:1: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "pace.json")
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, ok, err := Load(path)
			if ok || err == nil || !strings.HasPrefix(err.Error(), filepath.Dir(path)) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load: %v, %v; want an error containing %q", ok, err, tt.want)
			}
		})
	}
}

// TestSaveFailsWhole: a save into a directory that is not there fails and
// leaves the last save as it was.
func TestSaveFailsWhole(t *testing.T) {
	t.Parallel()
	if err := Save(filepath.Join(t.TempDir(), "missing", "pace.json"), saved, time.Now()); err == nil {
		t.Error("saved into a missing directory")
	}
}

// FuzzParse: no input crashes Parse, and what it accepts saves and parses
// back the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":1,"pairs":[{"route":"r","target":"t","rate":1,"cut":"2026-01-01T00:00:00Z","active":"2026-01-01T00:00:00Z"}],"targets":[{"target":"t","frozen":2}]}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"pairs":[{"rate":1e999}]}`))
	f.Add([]byte("{\"version\":1,\n\"pairs\":[null]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "pace.json")
		if err := Save(path, p, time.Now()); err != nil {
			return // NaN and Inf do not marshal: the engine never saves them
		}
		if _, ok, err := Load(path); !ok || err != nil {
			t.Fatalf("saved %+v, loaded back: %v, %v", p, ok, err)
		}
	})
}

// Package pacefile keeps the pacing the sites taught the engine
// (engine.SavedPace) in a file across restarts: [pacing] learned_file.
package pacefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// version is the file format's: a file of another is refused, not misread.
const version = 1

// file is the JSON the file holds.
type file struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	engine.SavedPace
}

// Load reads the pacing saved in path. A file that does not exist is
// (zero, false, nil): nothing was saved yet. Any other failure names the
// file and, for bad JSON, the line: "path:LINE: reason".
func Load(path string) (engine.SavedPace, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return engine.SavedPace{}, false, nil
	}
	if err != nil {
		return engine.SavedPace{}, false, err
	}
	p, err := Parse(data)
	if se, ok := errors.AsType[*SyntaxError](err); ok {
		return engine.SavedPace{}, false, fmt.Errorf("%s:%d: %s", path, se.Line, se.Msg)
	}
	if err != nil {
		return engine.SavedPace{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return p, true, nil
}

// SyntaxError is JSON that does not decode, at Line (1-based).
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Parse decodes a file's contents.
func Parse(data []byte) (engine.SavedPace, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		off := int64(-1)
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			off = se.Offset
		} else if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			off = te.Offset
		}
		if off < 0 {
			return engine.SavedPace{}, err
		}
		return engine.SavedPace{}, &SyntaxError{Line: lineAt(data, off), Msg: err.Error()}
	}
	if f.Version != version {
		return engine.SavedPace{}, fmt.Errorf("format version %d, want %d", f.Version, version)
	}
	return f.SavedPace, nil
}

// lineAt is the 1-based line of byte offset off in data.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// Save writes p, saved at now, to path, whole or not at all: a temporary
// file beside it, synced, then renamed over it, so a crash leaves the
// last save. The file is readable by its owner only: route ids name the
// exits' hosts.
func Save(path string, p engine.SavedPace, now time.Time) error {
	data, err := json.Marshal(file{Version: version, Saved: now.UTC(), SavedPace: p})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing there
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

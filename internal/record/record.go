// Package record writes what an engine decides, as it decides it, to a
// file that `switchyard replay` reads back: every outcome applied and every
// state change, as JSON Lines (engine.WriteEvents' format), so that new
// rules or thresholds can be tried on the evidence a gateway really met
// (README: record and replay).
package record

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/switchyard/switchyard/engine"
)

// Defaults of Run.
const (
	// MaxBytes is the size at which the file is rotated: it becomes
	// FILE.1 (replacing the one before) and a new FILE starts, so a
	// recording holds between one and two of these of the latest events.
	MaxBytes = 64 << 20
	// buffered events may wait for the writer; beyond, the engine drops
	// the oldest (Subscription) and Run logs how many.
	buffered = 1 << 14
)

// kinds are the events a recording holds: what Replay feeds back and what
// it compares.
var kinds = []engine.EventKind{engine.EventOutcome, engine.EventState}

// Recorder writes an engine's events to a file until its context ends.
type Recorder struct {
	// Immutable after Open.
	path     string
	maxBytes int64
	sub      *engine.Subscription
	log      *slog.Logger

	// Owned by Run's goroutine.
	file    *os.File
	buf     *bufio.Writer
	line    bytes.Buffer  // one event, encoded
	enc     *json.Encoder // onto line
	written int64         // bytes in file, buffered ones included
	dropped uint64        // events the subscription dropped, as last logged
}

// Open starts recording e's events into path (appended to, created 0600
// if missing), rotating at maxBytes (≤ 0: MaxBytes). Run writes them.
func Open(e *engine.Engine, path string, maxBytes int64, log *slog.Logger) (*Recorder, error) {
	if maxBytes <= 0 {
		maxBytes = MaxBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{path: path, maxBytes: maxBytes, log: log}
	if err := r.open(); err != nil {
		return nil, err
	}
	r.sub = e.Subscribe(buffered, kinds...)
	return r, nil
}

// open opens the file to append to.
func (r *Recorder) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("record: %w", err)
	}
	r.file, r.written = f, st.Size()
	r.buf = bufio.NewWriter(f)
	r.enc = json.NewEncoder(&r.line)
	return nil
}

// Run writes events until ctx ends, then writes what is buffered, flushes
// and closes the file. Each batch (an event, and those that came while it
// was written) is flushed, so the file is never more than a batch behind.
// A write that fails is logged and ends the recording, never the gateway.
func (r *Recorder) Run(ctx context.Context) {
	defer r.sub.Close()
	var batch []engine.Event
	for {
		ev, err := r.sub.Next(ctx)
		if err != nil {
			batch = r.sub.Poll(batch[:0]) // what came before the end
		} else {
			batch = r.sub.Poll(append(batch[:0], ev))
		}
		werr := r.writeAll(batch)
		if werr == nil {
			werr = r.buf.Flush()
		}
		if d := r.sub.Dropped(); d > r.dropped {
			r.log.Warn("recording fell behind: events lost", "file", r.path, "lost", d-r.dropped)
			r.dropped = d
		}
		if werr != nil {
			r.log.Error("recording stopped", "file", r.path, "err", werr)
		}
		if err != nil || werr != nil {
			if cerr := r.close(); cerr != nil && werr == nil {
				r.log.Error("recording not closed cleanly", "file", r.path, "err", cerr)
			}
			return
		}
	}
}

// writeAll appends events, rotating first whenever the file is full.
func (r *Recorder) writeAll(events []engine.Event) error {
	for i := range events {
		if r.written >= r.maxBytes {
			if err := r.rotate(); err != nil {
				return err
			}
		}
		r.line.Reset()
		if err := r.enc.Encode(&events[i]); err != nil {
			return err
		}
		n, err := r.buf.Write(r.line.Bytes())
		r.written += int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// rotate moves the file to path.1 and starts a new one.
func (r *Recorder) rotate() error {
	if err := r.close(); err != nil {
		return err
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return err
	}
	return r.open()
}

// close flushes and closes the file.
func (r *Recorder) close() error {
	if r.file == nil {
		return nil
	}
	err := r.buf.Flush()
	if cerr := r.file.Close(); err == nil {
		err = cerr
	}
	r.file = nil
	return err
}

// Load reads a recording: path.1, when rotation left one, then path.
func Load(path string) ([]engine.Event, error) {
	var all []engine.Event
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if os.IsNotExist(err) && p != path {
			continue
		}
		if err != nil {
			return nil, err
		}
		events, err := engine.ReadEvents(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, events...)
	}
	return all, nil
}

// Package logbuf holds a log's lines on their way to a writer that costs a
// system call per write (stderr, a file, a pipe) and writes them out
// together: once a short interval after the first line held, or at once
// when the lines held fill a buffer. The gateway logs a line per request;
// written one by one they were a write(2) each, about 4% of the gateway's
// CPU at 16 clients. Envoy buffers its access logs the same way (flushed
// every second by default).
package logbuf

import (
	"io"
	"sync"
	"time"
)

// maxHeld is how many bytes of lines are held before they are written out
// without waiting for the interval: a few hundred request lines.
const maxHeld = 64 << 10

// Writer holds what is written to it and writes it out to its destination
// within its interval. Each Write should be one whole line or record, as
// log/slog's handlers write them, so that what is written out never splits
// one. It is safe for concurrent use.
type Writer struct {
	out   io.Writer
	every time.Duration

	mu     sync.Mutex
	held   []byte      // guarded by mu
	timer  *time.Timer // guarded by mu: armed while held is not empty
	closed bool        // guarded by mu: writes go straight out
}

// New returns a Writer to out that holds lines at most every. An every of
// zero or less holds nothing: each Write goes straight out.
func New(out io.Writer, every time.Duration) *Writer {
	return &Writer{out: out, every: every, closed: every <= 0}
}

// Write holds p, written out with the lines held when the interval ends
// or the buffer fills. Its error is the failure of the write out that p
// triggered, if it did, whichever lines failed.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.out.Write(p)
	}
	w.held = append(w.held, p...)
	if len(w.held) >= maxHeld {
		return len(p), w.flushLocked()
	}
	if len(w.held) == len(p) { // the first line held: the interval starts
		if w.timer == nil {
			w.timer = time.AfterFunc(w.every, func() { w.Flush() })
		} else {
			w.timer.Reset(w.every)
		}
	}
	return len(p), nil
}

// Flush writes out the lines held.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if len(w.held) == 0 {
		return nil
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	_, err := w.out.Write(w.held)
	// A buffer that once took a burst is not kept at its size.
	if cap(w.held) > 2*maxHeld {
		w.held = nil
	} else {
		w.held = w.held[:0]
	}
	return err
}

// Close writes out the lines held; later writes go straight out, so that
// a line logged while the process stops is not lost. It does not close
// the destination.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.flushLocked()
}

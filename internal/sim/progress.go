package sim

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// progressDelay keeps short runs silent: a bar that flashes and
	// vanishes is noise.
	progressDelay = 2 * time.Second
	// progressEvery caps redraws at ten a second, plenty for a human and
	// cheap for a run that finishes thousands of tasks a second.
	progressEvery = 100 * time.Millisecond
	progressBar   = 30 // bar width in cells
)

// Progress reports a long run's progress on a terminal: one line rewritten
// in place with a bar, percent, done/total and ETA. It stays silent when
// the output is not a terminal (logs and pipes want no "\r" lines) and for
// the first two seconds. Add and Finish are safe for concurrent use, and a
// nil *Progress does nothing, so callers need no checks of their own.
type Progress struct {
	// immutable
	w       io.Writer
	label   string
	total   int
	now     func() time.Time
	start   time.Time
	enabled bool

	done atomic.Int64 // tasks finished
	next atomic.Int64 // elapsed time (ns) after which the next draw is due

	mu       sync.Mutex
	width    int  // guarded by mu: runes of the line on screen, to clear it
	finished bool // guarded by mu
}

// NewProgress returns a Progress for total tasks written to w, enabled only
// when w is a terminal. now is the clock; nil means time.Now.
func NewProgress(w io.Writer, label string, total int, now func() time.Time) *Progress {
	return newProgress(w, label, total, now, isTerminal(w))
}

// newProgress lets tests force the terminal check.
func newProgress(w io.Writer, label string, total int, now func() time.Time, terminal bool) *Progress {
	if now == nil {
		now = time.Now
	}
	p := &Progress{w: w, label: label, total: total, now: now, start: now(), enabled: terminal && total > 0}
	p.next.Store(int64(progressDelay))
	return p
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Add records n more finished tasks and redraws the line if one is due.
// When disabled or throttled it costs an atomic add and a clock read.
func (p *Progress) Add(n int) {
	if p == nil || !p.enabled {
		return
	}
	done := p.done.Add(int64(n))
	elapsed := p.now().Sub(p.start)
	if int64(elapsed) <= p.next.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Another goroutine may have drawn, or finished, since the check above.
	if p.finished || int64(elapsed) <= p.next.Load() {
		return
	}
	p.next.Store(int64(elapsed + progressEvery))
	p.draw(p.line(int(done), elapsed))
}

// Finish clears the line, if one was drawn, and stops further drawing.
func (p *Progress) Finish() {
	if p == nil || !p.enabled {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
	}
}

// draw writes line over the previous one, padding with spaces where the
// new line is shorter. A failed write is ignored: progress is a courtesy
// and must not stop the run. Caller must hold mu.
func (p *Progress) draw(line string) {
	n := len([]rune(line))
	fmt.Fprint(p.w, "\r"+line+strings.Repeat(" ", max(0, p.width-n)))
	p.width = max(p.width, n)
}

// line renders the progress after done tasks in elapsed time.
func (p *Progress) line(done int, elapsed time.Duration) string {
	frac := clampTo(float64(done)/float64(p.total), 0, 1)
	fill := int(frac * progressBar)
	eta := "-"
	if done > 0 {
		rest := time.Duration(float64(elapsed) * float64(max(0, p.total-done)) / float64(done))
		eta = formatETA(rest)
	}
	// Percent rounds down so that 100% means done.
	return fmt.Sprintf("%s [%s%s] %3d%% %d/%d ETA %s",
		p.label, strings.Repeat("=", fill), strings.Repeat(" ", progressBar-fill), int(100*frac), done, p.total, eta)
}

// formatETA rounds d to what a reader needs: seconds under an hour,
// minutes above.
func formatETA(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
}

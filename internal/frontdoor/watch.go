package frontdoor

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// watchDelay is how long a request runs before the watch for its client
// leaving starts: most of a forward proxy's requests are answered sooner,
// and never pay for it, while a client that gives up on a slow exit is
// still noticed within this long of leaving.
const watchDelay = 20 * time.Millisecond

// rewake is how long stop waits for the watch to wake before it sets the
// deadline that wakes it again.
const rewake = 10 * time.Millisecond

// The watch's states for the request being served.
const (
	watchOff     = iota // no request, or its watch was stopped
	watchReady          // a request began; its body is not all read yet
	watchArmed          // the timer runs
	watchRunning        // waiting on the socket
	watchEnded          // the wait returned; its end is not yet collected
)

// watcher cancels a request whose client closed its connection while the
// handler ran. It waits until the socket is readable and peeks, reading
// nothing, so that the bytes of a pipelined request stay where the next
// read finds them. A timer that fired for a request already stopped
// may start the watch of the next one early: harmless, it watches the
// request being served.
type watcher struct {
	raw    syscall.RawConn // nil: the connection cannot be watched
	setDL  func(time.Time) error
	timer  *time.Timer
	done   chan struct{}
	mu     sync.Mutex
	state  int
	cancel context.CancelFunc
}

func (w *watcher) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok || !canWatch {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	w.raw, w.setDL = raw, nc.SetReadDeadline
	w.done = make(chan struct{}, 1)
}

// begin readies the watch for a request canceled by cancel.
func (w *watcher) begin(cancel context.CancelFunc) {
	w.mu.Lock()
	w.state, w.cancel = watchReady, cancel
	w.mu.Unlock()
}

// arm starts the delay: the request's body is all read, so the next
// readable byte, or the end, is the client's doing.
func (w *watcher) arm() {
	if w.raw == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watchReady {
		return
	}
	w.state = watchArmed
	if w.timer == nil {
		w.timer = time.AfterFunc(watchDelay, w.run)
	} else {
		w.timer.Reset(watchDelay)
	}
}

// run is the timer's: it waits until the client sends more or leaves.
func (w *watcher) run() {
	w.mu.Lock()
	if w.state != watchArmed {
		w.mu.Unlock()
		return
	}
	w.state = watchRunning
	cancel := w.cancel
	w.mu.Unlock()
	if gone(w.raw) {
		cancel()
	}
	w.mu.Lock()
	if w.state == watchRunning { // else stop is waiting for done
		w.state = watchEnded
	}
	w.mu.Unlock()
	w.done <- struct{}{}
}

// stop ends the watch of the request being served and returns once it has
// let go of the connection; it leaves no read deadline set.
func (w *watcher) stop() {
	w.mu.Lock()
	state := w.state
	w.state, w.cancel = watchOff, nil
	w.mu.Unlock()
	switch state {
	case watchArmed:
		w.timer.Stop() // a run already started finds the watch off
	case watchRunning:
		// A deadline in the past wakes the wait. It is set again should
		// the wait outlast it: whoever read the body's end may yet clear
		// its own deadline after the watch started.
		for woken := false; !woken; {
			w.setDL(time.Unix(1, 0))
			select {
			case <-w.done:
				woken = true
			case <-time.After(rewake):
			}
		}
		w.setDL(time.Time{})
	case watchEnded:
		<-w.done
	}
}

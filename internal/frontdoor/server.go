// Package frontdoor serves HTTP/1.x on the forward proxy's listener: the
// part of net/http's Server a forward proxy uses, at less cost per request.
//
// net/http's server starts a goroutine and a read on every request to
// notice a client that leaves, and stops it again with a read deadline in
// the past, which wakes two goroutines; it splits a head and a small page
// into two writes. Here the handler runs on the connection's goroutine, a
// request faster than watchDelay is never watched, and one watched later
// waits on the socket's readability without reading it. What a forward
// proxy needs of the rest is kept: keep-alive, pipelining, 100-continue,
// chunked and close-delimited answers, hijacking, header, idle and
// shutdown bounds, and the ConnState and ConnContext hooks
// (docs/design/008-gateway.md, The front door).
package frontdoor

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.x requests to Handler. Its zero bounds mean none.
type Server struct {
	Handler           http.Handler
	ReadHeaderTimeout time.Duration // from a request's first byte to its last header line
	IdleTimeout       time.Duration // between requests on a kept-alive connection
	MaxHeaderBytes    int           // 0: http.DefaultMaxHeaderBytes

	// ConnState, when set, is told each connection's states as net/http's
	// Server tells them: StateNew, StateActive once a request's first
	// bytes are in, StateIdle between requests, StateHijacked, StateClosed.
	ConnState func(net.Conn, http.ConnState)
	// ConnContext, when set, makes the context every request on a
	// connection derives from.
	ConnContext func(context.Context, net.Conn) context.Context
	// Log gets a handler's panics; nil discards them.
	Log *slog.Logger

	// handoff passes a new connection to a worker waiting for one.
	handoff chan *conn
	// done is closed when the server closes: waiting workers end.
	done chan struct{}

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// closing is set under mu, and read without it on every request.
	closing atomic.Bool
}

// workerIdle is how long a worker whose connection ended waits for the
// next one before it ends.
const workerIdle = 5 * time.Second

// dispatch serves c on a worker that is waiting for a connection, or on a
// new one. A connection runs the handler on its worker's goroutine, whose
// stack grows to what the gateway's calls need, each doubling a copy of
// the stack: a new goroutine per connection paid that again on every
// CONNECT, whose connection ends with its tunnel (docs/gateway-cost.md,
// Beside HAProxy).
func (s *Server) dispatch(c *conn) {
	select {
	case s.handoff <- c:
	default:
		go s.work(c)
	}
}

// work serves c, then each connection handed off to it, until none comes
// within workerIdle or the server closes.
func (s *Server) work(c *conn) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		c.serve()
		idle.Reset(workerIdle)
		select {
		case c = <-s.handoff:
		case <-idle.C:
			return
		case <-s.done:
			return
		}
	}
}

// shutdownPoll is the longest wait between two looks for idle connections
// to close during Shutdown.
const shutdownPoll = 500 * time.Millisecond

// Serve accepts connections on ln and serves each on a worker (dispatch)
// until ln fails or the server is shut down, when it returns
// http.ErrServerClosed. An accept that fails otherwise (for want of
// descriptors or buffers) is retried after a pause that doubles up to a
// second, as net/http's is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.init()
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shuttingDown() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.logger().Warn("frontdoor: accept failed; retrying", "err", err.Error(), "after", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		c := s.newConn(nc)
		if c == nil {
			nc.Close()
			return http.ErrServerClosed
		}
		s.dispatch(c)
	}
}

// Shutdown stops accepting, closes idle connections, and waits for the
// others to finish their requests and close, or for ctx to end, whose
// error it then returns. Hijacked connections are the handler's.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	wait := time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			wait = min(2*wait, shutdownPoll)
			timer.Reset(wait)
		}
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.rwc.Close()
	}
	return nil
}

// init makes the server's channels and sets on first use. Callers hold mu.
func (s *Server) init() {
	if s.done == nil {
		s.handoff, s.done = make(chan *conn), make(chan struct{})
		s.listeners, s.conns = make(map[net.Listener]struct{}), make(map[*conn]struct{})
	}
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing.Load() {
		s.init()
		close(s.done)
	}
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
}

// closeIdle closes the connections waiting for a request, and those that
// never sent one within newConnGrace, and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(connIdle, connClosing) ||
			time.Since(c.accepted) > newConnGrace && c.state.CompareAndSwap(connNew, connClosing) {
			c.rwc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) shuttingDown() bool { return s.closing.Load() }

// newConn makes the connection of nc and adds it to those Shutdown waits
// for; nil when the server is closing.
func (s *Server) newConn(nc net.Conn) *conn {
	c := newConn(s, nc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	s.init()
	s.conns[c] = struct{}{}
	return c
}

// forget removes c from the connections Shutdown waits for.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) setState(c *conn, state http.ConnState) {
	if s.ConnState != nil {
		s.ConnState(c.rwc, state)
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

func (s *Server) maxHeaderBytes() int64 {
	if s.MaxHeaderBytes > 0 {
		return int64(s.MaxHeaderBytes)
	}
	return http.DefaultMaxHeaderBytes
}

package route

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
)

// Progress is how far one attempt through an Exit got, recorded by the
// Exit as the attempt goes (RoundTrip's connection and first answer byte,
// DialTarget's finished stream), so that Classify can lay a failure at the
// layer it reached. The zero value is an attempt not yet started; one
// Progress serves one attempt.
type Progress struct {
	direct    bool        // the route is Direct; set before the attempt starts
	connected atomic.Bool // the connection was obtained: to the proxy (HTTP, HTTPS) or the stream to the target (SOCKS5, Direct)
	answered  atomic.Bool // the first byte of the answer arrived
	// trace records RoundTrip's progress; bound to this Progress by traced.
	trace httptrace.ClientTrace
}

// traced is ctx carrying the trace through which RoundTrip records its
// progress into p (Exit.Context).
func (p *Progress) traced(ctx context.Context) context.Context {
	p.trace.GotConn = func(httptrace.GotConnInfo) { p.connected.Store(true) }
	p.trace.GotFirstResponseByte = func() { p.answered.Store(true) }
	return httptrace.WithClientTrace(ctx, &p.trace)
}

// TargetAnswered records that the target itself answered through the
// exit, as a TLS handshake with it shows (the fetch API speaks TLS with
// sites through tunnels): silence from then on is the target's.
func (p *Progress) TargetAnswered() { p.answered.Store(true) }

// Timeout is what an attempt's silence reads as at the layer it reached:
// the class Classify gives a timeout now (see there).
func (p *Progress) Timeout() engine.Class {
	if p.direct || p.answered.Load() {
		return engine.TargetTimeout
	}
	return engine.ProxyTimeout
}

// Classify maps how an attempt through an Exit ended to its outcome class
// (docs/design/006-model.md), and says whether bytes of the request may
// have reached the target, so that only idempotent requests are retried
// then. err is the attempt's error, from the Exit or from reading the
// answer's body; p is what the Exit recorded of the attempt. By layer:
//
//	nil                 ok
//	*Error              Error.Class; reached nothing (Error.NeverLeft); Canceled
//	                    when the gateway ran out of its own resources (Error.Local)
//	context.Canceled    canceled: the caller gave up
//	a timeout           of the layer reached: the exit (proxy_timeout) until the
//	                    answer began, the target (target_timeout) once it did, or
//	                    from the start on a Direct route, which has no exit of its own
//	anything else       proxy_connect_failed before the connection was obtained,
//	                    target_reset after: closed or reset
//
// A timeout is the deadline of the attempt's context (context.DeadlineExceeded
// as its cause) or a net timeout. Bytes may have reached the target once the
// connection was obtained, even when the proxy is the one that went quiet.
func Classify(err error, p *Progress) (class engine.Class, reached bool) {
	reached = p.connected.Load()
	var e *Error
	switch {
	case err == nil:
		return engine.OK, reached
	case errors.As(err, &e):
		return e.Class(), !e.NeverLeft()
	case errors.Is(err, context.Canceled):
		return engine.Canceled, reached
	case isTimeout(err):
		return p.Timeout(), reached
	case !reached:
		return engine.ProxyConnectFailed, false
	}
	return engine.TargetReset, true
}

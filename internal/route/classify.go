package route

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
)

// Progress is how far one attempt through an Exit got, recorded by the
// Exit as the attempt goes (RoundTrip's connection, TLS with the target
// and first answer byte, DialTarget's finished stream), so that Classify
// can lay a failure at the layer it reached. The zero value is an attempt
// not yet started; one Progress serves one attempt. The attempt records
// it while others read it.
type Progress struct {
	direct    bool        // the route is Direct; set before the attempt starts
	connected atomic.Bool // the connection was obtained: to the proxy (HTTP, HTTPS) or the stream to the target (SOCKS5, Direct, a tunnel)
	answered  atomic.Bool // the target spoke: the answer's first byte arrived, or TLS with it was made, or a kept stream to it was taken
}

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
//	*RequestError       client_error: the request could not be written as it was;
//	                    nothing reached the target
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
	case errors.As(err, new(*RequestError)):
		return engine.ClientError, false
	case errors.Is(err, context.Canceled):
		return engine.Canceled, reached
	case isTimeout(err):
		return p.Timeout(), reached
	case !reached:
		return engine.ProxyConnectFailed, false
	}
	return engine.TargetReset, true
}

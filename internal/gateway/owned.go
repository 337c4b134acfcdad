package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/internal/route"
)

// Requests on a connection of their own (docs/design/012-mitm.md): the
// https:// ones of the fetch API and of intercepted TLS, and protocol
// upgrades, whose connection becomes the client's. The gateway is the
// client here: a tunnel to the target through the route, judged as a
// CONNECT is (DialTarget), then TLS with the target for https://, then
// the request. Each layer fails with its own class: a route that cannot
// build the tunnel is the route's failure, a site whose certificate does
// not verify is tls_failed for that route×target, never the proxy's.

// tlsError is a TLS handshake with the target that failed: tls_failed,
// and nothing of the request went out.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "TLS with the target: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// roundTripOwned sends req through x on a connection of its own to the
// target: one kept from an earlier request through the same route
// (route.TargetConns), for a request that may be sent twice, or a new
// one, a tunnel with TLS on top for https:// verified against
// Config.TargetTLS's roots (the system's when nil). ctx ending cuts the
// connection's I/O. The answer's body read to its end gives the connection
// back to be kept, unless either side said it closes; closed before, it
// closes it. A 101's body is the connection itself (*upgraded).
func (g *Gateway) roundTripOwned(ctx context.Context, req *http.Request, x *route.Exit, p *route.Progress) (*http.Response, error) {
	host, port := req.URL.Hostname(), req.URL.Port()
	secure := req.URL.Scheme == "https"
	switch {
	case port != "":
	case secure:
		port = "443"
	default:
		port = "80"
	}
	addr := net.JoinHostPort(host, port)
	upgrade := req.Header.Get("Upgrade") != ""
	req.Close = false
	// A kept connection the site has closed meanwhile fails at once, and
	// its request, one that may be sent twice, goes on a fresh one.
	if !upgrade && idempotent(req.Method) && (req.Body == nil || req.GetBody != nil) {
		for c := g.targets.Get(x.Route().ID, addr); c != nil; c = g.targets.Get(x.Route().ID, addr) {
			p.Reused()
			resp, err := g.exchange(ctx, req, c, false)
			if err == nil || ctx.Err() != nil {
				return resp, err
			}
			p.Fresh()
			if req.GetBody != nil {
				if req.Body, err = req.GetBody(); err != nil {
					return nil, err
				}
			}
		}
	}
	tunnel, err := x.DialTarget(ctx, addr, p)
	if err != nil {
		return nil, err
	}
	conn := tunnel // or the TLS over it
	if secure {
		cfg := &tls.Config{}
		if g.cfg.TargetTLS != nil {
			cfg = g.cfg.TargetTLS.Clone()
		}
		cfg.ServerName, cfg.NextProtos = host, []string{"http/1.1"}
		tc := tls.Client(tunnel, cfg)
		stop := context.AfterFunc(ctx, func() { tunnel.SetDeadline(time.Unix(1, 0)) })
		err := tc.HandshakeContext(ctx)
		stop()
		switch ne, _ := errors.AsType[net.Error](err); {
		case err != nil && ctx.Err() != nil:
			tunnel.Close()
			return nil, context.Cause(ctx)
		case err != nil && ne != nil && ne.Timeout():
			tunnel.Close()
			return nil, err // silence, classified by the layer reached
		case err != nil:
			tunnel.Close()
			return nil, &tlsError{err: err}
		}
		p.TargetAnswered() // the site spoke: its silence from here on is its own
		conn = tc
	}
	return g.exchange(ctx, req, route.NewTargetConn(conn, x.Route().ID, addr), upgrade)
}

// exchange writes req on c and reads the answer, ctx ending cutting c's
// I/O; a failure closes c. The answer's body keeps c, or is c after a 101
// to an upgrade.
func (g *Gateway) exchange(ctx context.Context, req *http.Request, c *route.TargetConn, upgrade bool) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if err := req.Write(c); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(c.R, req)
	if err != nil {
		return fail(err)
	}
	if upgrade && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgraded{conn: c.Conn, r: c.R, stop: stop}
		return resp, nil
	}
	b := &ownedBody{ReadCloser: resp.Body, c: c, stop: stop}
	if !resp.Close && !upgrade {
		b.keep = g.targets.Put
	}
	resp.Body = b
	return resp, nil
}

// ownedBody is an answer's body on a connection the gateway opened to the
// target: read to its end, the connection is kept (keep) or closed;
// closed before, the connection is closed first, so that nothing waits
// for the rest of a body no one will read.
type ownedBody struct {
	io.ReadCloser
	c    *route.TargetConn
	stop func() bool             // detaches c from the attempt's end; false if it came first
	keep func(*route.TargetConn) // nil: c closes at the end
	done bool
}

func (b *ownedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		if b.stop() && b.keep != nil {
			b.keep(b.c)
		} else {
			b.c.Close()
		}
	}
	return n, err
}

func (b *ownedBody) Close() error {
	if !b.done {
		b.done = true
		b.stop()
		b.c.Close()
	}
	return b.ReadCloser.Close()
}

// upgraded is a 101's connection, read through the reader that may hold
// the first bytes of the new protocol.
type upgraded struct {
	conn net.Conn
	r    *bufio.Reader
	stop func() bool // detaches the connection from the attempt's end
}

func (u *upgraded) Read(p []byte) (int, error) { return u.r.Read(p) }
func (u *upgraded) Close() error {
	u.stop()
	return u.conn.Close()
}

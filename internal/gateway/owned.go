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

// roundTripOwned sends req through x on a connection of its own: a tunnel
// to the target, TLS verified against Config.TargetTLS's roots (the
// system's when nil) for https://, and the request, with Connection:
// close unless it asks for an upgrade. ctx ending cuts the connection's
// I/O; closing the answer's body closes the connection. A 101's body is
// the connection itself (*upgraded).
func (g *Gateway) roundTripOwned(ctx context.Context, req *http.Request, x *route.Exit, p *route.Progress) (*http.Response, error) {
	host, port := req.URL.Hostname(), req.URL.Port()
	secure := req.URL.Scheme == "https"
	if port == "" {
		port = map[bool]string{false: "80", true: "443"}[secure]
	}
	tunnel, err := x.DialTarget(ctx, net.JoinHostPort(host, port), p)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { tunnel.SetDeadline(time.Unix(1, 0)) })
	conn := tunnel // or the TLS over it
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if secure {
		cfg := &tls.Config{}
		if g.cfg.TargetTLS != nil {
			cfg = g.cfg.TargetTLS.Clone()
		}
		cfg.ServerName, cfg.NextProtos = host, []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				return fail(err) // silence, classified by the layer reached
			}
			return fail(&tlsError{err: err})
		}
		p.TargetAnswered() // the site spoke: its silence from here on is its own
		conn = tc
	}
	req.Close = req.Header.Get("Upgrade") == "" // the connection serves this request alone
	if err := req.Write(conn); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgraded{conn: conn, r: br, stop: stop}
		return resp, nil
	}
	resp.Body = &tunnelBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
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

// tunnelBody is an answer's body over a connection of its own.
type tunnelBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *tunnelBody) Close() error {
	b.stop()
	b.ReadCloser.Close()
	return b.conn.Close()
}

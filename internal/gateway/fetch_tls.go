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

// The fetch API's https:// requests (docs/design/009-fetch-api.md). The
// forward proxy never sees inside TLS (clients CONNECT); a fetch does,
// since the gateway is the client: a tunnel to the target through the
// route, judged as a CONNECT is (DialTarget), then TLS with the target,
// then the request on that connection alone. Each layer fails with its own
// class: a route that cannot build the tunnel is the route's failure, a
// site whose certificate does not verify is tls_failed for that
// route×target, never the proxy's.

// tlsError is a TLS handshake with the target that failed: tls_failed,
// and nothing of the request went out.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "TLS with the target: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// roundTripTLS sends req, an https:// request, through x: a tunnel to the
// target, TLS verified against Config.TargetTLS's roots (the system's
// when nil), and the request with Connection: close. ctx ending cuts the
// connection's I/O; closing the answer's body closes the connection.
func (g *Gateway) roundTripTLS(ctx context.Context, req *http.Request, x *route.Exit, p *route.Progress) (*http.Response, error) {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "443"
	}
	conn, err := x.DialTarget(ctx, net.JoinHostPort(host, port), p)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	cfg := &tls.Config{}
	if g.cfg.TargetTLS != nil {
		cfg = g.cfg.TargetTLS.Clone()
	}
	cfg.ServerName, cfg.NextProtos = host, []string{"http/1.1"}
	tc := tls.Client(conn, cfg)
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return fail(err) // silence, classified by the layer reached
		}
		return fail(&tlsError{err: err})
	}
	p.TargetAnswered() // the site spoke: its silence from here on is its own
	req.Close = true   // the connection serves this request alone
	if err := req.Write(tc); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		return fail(err)
	}
	resp.Body = &tunnelBody{ReadCloser: resp.Body, conn: tc, stop: stop}
	return resp, nil
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

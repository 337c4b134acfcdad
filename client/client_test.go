package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/fetchapi"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// gatewayAPI starts a gateway over n fake proxies (taken round-robin) with
// the user alice:pw, and its fetch API on 127.0.0.1; it returns the API's
// address.
func gatewayAPI(t *testing.T, n int) string {
	t.Helper()
	return gatewayAPIWith(t, n, gateway.Config{})
}

// gatewayAPIWith is gatewayAPI with cfg, its users and admission set.
func gatewayAPIWith(t *testing.T, n int, cfg gateway.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAPI(t, ln, n, cfg)
	return ln.Addr().String()
}

// serveAPI serves on ln the fetch API of a gateway over n fake proxies,
// with cfg as gatewayAPIWith sets it; the server is returned, to cut.
func serveAPI(t *testing.T, ln net.Listener, n int, cfg gateway.Config) *http.Server {
	t.Helper()
	return serveNode(t, ln, n, cfg, "n1")
}

// serveNode is serveAPI for the node named id.
func serveNode(t *testing.T, ln net.Listener, n int, cfg gateway.Config, id string) *http.Server {
	t.Helper()
	h, _ := fetchAPI(t, n, cfg, id)
	return serve(t, ln, h)
}

// serve serves the fetch API h on ln, as `switchyard serve` does (h2c
// and HTTP/1).
func serve(t *testing.T, ln net.Listener, h http.Handler) *http.Server {
	t.Helper()
	srv := &http.Server{Handler: h, Protocols: fetchapi.Protocols()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// fetchAPI is the fetch API of the node named id, a gateway over n fake
// proxies as serveAPI sets it up, and the gateway's engine.
func fetchAPI(t *testing.T, n int, cfg gateway.Config, id string) (http.Handler, *engine.Engine) {
	t.Helper()
	e, err := engine.New(engine.Config{Picker: &engine.RoundRobin{}, Seed: 1, MaxRemovedShare: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var routes []*route.Route
	for range n {
		list, err := route.ParseList("test", []byte(routetest.NewProxy(t, routetest.Behavior{}).URL.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AddRoute(time.Now(), list[0].Spec()); err != nil {
			t.Fatal(err)
		}
		routes = append(routes, &list[0])
	}
	cfg.Users = map[string]gateway.User{"alice": {Password: "pw"}}
	cfg.Admission = admit.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil)
	g, err := gateway.New(cfg, e, routes)
	if err != nil {
		t.Fatal(err)
	}
	api := fetchapi.New(g, e, fetchapi.Options{Node: id})
	t.Cleanup(func() {
		api.Close()
		g.Close()
	})
	return api.Handler(), e
}

func newClient(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// site answers its first hit with a captcha page, later ones with the
// page asked for.
func site(t *testing.T) *httptest.Server {
	n := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one request at a time in these tests
		if n == 1 {
			io.WriteString(w, "captcha")
			return
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestFetch fetches through the SDK: the captcha is refused at the
// gateway, the page comes through the second route, the trace says so,
// and a late verdict on the answer is taken once and an unknown one
// refused.
func TestFetch(t *testing.T) {
	s := site(t)
	c := newClient(t, gatewayAPI(t, 2), WithToken("alice:pw"))
	ctx := testContext(t)
	_, err := c.Fetch(ctx, s.URL+"/a", MustNotMatch("captcha"), Header("Accept", "text/html"), Label("provider", "x"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != "no_matching_route" {
		t.Fatalf("a label no route has: %v, want no_matching_route", err)
	}
	resp, err := c.Fetch(ctx, s.URL+"/a", MustNotMatch("captcha"), ExpectStatus(200))
	if err != nil || resp.Status != 200 || string(resp.Body) != "page /a" {
		t.Fatalf("Fetch: %v, %+v", err, resp)
	}
	if a := resp.Trace.Attempts; len(a) != 2 || a[0].Class != "content_invalid" || a[1].Class != "ok" || a[1].Node != "n1" || a[0].Route == a[1].Route {
		t.Fatalf("trace %+v", resp.Trace)
	}
	if err := c.Feedback(ctx, resp.Trace.Attempts[1].ID, ContentInvalid, "parsed as garbage"); err != nil {
		t.Errorf("Feedback: %v", err)
	}
	if err := c.Feedback(ctx, "no-such.1", ContentInvalid, ""); !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("Feedback on an unknown attempt: %v, want not_found", err)
	}
	node, err := c.Ping(ctx)
	if err != nil || node.ID != "n1" || node.Routes != 2 {
		t.Errorf("Ping: %+v, %v", node, err)
	}
}

// TestLargeAnswer fetches a body over gRPC's default message size: the
// SDK takes what the gateway may answer, and refuses one over
// WithMaxResponse's size.
func TestLargeAnswer(t *testing.T) {
	big := strings.Repeat("x", 6<<20)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) }))
	defer s.Close()
	addr := gatewayAPI(t, 1)
	tests := []struct {
		desc string
		opts []Option
		code string // "" for the whole answer
	}{
		{"the default size", nil, ""},
		{"WithMaxResponse under the answer", []Option{WithMaxResponse(1 << 20)}, "resource_exhausted"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c := newClient(t, addr, append(tc.opts, WithToken("alice:pw"))...)
			resp, err := c.Fetch(testContext(t), s.URL)
			if tc.code != "" {
				if ce, ok := errors.AsType[*Error](err); !ok || ce.Code != tc.code {
					t.Fatalf("a 6 MiB answer: %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || len(resp.Body) != len(big) || resp.Truncated {
				t.Fatalf("a 6 MiB answer: %v", err)
			}
		})
	}
}

// TestValidators has the gateway refuse a first answer each validator
// rejects, saying why, and take the page from the next route.
func TestValidators(t *testing.T) {
	const page = "the page asked for"
	tests := []struct {
		desc  string
		opt   CallOption
		first func(http.ResponseWriter) // the answer refused
	}{
		{"a body under MinBody", MinBody(int64(len(page))), func(w http.ResponseWriter) { io.WriteString(w, "short") }},
		{"no RequireHeader", RequireHeader("X-Page"), func(w http.ResponseWriter) { io.WriteString(w, page) }},
		{"a status ExpectStatus does not take", ExpectStatus(200), func(w http.ResponseWriter) { w.WriteHeader(http.StatusAccepted) }},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var hits atomic.Int32
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if hits.Add(1) == 1 {
					tc.first(w)
					return
				}
				w.Header().Set("X-Page", "1")
				io.WriteString(w, page)
			}))
			defer s.Close()
			c := newClient(t, gatewayAPI(t, 2), WithToken("alice:pw"))
			resp, err := c.Fetch(testContext(t), s.URL, tc.opt)
			if err != nil || string(resp.Body) != page {
				t.Fatalf("Fetch: %v, %+v", err, resp)
			}
			if a := resp.Trace.Attempts; len(a) != 2 || a[0].Class != "content_invalid" || a[0].Detail == "" || a[1].Class != "ok" {
				t.Errorf("trace %+v, want the first answer refused with its reason", resp.Trace)
			}
		})
	}
}

// TestTarget judges the route against the target a call names, not
// against the URL's host.
func TestTarget(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "captcha") }))
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, e := fetchAPI(t, 1, gateway.Config{}, "n1")
	serve(t, ln, h)
	c := newClient(t, ln.Addr().String(), WithToken("alice:pw"))
	if _, err := c.Fetch(testContext(t), s.URL, MustNotMatch("captcha"), Target("shop.example")); err == nil {
		t.Fatal("a captcha passed")
	}
	st := e.Routes()
	if len(st) != 1 || len(st[0].Targets) != 1 || st[0].Targets[0].Target != "shop.example" {
		t.Errorf("route status %+v, want the captcha held against shop.example alone", st)
	}
}

// TestTimeout gives a call whose context has no deadline WithTimeout's,
// and leaves a context's own deadline alone.
func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		case <-release:
		}
		io.WriteString(w, "a late page")
	}))
	defer s.Close()
	defer close(release) // before s.Close, which waits for the handlers
	c := newClient(t, gatewayAPI(t, 2), WithToken("alice:pw"), WithTimeout(200*time.Millisecond))
	_, err := c.Fetch(context.Background(), s.URL)
	if ce, ok := errors.AsType[*Error](err); !ok || ce.Code != "deadline_exceeded" {
		t.Errorf("a page a second away, no deadline but WithTimeout's 200ms: %v, want deadline_exceeded", err)
	}
	resp, err := c.Fetch(testContext(t), s.URL)
	if err != nil || string(resp.Body) != "a late page" {
		t.Errorf("the same page within the context's own 10s: %v, %+v", err, resp)
	}
}

// TestOverTLS calls a fetch API served over TLS, as serve does with
// cluster.tls_cert: trusting the server's CA, the call and its token go
// through; trusting nothing, the handshake fails and the call says the
// gateway is out of reach.
func TestOverTLS(t *testing.T) {
	h, _ := fetchAPI(t, 1, gateway.Config{}, "n1")
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true // gRPC needs h2
	s.StartTLS()
	defer s.Close()
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())
	addr := s.Listener.Addr().String()
	tests := []struct {
		desc  string
		roots *x509.CertPool
		code  string // "" for an answer
	}{
		{"the server's CA trusted", roots, ""},
		{"nothing trusted", x509.NewCertPool(), CodeUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c := newClient(t, addr, WithToken("alice:pw"), WithTLS(&tls.Config{RootCAs: tc.roots}), WithRetries(0, 0))
			node, err := c.Ping(testContext(t))
			if tc.code != "" {
				if ce, ok := errors.AsType[*Error](err); !ok || ce.Code != tc.code {
					t.Errorf("Ping: %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || node.ID != "n1" {
				t.Errorf("Ping: %+v, %v", node, err)
			}
		})
	}
}

// TestStrict checks that strict mode's refusal reaches the caller typed.
func TestStrict(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "captcha") }))
	defer s.Close()
	c := newClient(t, gatewayAPI(t, 2), WithToken("alice:pw"))
	ctx := testContext(t)
	if _, err := c.Fetch(ctx, s.URL, MustNotMatch("captcha")); err == nil {
		t.Fatal("a captcha passed")
	}
	_, err := c.Fetch(ctx, s.URL, Strict())
	if ce, ok := errors.AsType[*Error](err); !ok || ce.Code != "no_eligible_route" {
		t.Errorf("strict fetch with both routes cooling: %v, want no_eligible_route", err)
	}
}

// TestAuthAndReach tells a wrong token from a gateway out of reach.
func TestAuthAndReach(t *testing.T) {
	addr := gatewayAPI(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	tests := []struct {
		desc string
		c    *Client
		code string
	}{
		{"no token", newClient(t, addr), CodeUnauthenticated},
		{"wrong token", newClient(t, addr, WithToken("alice:nope")), CodeUnauthenticated},
		{"out of reach", newClient(t, closed, WithToken("alice:pw"), WithRetries(1, time.Millisecond)), CodeUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := tc.c.Ping(testContext(t))
			if ce, ok := errors.AsType[*Error](err); !ok || ce.Code != tc.code {
				t.Errorf("Ping: %v, want %s", err, tc.code)
			}
		})
	}
}

// TestBatchAndStream carries ten requests each way.
func TestBatchAndStream(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }))
	defer s.Close()
	c := newClient(t, gatewayAPI(t, 2), WithToken("alice:pw"))
	ctx := testContext(t)
	var reqs []Request
	for i := range 10 {
		reqs = append(reqs, NewRequest(fmt.Sprintf("%s/%d", s.URL, i)))
	}
	seen := map[int64]bool{}
	for r := range c.Batch(ctx, reqs, 3) {
		if r.Err != nil || string(r.Response.Body) != fmt.Sprintf("/%d", r.Index) || seen[r.Index] {
			t.Errorf("batch result %d: %v %+v", r.Index, r.Err, r.Response)
		}
		seen[r.Index] = true
	}
	if len(seen) != 10 {
		t.Errorf("%d batch results, want 10", len(seen))
	}
	st, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	go func() {
		for i, r := range reqs {
			if st.Send(int64(i), r) != nil {
				return
			}
		}
		st.CloseSend()
	}()
	n := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil || r.Err != nil || string(r.Response.Body) != fmt.Sprintf("/%d", r.Index) {
			t.Fatalf("stream result: %v %+v", err, r)
		}
		n++
	}
	if n != 10 {
		t.Errorf("%d stream results, want 10", n)
	}
}

// TestRetries checks which failures are tried again: transport failures
// of idempotent calls only, as many times as allowed.
func TestRetries(t *testing.T) {
	c := withNodes(options{retries: 2, backoff: time.Millisecond, now: time.Now}, "n1")
	unavailable := status.Error(codes.Unavailable, "gone")
	tests := []struct {
		desc       string
		idempotent bool
		err        error
		wantTries  int
	}{
		{"idempotent, out of reach", true, unavailable, 3},
		{"not idempotent, out of reach", false, unavailable, 1},
		{"idempotent, refused", true, status.Error(codes.Unauthenticated, "who"), 1},
		{"idempotent, answered", true, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tries := 0
			c.call(context.Background(), tc.idempotent, func(context.Context, pb.FetcherClient) error { tries++; return tc.err })
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
		})
	}
}

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
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
	srv := &http.Server{Handler: api.Handler(), Protocols: fetchapi.Protocols()}
	go srv.Serve(ln)
	t.Cleanup(func() {
		api.Close()
		srv.Close()
		g.Close()
	})
	return srv
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
// SDK takes what the gateway may answer.
func TestLargeAnswer(t *testing.T) {
	big := strings.Repeat("x", 6<<20)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) }))
	defer s.Close()
	c := newClient(t, gatewayAPI(t, 1), WithToken("alice:pw"))
	resp, err := c.Fetch(testContext(t), s.URL)
	if err != nil || len(resp.Body) != len(big) || resp.Truncated {
		t.Fatalf("a 6 MiB answer: %v", err)
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

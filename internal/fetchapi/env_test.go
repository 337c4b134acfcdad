package fetchapi

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// env is the fetch API under test: a gateway over fake proxies, the API
// served on 127.0.0.1 (gRPC and JSON on one port), and a gRPC client.
type env struct {
	e      *engine.Engine
	g      *gateway.Gateway
	routes []string // route ids in list order
	api    *Server
	addr   string // host:port
	conn   *grpc.ClientConn
	client pb.FetcherClient
	now    atomic.Pointer[time.Time] // the API's clock; nil: time.Now
}

// testOptions are an env's: its API, gateway users, route lines after
// the proxies' (a provider gateway's), and the engine's deadline floor (0:
// its default).
type testOptions struct {
	api   Options
	users map[string]gateway.User
	lines []string
	floor time.Duration
}

// newEnv starts the API over one route per proxy, then one per line of
// o.lines, taken round-robin in order. Admission lets 127.0.0.1 through (the test sites) and no other
// internal address.
func newEnv(t testing.TB, o testOptions, proxies ...*routetest.Proxy) *env {
	t.Helper()
	e, err := engine.New(engine.Config{Picker: &engine.RoundRobin{}, Seed: 1, MaxRemovedShare: -1, DeadlineFloor: o.floor}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{e: e}
	var routes []*route.Route
	var lines []string
	for _, p := range proxies {
		lines = append(lines, p.URL.String())
	}
	lines = append(lines, o.lines...)
	for _, line := range lines {
		list, err := route.ParseList("test", []byte(line))
		if err != nil {
			t.Fatal(err)
		}
		r := &list[0]
		if err := e.AddRoute(time.Now(), r.Spec()); err != nil {
			t.Fatal(err)
		}
		routes, v.routes = append(routes, r), append(v.routes, r.ID)
	}
	g, err := gateway.New(gateway.Config{
		Users:     o.users,
		Admission: admit.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil),
	}, e, routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	v.g = g
	if o.api.Now == nil {
		o.api.Now = func() time.Time {
			if n := v.now.Load(); n != nil {
				return *n
			}
			return time.Now()
		}
	}
	v.api = New(g, e, o.api)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	v.addr = ln.Addr().String()
	srv := &http.Server{Handler: v.api.Handler(), Protocols: Protocols()}
	go srv.Serve(ln)
	t.Cleanup(func() {
		v.api.Close()
		// Shutdown rather than Close: a connection closed after a refused
		// body lingers half a second in net/http (closeWriteAndWait), and
		// must be gone before the leak check.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	})
	v.conn, err = grpc.NewClient(v.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.conn.Close() })
	v.client = pb.NewFetcherClient(v.conn)
	return v
}

// advance moves the API's clock d past now.
func (v *env) advance(d time.Duration) {
	n := time.Now().Add(d)
	v.now.Store(&n)
}

// post sends m as JSON to path with the Authorization value auth ("" for
// none) and returns the status and body.
func (v *env) post(t *testing.T, path, auth string, m proto.Message) (int, []byte) {
	t.Helper()
	body, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return v.postRaw(t, path, auth, body)
}

// postRaw sends body as is.
func (v *env) postRaw(t *testing.T, path, auth string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+v.addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return do(t, req)
}

// get sends GET path.
func (v *env) get(t *testing.T, path, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+v.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// site is an HTTP server on 127.0.0.1 whose handler sees the hit number
// (1-based) of each request.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func newSite(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(int(s.hits.Add(1)), w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// captchaFirst answers its first hit with a captcha page, later ones with
// the page asked for.
func captchaFirst(n int, w http.ResponseWriter, _ *http.Request) {
	if n == 1 {
		io.WriteString(w, "<html>please solve this captcha</html>")
		return
	}
	io.WriteString(w, "<html>the price is 42</html>")
}

// pairState is route i's state for target, "" when it has no record.
func (v *env) pairState(t *testing.T, i int, target string) engine.State {
	t.Helper()
	st, ok := v.e.Route(v.routes[i])
	if !ok {
		t.Fatalf("route %s unknown", v.routes[i])
	}
	for _, p := range st.Targets {
		if p.Target == target {
			return p.Health.State
		}
	}
	return engine.Candidate
}

// decodeNDJSON reads one BatchResult per line.
func decodeNDJSON(t *testing.T, body []byte) []*pb.BatchResult {
	t.Helper()
	var out []*pb.BatchResult
	for line := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n") {
		r := &pb.BatchResult{}
		if err := protojson.Unmarshal([]byte(line), r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// errorOf decodes the error of a JSON error answer.
func errorOf(t *testing.T, body []byte) *pb.Error {
	t.Helper()
	r := &pb.FetchResponse{}
	if err := protojson.Unmarshal(body, r); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	if r.GetError() == nil {
		t.Fatalf("answer %q carries no error", body)
	}
	return r.GetError()
}

package fetchapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestFetchTrace fetches a page whose first answer, through the first
// route, is a captcha: over gRPC and over JSON, the validator refuses it,
// the answer comes through the second route, and the trace shows both.
func TestFetchTrace(t *testing.T) {
	for _, via := range []string{"grpc", "json"} {
		t.Run(via, func(t *testing.T) {
			site := newSite(t, captchaFirst)
			v := newEnv(t, testOptions{api: Options{Node: "node-a"}}, routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{}))
			req := &pb.FetchRequest{Url: site.URL + "/item", Validators: &pb.Validators{MustNotMatch: "captcha"}}
			var resp *pb.FetchResponse
			if via == "grpc" {
				var err error
				if resp, err = v.client.Fetch(ctx(t), req); err != nil {
					t.Fatal(err)
				}
			} else {
				code, body := v.post(t, "/v1/fetch", "", req)
				resp = &pb.FetchResponse{}
				if err := protojson.Unmarshal(body, resp); code != 200 || err != nil {
					t.Fatalf("%d %s: %v", code, body, err)
				}
			}
			if resp.GetStatus() != 200 || string(resp.GetBody()) != "<html>the price is 42</html>" || resp.GetError() != nil {
				t.Fatalf("answer %d %q error %v", resp.GetStatus(), resp.GetBody(), resp.GetError())
			}
			tr := resp.GetTrace()
			want := []struct{ class, route, detail string }{
				{"content_invalid", v.routes[0], "body matches must_not_match"},
				{"ok", v.routes[1], ""},
			}
			if len(tr.GetAttempts()) != len(want) || tr.GetRequestId() == "" {
				t.Fatalf("trace %v, want %d attempts", tr, len(want))
			}
			for i, a := range tr.GetAttempts() {
				w := want[i]
				if a.GetClass() != w.class || a.GetRoute() != w.route || a.GetDetail() != w.detail || a.GetStatus() != 200 ||
					a.GetNode() != "node-a" || a.GetAttemptId() != fmt.Sprintf("%s.%d", tr.GetRequestId(), i+1) || a.GetBytes() == 0 {
					t.Errorf("attempt %d: %v, want %+v", i, a, w)
				}
			}
			if got := v.pairState(t, 0, "127.0.0.1"); got != engine.Cooling {
				t.Errorf("route 0's pair with the site is %v, want cooling", got)
			}
		})
	}
}

// TestFeedback gives late verdicts on attempts: a content_invalid cools
// the pair, an ok retracts it, and unknown, expired, another user's or
// malformed verdicts are refused, over gRPC and JSON.
func TestFeedback(t *testing.T) {
	users := map[string]gateway.User{"alice": {Password: "pw"}, "bob": {Password: "pw2"}}
	site := newSite(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "page") })
	v := newEnv(t, testOptions{users: users, api: Options{FeedbackTTL: time.Minute}}, routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{}))
	alice := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer alice:pw")
	resp, err := v.client.Fetch(alice, &pb.FetchRequest{Url: site.URL})
	if err != nil || len(resp.GetTrace().GetAttempts()) != 1 {
		t.Fatalf("fetch: %v, %v", err, resp)
	}
	id := resp.GetTrace().GetAttempts()[0].GetAttemptId()
	fb, err := v.client.Feedback(alice, &pb.FeedbackRequest{AttemptId: id, Verdict: "content_invalid", Reason: "parsed as garbage"})
	if err != nil || fb.GetRoute() != v.routes[0] || fb.GetTarget() != "127.0.0.1" {
		t.Fatalf("feedback: %v, %v", fb, err)
	}
	if got := v.pairState(t, 0, "127.0.0.1"); got != engine.Cooling {
		t.Errorf("after content_invalid feedback route 0's pair is %v, want cooling", got)
	}
	// The same verdict again is taken once: an ok now is a retraction.
	if _, err := v.client.Feedback(alice, &pb.FeedbackRequest{AttemptId: id, Verdict: "content_invalid"}); err != nil {
		t.Errorf("the same verdict again: %v", err)
	}
	if code, body := v.post(t, "/v1/feedback", "Bearer alice:pw", &pb.FeedbackRequest{AttemptId: id, Verdict: "ok"}); code != 200 {
		t.Errorf("retraction over JSON: %d %s", code, body)
	}
	tests := []struct {
		desc     string
		auth     string
		req      *pb.FeedbackRequest
		grpcCode codes.Code
		httpCode int
		errCode  string
	}{
		{"unknown attempt", "Bearer alice:pw", &pb.FeedbackRequest{AttemptId: "0000.1", Verdict: "content_invalid"}, codes.NotFound, 404, "unknown_attempt"},
		{"another user's attempt", "Bearer bob:pw2", &pb.FeedbackRequest{AttemptId: id, Verdict: "content_invalid"}, codes.NotFound, 404, "unknown_attempt"},
		{"bad verdict", "Bearer alice:pw", &pb.FeedbackRequest{AttemptId: id, Verdict: "meh"}, codes.InvalidArgument, 400, "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c := metadata.AppendToOutgoingContext(ctx(t), "authorization", tc.auth)
			if _, err := v.client.Feedback(c, tc.req); status.Code(err) != tc.grpcCode {
				t.Errorf("gRPC: %v, want %v", err, tc.grpcCode)
			}
			code, body := v.post(t, "/v1/feedback", tc.auth, tc.req)
			if code != tc.httpCode || errorOf(t, body).GetCode() != tc.errCode {
				t.Errorf("JSON: %d %s, want %d %s", code, body, tc.httpCode, tc.errCode)
			}
		})
	}
	v.advance(time.Minute + time.Second)
	if _, err := v.client.Feedback(alice, &pb.FeedbackRequest{AttemptId: id, Verdict: "content_invalid"}); status.Code(err) != codes.NotFound {
		t.Errorf("a verdict past feedback_ttl: %v, want NotFound", err)
	}
}

// TestFeedbackSubExit: a content_invalid verdict on an attempt through a
// provider gateway's sub-exit retires it, so the session's next fetch goes
// out through a new provider session (its own fake IP); a verdict on an
// attempt through a sub-exit already replaced retires nothing.
func TestFeedbackSubExit(t *testing.T) {
	pg := routetest.NewProviderGateway(t, "acct", "pw")
	site := newSite(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get(routetest.HeaderProviderIP))
	})
	// A deadline floor of its own: a loaded machine's slow answer must not
	// pass for a silent sub-exit, which retires it as a ban would.
	v := newEnv(t, testOptions{lines: []string{"gateway://acct:pw@" + pg.URL.Host + " preset=brightdata"}, floor: 30 * time.Second})
	fetch := func(target string) (ip, attempt string) {
		t.Helper()
		resp, err := v.client.Fetch(ctx(t), &pb.FetchRequest{Url: site.URL, Session: "s1", Target: target})
		if err != nil || resp.GetStatus() != 200 || len(resp.GetTrace().GetAttempts()) != 1 {
			t.Fatalf("fetch at %s: %v, %v", target, resp, err)
		}
		return string(resp.GetBody()), resp.GetTrace().GetAttempts()[0].GetAttemptId()
	}
	// Sub-exit 1 answers at two targets.
	ip1, atA := fetch("a")
	ipB, atB := fetch("b")
	if ipB != ip1 {
		t.Fatalf("the session moved from %s to %s", ip1, ipB)
	}
	if _, err := v.client.Feedback(ctx(t), &pb.FeedbackRequest{AttemptId: atA, Verdict: "content_invalid"}); err != nil {
		t.Fatal(err)
	}
	ip2, _ := fetch("a")
	if ip2 == ip1 || pg.Sessions() != 2 {
		t.Fatalf("after the verdict the session is on %s, was on %s (%d provider sessions)", ip2, ip1, pg.Sessions())
	}
	// A verdict on sub-exit 1's other answer, over JSON: its successor
	// stays.
	if code, body := v.post(t, "/v1/feedback", "", &pb.FeedbackRequest{AttemptId: atB, Verdict: "content_invalid"}); code != 200 {
		t.Fatalf("verdict over JSON: %d %s", code, body)
	}
	if ip, _ := fetch("a"); ip != ip2 || pg.Sessions() != 2 {
		t.Fatalf("a verdict on a replaced sub-exit moved the session from %s to %s", ip2, ip)
	}
	// Both verdicts were the first ban at their target, each sub-exit's
	// alone: the gateway stands at both.
	for _, target := range []string{"a", "b"} {
		if got := v.pairState(t, 0, target); !got.Usable() {
			t.Errorf("the gateway at %s: %v", target, got)
		}
	}
}

// TestAuth checks that the API asks for the proxy's users: missing and
// wrong credentials are UNAUTHENTICATED (401), not UNAVAILABLE as a node
// out of reach is, a flood of wrong ones is throttled as the proxy's are,
// and health checks need none.
func TestAuth(t *testing.T) {
	v := newEnv(t, testOptions{users: map[string]gateway.User{"alice": {Password: "pw"}}, api: Options{Node: "n1", Version: "v9"}}, routetest.NewProxy(t, routetest.Behavior{}))
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	// In order: a right password, once verified, skips the address's
	// failure count, which the two wrong ones (each asked twice) then
	// fill, so that a third is throttled.
	tests := []struct {
		desc     string
		auth     string
		grpcCode codes.Code
		httpCode int
	}{
		{"bearer", "Bearer alice:pw", codes.OK, 200},
		{"basic", basic, codes.OK, 200},
		{"none", "", codes.Unauthenticated, 401},
		{"malformed", "Bearer", codes.Unauthenticated, 401},
		{"wrong token", "Bearer alice:nope", codes.Unauthenticated, 401},
		{"unknown user", "Bearer mallory:pw", codes.Unauthenticated, 401},
		{"throttled", "Bearer alice:nope2", codes.ResourceExhausted, 429},
		{"right, though the address is throttled", "Bearer alice:pw", codes.OK, 200},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c := ctx(t)
			if tc.auth != "" {
				c = metadata.AppendToOutgoingContext(c, "authorization", tc.auth)
			}
			p, err := v.client.Ping(c, &pb.PingRequest{})
			if status.Code(err) != tc.grpcCode {
				t.Errorf("gRPC Ping: %v, want %v", err, tc.grpcCode)
			}
			if err == nil && (p.GetNode() != "n1" || p.GetVersion() != "v9" || p.GetRoutes() != 1 || p.GetRoutesUsable() != 1) {
				t.Errorf("Ping: %v", p)
			}
			if code, body := v.get(t, "/v1/ping", tc.auth); code != tc.httpCode {
				t.Errorf("GET /v1/ping: %d %s, want %d", code, body, tc.httpCode)
			}
		})
	}
	hc, err := healthpb.NewHealthClient(v.conn).Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check without credentials: %v, %v", hc, err)
	}
	// Reflection needs no credentials either, so that tools can list the
	// services.
	rs, err := reflectionpb.NewServerReflectionClient(v.conn).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	listed, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rs.CloseSend()
	var names []string
	for _, svc := range listed.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !slices.Contains(names, "switchyard.v1.Fetcher") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}
	// A node out of reach is UNAVAILABLE, which a wrong token never is.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	conn, err := grpc.NewClient(closed, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewFetcherClient(conn).Ping(ctx(t), &pb.PingRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("Ping of a closed port: %v, want Unavailable", err)
	}
}

// TestRefusals checks what the API refuses before anything leaves:
// internal destinations, malformed requests (naming the field), and
// requests over the size limits.
func TestRefusals(t *testing.T) {
	v := newEnv(t, testOptions{api: Options{MaxRequestBytes: 1 << 10, MaxBatch: 2}}, routetest.NewProxy(t, routetest.Behavior{}))
	tests := []struct {
		desc     string
		path     string
		body     string
		httpCode int
		errCode  string
		mention  string // in the message
	}{
		{"metadata address", "/v1/fetch", `{"url":"http://169.254.169.254/latest/meta-data/"}`, 403, "blocked_destination", "169.254.169.254"},
		{"private address", "/v1/fetch", `{"url":"http://10.0.0.1/"}`, 403, "blocked_destination", "10.0.0.1"},
		{"bad must_match", "/v1/fetch", `{"url":"http://a.test/","validators":{"mustMatch":"(unclosed"}}`, 400, "bad_request", "validators.mustMatch"},
		{"bad must_not_match", "/v1/fetch", `{"url":"http://a.test/","validators":{"must_not_match":"a**"}}`, 400, "bad_request", "validators.mustNotMatch"},
		{"bad status", "/v1/fetch", `{"url":"http://a.test/","validators":{"acceptStatus":[42]}}`, 400, "bad_request", "validators.acceptStatus[0]"},
		{"bad header", "/v1/fetch", `{"url":"http://a.test/","headers":[{"name":"a b","value":"x"}]}`, 400, "bad_request", "headers[0]"},
		{"bad label", "/v1/fetch", `{"url":"http://a.test/","labels":[{"key":"region","value":"us,provider=x"}]}`, 400, "bad_request", "labels[0]"},
		{"unknown field", "/v1/fetch", `{"url":"http://a.test/","colour":"red"}`, 400, "bad_request", "colour"},
		{"no url", "/v1/fetch", `{}`, 400, "bad_request", "url"},
		{"not json", "/v1/fetch", `url=x`, 400, "bad_request", "request JSON"},
		{"request too large", "/v1/fetch", `{"url":"http://a.test/","body":"` + strings.Repeat("A", 2<<10) + `"}`, 413, "request_too_large", "fetch.max_request_bytes"},
		{"no such endpoint", "/v2/fetch", `{}`, 404, "not_found", "POST /v1/fetch"},
		{"batch too large", "/v1/batch", `{"requests":[{"url":"http://a.test/"},{"url":"http://a.test/"},{"url":"http://a.test/"}]}`, 413, "batch_too_large", "fetch.max_batch"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			code, body := v.postRaw(t, tc.path, "", []byte(tc.body))
			e := errorOf(t, body)
			if code != tc.httpCode || e.GetCode() != tc.errCode || !strings.Contains(e.GetMessage(), tc.mention) {
				t.Errorf("%d %s, want %d %s mentioning %q", code, body, tc.httpCode, tc.errCode, tc.mention)
			}
		})
	}
	if _, err := v.client.Fetch(ctx(t), &pb.FetchRequest{Url: "http://169.254.169.254/"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC fetch of the metadata address: %v, want PermissionDenied", err)
	}
	if _, err := v.client.Fetch(ctx(t), &pb.FetchRequest{Url: "http://a.test/", Validators: &pb.Validators{MustMatch: "("}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "validators.mustMatch") {
		t.Errorf("gRPC fetch with a bad regexp: %v, want InvalidArgument naming the field", err)
	}
	stream, err := v.client.Batch(ctx(t), &pb.BatchRequest{Requests: make([]*pb.FetchRequest, 3)})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC batch over max_batch: %v, want InvalidArgument", err)
	}
}

// TestFetchPastItsDeadline answers a gRPC fetch that ran past its
// caller's deadline without a valid answer with DEADLINE_EXCEEDED, as the
// caller's side says it, whichever side notices first.
func TestFetchPastItsDeadline(t *testing.T) {
	v := newEnv(t, testOptions{}, routetest.NewProxy(t, routetest.Behavior{}))
	release := make(chan struct{})
	s := newSite(t, func(int, http.ResponseWriter, *http.Request) { <-release })
	t.Cleanup(func() { close(release) }) // before the site's Close, which waits for its handlers
	c, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	// Called in process: the answer is the server's, with no client-side
	// deadline of gRPC's to race it.
	resp, err := v.api.Fetch(c, &pb.FetchRequest{Url: s.URL})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a fetch past its deadline: %v, %v; want DeadlineExceeded", resp, err)
	}
}

// concurrentSite counts the requests it serves at once, each held until
// limit are in flight (or a bounded moment passes, for the last few), so
// that a bound on concurrency is met rather than dodged by quick answers.
func concurrentSite(t *testing.T, limit int) (*site, *atomic.Int64) {
	var peak atomic.Int64
	var mu sync.Mutex
	inflight, full := 0, make(chan struct{}) // guarded by mu: full closes when limit are in flight
	s := newSite(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		inflight++
		peak.Store(max(peak.Load(), int64(inflight)))
		wait := full
		if inflight == limit {
			close(full)
			full = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-wait:
		case <-time.After(time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		fmt.Fprintf(w, "page %d", n)
	})
	return s, &peak
}

// TestBatch carries 20 requests at most 4 at once over gRPC and JSON:
// every index comes back once, and the site sees 4 at once, never more.
func TestBatch(t *testing.T) {
	for _, via := range []string{"grpc", "json"} {
		t.Run(via, func(t *testing.T) {
			s, peak := concurrentSite(t, 4)
			v := newEnv(t, testOptions{}, routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{}))
			req := &pb.BatchRequest{Concurrency: 4}
			for i := range 20 {
				req.Requests = append(req.Requests, &pb.FetchRequest{Url: fmt.Sprintf("%s/%d", s.URL, i)})
			}
			var results []*pb.BatchResult
			if via == "grpc" {
				stream, err := v.client.Batch(ctx(t), req)
				if err != nil {
					t.Fatal(err)
				}
				for {
					r, err := stream.Recv()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					results = append(results, r)
				}
			} else {
				code, body := v.post(t, "/v1/batch", "", req)
				if code != 200 {
					t.Fatalf("%d %s", code, body)
				}
				results = decodeNDJSON(t, body)
			}
			seen := map[int64]bool{}
			for _, r := range results {
				if seen[r.GetIndex()] || r.GetResponse().GetStatus() != 200 {
					t.Errorf("result %v: repeated or failed", r)
				}
				seen[r.GetIndex()] = true
			}
			if len(seen) != 20 {
				t.Errorf("%d distinct results, want 20", len(seen))
			}
			if p := peak.Load(); p != 4 {
				t.Errorf("the site saw %d requests at once, want 4", p)
			}
		})
	}
}

// TestStream sends requests on a bidirectional stream and reads each
// result, tagged with its id; invalid requests are answered in line.
func TestStream(t *testing.T) {
	s := newSite(t, func(n int, w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "page %d", n) })
	v := newEnv(t, testOptions{}, routetest.NewProxy(t, routetest.Behavior{}))
	stream, err := v.client.Stream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 10 {
			url := s.URL
			if i == 9 {
				url = "not a url"
			}
			if err := stream.Send(&pb.StreamRequest{Id: int64(100 + i), Request: &pb.FetchRequest{Url: url}}); err != nil {
				t.Error(err)
				return
			}
		}
		stream.CloseSend()
	})
	got := map[int64]*pb.FetchResponse{}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[r.GetIndex()] = r.GetResponse()
	}
	wg.Wait()
	for i := range 10 {
		r := got[int64(100+i)]
		switch {
		case r == nil:
			t.Errorf("no result for id %d", 100+i)
		case i < 9 && r.GetStatus() != 200:
			t.Errorf("id %d: %v", 100+i, r)
		case i == 9 && r.GetError().GetCode() != "bad_request":
			t.Errorf("id %d, a bad URL: %v, want bad_request", 100+i, r)
		}
	}
}

// TestSlowBody checks that a JSON body sent too slowly is cut at
// BodyTimeout rather than holding its handler.
func TestSlowBody(t *testing.T) {
	v := newEnv(t, testOptions{api: Options{BodyTimeout: 100 * time.Millisecond}}, routetest.NewProxy(t, routetest.Behavior{}))
	c, err := net.Dial("tcp", v.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// The headers promise a body that never comes.
	if _, err := io.WriteString(c, "POST /v1/fetch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"url\":"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, _ := io.ReadAll(c) // the answer, then the server closes
	if !strings.Contains(string(b), "400 Bad Request") || time.Since(start) > 5*time.Second {
		t.Errorf("after %v: %q, want a 400 once the body timed out", time.Since(start), b)
	}
}

// Package client is the Go SDK of Switchyard's fetch API
// (docs/design/009-fetch-api.md): requests carried by a gateway's attempt
// loop, with their answers, full traces and late verdicts, over gRPC.
//
//	c, err := client.New("127.0.0.1:9091", client.WithToken("alice:pw"))
//	…
//	defer c.Close()
//	resp, err := c.Fetch(ctx, "http://example.com/", client.MustNotMatch("captcha"))
//
// A Client holds one connection per gateway, reused by every call and safe
// for concurrent use. It retries a call only when it failed in transport
// (the gateway out of reach) and only for idempotent requests; the gateway
// itself retries attempts through its routes.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Client calls the fetch API of a gateway, or of the nodes of a cluster
// (NewNodes). The node it calls is chosen per call (pick).
type Client struct {
	// Immutable after New.
	opts   options
	dial   []grpc.DialOption
	static []string // NewNodes' addresses

	mu    sync.Mutex              // serializes setNodes
	nodes atomic.Pointer[[]*node] // replaced whole by setNodes

	// The resolver loop of WithDNS runs until stop closes, then closes
	// stopped; both nil without it.
	stop, stopped chan struct{}
	closeOnce     sync.Once
}

// options are a Client's settings.
type options struct {
	token   string // "name:password"; "" for none
	tls     *tls.Config
	retries int
	backoff time.Duration
	timeout time.Duration // default per-call deadline; 0: the caller's context
	maxMsg  int           // the largest answer taken
	// cooldown is how long a node that failed in transport is left out.
	cooldown time.Duration
	now      func() time.Time
	// dns is WithDNS's name, resolved every dnsEvery with resolver; ""
	// for none.
	dns      string
	dnsEvery time.Duration
	resolver *net.Resolver
}

// Option configures a Client.
type Option func(*options)

// WithToken authenticates every call as the gateway's user: token is
// "name:password", sent as Authorization: Bearer. Without TLS it crosses
// the network in the clear: keep such a gateway on loopback.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS speaks TLS to the gateway, verifying it against cfg.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithRetries sets how many times a call that failed in transport is
// tried again (idempotent requests only), and the first wait between
// tries, doubling after each. Defaults 2 and 100ms.
func WithRetries(n int, backoff time.Duration) Option {
	return func(o *options) { o.retries, o.backoff = n, backoff }
}

// WithMaxResponse sets the largest answer taken, in bytes of its message:
// at least the gateway's fetch.max_response_bytes and the trace. Default
// 64 MiB.
func WithMaxResponse(n int) Option { return func(o *options) { o.maxMsg = n } }

// WithTimeout sets the deadline of every call whose context has none.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// New returns a client of the gateway whose fetch API listens at addr
// ("host:port"). It does not connect until the first call.
func New(addr string, opts ...Option) (*Client, error) {
	return NewNodes([]string{addr}, opts...)
}

// NewNodes returns a client of the cluster whose nodes' fetch APIs listen
// at addrs: each call goes to the less loaded of two healthy nodes, and
// an idempotent request that failed in transport goes to another node
// (nodes.go). It does not connect until the first call.
func NewNodes(addrs []string, opts ...Option) (*Client, error) {
	o := options{retries: 2, backoff: 100 * time.Millisecond, maxMsg: 64 << 20, cooldown: 5 * time.Second, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if len(addrs) == 0 && o.dns == "" {
		return nil, errors.New("switchyard client: no node address")
	}
	if o.dns != "" && o.dnsEvery <= 0 {
		o.dnsEvery = defaultDNSEvery
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	// gRPC's own default, 4 MiB, is under what the gateway answers
	// (fetch.max_response_bytes, 16 MiB by default).
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxMsg))}
	if o.cooldown > 0 {
		// A node that went away is dialled again at least every cooldown,
		// not after gRPC's backoff of up to two minutes, so that a node
		// that restarts takes calls again once its cooldown is over.
		dial = append(dial, grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: min(backoff.DefaultConfig.BaseDelay, o.cooldown), Multiplier: backoff.DefaultConfig.Multiplier,
			Jitter: backoff.DefaultConfig.Jitter, MaxDelay: o.cooldown,
		}}))
	}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: o.token, secure: o.tls != nil}))
	}
	c := &Client{opts: o, dial: dial, static: slices.Clone(addrs)}
	found, err := c.lookup()
	if err == nil {
		err = c.setNodes(found)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if o.dns != "" {
		c.stop, c.stopped = make(chan struct{}), make(chan struct{})
		go c.resolveEvery(o.dnsEvery)
	}
	return c, nil
}

// list is the nodes the client calls now.
func (c *Client) list() []*node {
	if p := c.nodes.Load(); p != nil {
		return *p
	}
	return nil
}

// setNodes makes the client call the nodes at addrs and NewNodes' own:
// a node still listed keeps its connection and counts, one no longer
// listed is closed (calls in flight on it end).
func (c *Client) setNodes(found []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := map[string]*node{}
	for _, n := range c.list() {
		old[n.addr] = n
	}
	var next []*node
	for _, addr := range slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(c.static), found...)))) {
		if n, ok := old[addr]; ok {
			next = append(next, n)
			delete(old, addr)
			continue
		}
		conn, err := grpc.NewClient(addr, c.dial...)
		if err != nil {
			return fmt.Errorf("switchyard client: %w", err)
		}
		next = append(next, &node{addr: addr, conn: conn, client: pb.NewFetcherClient(conn)})
	}
	if len(next) == 0 {
		return errors.New("switchyard client: no node: " + c.opts.dns + " has no records")
	}
	c.nodes.Store(&next)
	for _, n := range old {
		n.conn.Close()
	}
	return nil
}

// Close stops the DNS resolution and closes the client's connections.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.stop != nil {
			close(c.stop)
			<-c.stopped
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for _, n := range c.list() {
		err = errors.Join(err, n.conn.Close())
	}
	c.nodes.Store(&[]*node{})
	return err
}

// bearer sends the token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Error is why a call did not bring a valid answer: the gateway's code
// (no_route, no_eligible_route, paced, content_invalid, blocked_destination,
// bad_request…) or the call's (unauthenticated, unavailable, …).
type Error struct {
	Code       string
	Message    string
	RetryAfter time.Duration // when to ask again; 0 when unknown
}

func (e *Error) Error() string { return "switchyard: " + e.Code + ": " + e.Message }

// Codes of call failures, as Error.Code says them.
const (
	CodeUnauthenticated = "unauthenticated" // wrong or missing credentials: not an outage
	CodeUnavailable     = "unavailable"     // the gateway is out of reach
)

// callError is a gRPC call's failure as an *Error.
func callError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	code := "internal"
	switch st.Code() {
	case codes.Unauthenticated:
		code = CodeUnauthenticated
	case codes.Unavailable:
		code = CodeUnavailable
	case codes.InvalidArgument:
		code = "bad_request"
	case codes.PermissionDenied:
		code = "permission_denied"
	case codes.NotFound:
		code = "not_found"
	case codes.ResourceExhausted:
		code = "resource_exhausted"
	case codes.DeadlineExceeded:
		code = "deadline_exceeded"
	case codes.Canceled:
		code = "canceled"
	}
	return &Error{Code: code, Message: st.Message()}
}

// transportFailed reports whether a call failed in transport: the node out
// of reach or the connection cut before an answer.
func transportFailed(err error) bool { return status.Code(err) == codes.Unavailable }

// call runs f on a node, again after a transport failure while retries
// are left and the request is idempotent: at once on another node while
// one is left untried, else after backoff (doubling) on any.
func (c *Client) call(ctx context.Context, idempotent bool, f func(context.Context, pb.FetcherClient) error) error {
	if _, ok := ctx.Deadline(); !ok && c.opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	wait := c.opts.backoff
	tried := map[*node]bool{}
	for try := 0; ; try++ {
		n := c.pick(tried)
		if n == nil { // every node tried: again from the start, after a wait
			clear(tried)
			n = c.pick(tried)
		}
		tried[n] = true
		err := c.callOn(ctx, n, f)
		if err == nil || !idempotent || try >= c.opts.retries || !transportFailed(err) {
			return callError(err)
		}
		if len(tried) < len(c.list()) {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return callError(err)
		case <-t.C:
		}
		wait *= 2
	}
}

// Request is one request for the gateway to carry. Fetch builds one from
// its URL and call options; Batch and Stream take them as they are.
type Request struct {
	Method string // "" means GET
	URL    string
	Header http.Header
	Body   []byte
	// Timeout bounds the gateway's attempts together (at most its
	// retry.request_timeout); 0 means the gateway's.
	Timeout     time.Duration
	MaxAttempts int // 0 means the gateway's retry.max_attempts
	Session     string
	Labels      map[string]string
	Strict      bool   // fail with no_eligible_route rather than take the least-bad route
	Target      string // overrides the target key routes are judged against
	Validators  Validators
}

// Validators judge an answer at the gateway: one that fails makes the
// attempt content_invalid for its route and target, and the request is
// tried on another route.
type Validators struct {
	AcceptStatus  []int  // the statuses that are answers; empty means 2xx
	MustMatch     string // RE2 regexp the decoded start of the body must match
	MustNotMatch  string // RE2 regexp it must not match (a captcha page)
	MinBodyBytes  int64
	RequireHeader string
}

// CallOption sets a field of a Request.
type CallOption func(*Request)

// Method sets the request's method.
func Method(m string) CallOption { return func(r *Request) { r.Method = m } }

// Header adds a request header.
func Header(name, value string) CallOption {
	return func(r *Request) {
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header.Add(name, value)
	}
}

// Body sets the request's body.
func Body(b []byte) CallOption { return func(r *Request) { r.Body = b } }

// Timeout bounds the gateway's attempts together.
func Timeout(d time.Duration) CallOption { return func(r *Request) { r.Timeout = d } }

// Attempts caps the gateway's attempts.
func Attempts(n int) CallOption { return func(r *Request) { r.MaxAttempts = n } }

// Session keeps the request on the session's exit.
func Session(id string) CallOption { return func(r *Request) { r.Session = id } }

// Label adds a hard constraint on the route.
func Label(key, value string) CallOption {
	return func(r *Request) {
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
		r.Labels[key] = value
	}
}

// Strict refuses the least-bad fallback.
func Strict() CallOption { return func(r *Request) { r.Strict = true } }

// Target overrides the target key.
func Target(key string) CallOption { return func(r *Request) { r.Target = key } }

// ExpectStatus sets the statuses that count as answers.
func ExpectStatus(codes ...int) CallOption {
	return func(r *Request) { r.Validators.AcceptStatus = append(r.Validators.AcceptStatus, codes...) }
}

// MustMatch sets a regexp the body must match.
func MustMatch(re string) CallOption { return func(r *Request) { r.Validators.MustMatch = re } }

// MustNotMatch sets a regexp the body must not match.
func MustNotMatch(re string) CallOption { return func(r *Request) { r.Validators.MustNotMatch = re } }

// MinBody sets the smallest body that is an answer.
func MinBody(n int64) CallOption { return func(r *Request) { r.Validators.MinBodyBytes = n } }

// RequireHeader names a response header that must be present.
func RequireHeader(name string) CallOption {
	return func(r *Request) { r.Validators.RequireHeader = name }
}

// NewRequest is a GET of url with opts applied.
func NewRequest(url string, opts ...CallOption) Request {
	r := Request{URL: url}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// idempotent reports whether r may be sent twice with the effect of once
// (RFC 9110 §9.2.2).
func (r *Request) idempotent() bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// wire is r as the API takes it.
func (r *Request) wire() *pb.FetchRequest {
	out := &pb.FetchRequest{
		Method: r.Method, Url: r.URL, Body: r.Body, TimeoutMs: r.Timeout.Milliseconds(), MaxAttempts: int32(r.MaxAttempts),
		Session: r.Session, Strict: r.Strict, Target: r.Target,
	}
	for name, values := range r.Header {
		for _, v := range values {
			out.Headers = append(out.Headers, &pb.Header{Name: name, Value: v})
		}
	}
	for k, v := range r.Labels {
		out.Labels = append(out.Labels, &pb.Label{Key: k, Value: v})
	}
	v := r.Validators
	if len(v.AcceptStatus) > 0 || v.MustMatch != "" || v.MustNotMatch != "" || v.MinBodyBytes > 0 || v.RequireHeader != "" {
		out.Validators = &pb.Validators{MustMatch: v.MustMatch, MustNotMatch: v.MustNotMatch, MinBodyBytes: v.MinBodyBytes, RequireHeader: v.RequireHeader}
		for _, s := range v.AcceptStatus {
			out.Validators.AcceptStatus = append(out.Validators.AcceptStatus, int32(s))
		}
	}
	return out
}

// Response is what the gateway brought back: the answer (the last one
// when no valid answer came) and the trace of every attempt.
type Response struct {
	Status    int // 0 when no answer came back
	Header    http.Header
	Body      []byte
	Truncated bool // the body was cut at the gateway's fetch.max_response_bytes
	Trace     Trace
	// Node is the id of the node that ran the request, and Entry that of
	// the node that forwarded it there ("" when it ran where it arrived).
	Node, Entry string
}

// Trace is every attempt the gateway made for a request.
type Trace struct {
	RequestID string
	Attempts  []Attempt
}

// Attempt is one attempt of a request.
type Attempt struct {
	ID      string // what Feedback names
	Route   string // the exit's id, never its credentials
	Class   string // outcome class, "running" for one still in flight
	Status  int
	Latency time.Duration
	Bytes   int64
	Start   time.Duration // from the request's start
	Hedge   bool
	Node    string
	Detail  string // why a validator refused the answer
}

// response is m as a Response, and its error as an *Error.
func response(m *pb.FetchResponse) (*Response, error) {
	r := &Response{Status: int(m.GetStatus()), Body: m.GetBody(), Truncated: m.GetBodyTruncated(), Trace: Trace{RequestID: m.GetTrace().GetRequestId()},
		Node: m.GetNode(), Entry: m.GetEntry()}
	if len(m.GetHeaders()) > 0 {
		r.Header = http.Header{}
		for _, h := range m.GetHeaders() {
			r.Header.Add(h.GetName(), h.GetValue())
		}
	}
	for _, a := range m.GetTrace().GetAttempts() {
		r.Trace.Attempts = append(r.Trace.Attempts, Attempt{
			ID: a.GetAttemptId(), Route: a.GetRoute(), Class: a.GetClass(), Status: int(a.GetStatus()),
			Latency: time.Duration(a.GetLatencyUs()) * time.Microsecond, Bytes: a.GetBytes(),
			Start: time.Duration(a.GetStartOffsetUs()) * time.Microsecond, Hedge: a.GetHedge(), Node: a.GetNode(), Detail: a.GetDetail(),
		})
	}
	if e := m.GetError(); e != nil {
		return r, &Error{Code: e.GetCode(), Message: e.GetMessage(), RetryAfter: time.Duration(e.GetRetryAfterMs()) * time.Millisecond}
	}
	return r, nil
}

// Fetch has the gateway carry a GET of url (or what opts make of it) and
// returns its answer and trace. The error, an *Error, says why no valid
// answer came; the Response, when not nil, still holds the trace and the
// last answer.
func (c *Client) Fetch(ctx context.Context, url string, opts ...CallOption) (*Response, error) {
	return c.Do(ctx, NewRequest(url, opts...))
}

// Do has the gateway carry req; see Fetch.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	var m *pb.FetchResponse
	err := c.call(ctx, req.idempotent(), func(ctx context.Context, node pb.FetcherClient) (err error) {
		m, err = node.Fetch(ctx, req.wire())
		return err
	})
	if err != nil {
		return nil, err
	}
	return response(m)
}

// Result is one result of a Batch or a Stream: the request's place in the
// batch (or its stream id), and its Response and error as Do returns them.
type Result struct {
	Index    int64
	Response *Response
	Err      error
}

// Batch has the gateway carry reqs, at most concurrency at once (0: the
// gateway's default), and yields each result as it finishes. A call that
// fails as a whole (refused, out of reach) yields one Result with Index -1
// and the error. Breaking out of the loop ends the batch.
func (c *Client) Batch(ctx context.Context, reqs []Request, concurrency int) iter.Seq[Result] {
	return func(yield func(Result) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		in := &pb.BatchRequest{Requests: make([]*pb.FetchRequest, len(reqs)), Concurrency: int32(concurrency)}
		for i := range reqs {
			in.Requests[i] = reqs[i].wire()
		}
		// A batch goes to one node, whole: failing over part of it would
		// send again requests that may have run (docs/design/013-cluster.md).
		n := c.pick(nil)
		n.inflight.Add(1)
		defer n.inflight.Add(-1)
		stream, err := n.client.Batch(ctx, in)
		for err == nil {
			var m *pb.BatchResult
			if m, err = stream.Recv(); err != nil {
				break
			}
			resp, ferr := response(m.GetResponse())
			if !yield(Result{Index: m.GetIndex(), Response: resp, Err: ferr}) {
				return
			}
		}
		if !errors.Is(err, io.EOF) {
			yield(Result{Index: -1, Err: callError(err)})
		}
	}
}

// Stream is a bidirectional stream of requests and results: the gateway
// carries what is sent as it comes and answers each as it finishes, in
// any order. Send and Recv may run on two goroutines; Send is not safe
// for several at once, nor Recv.
type Stream struct {
	s      grpc.BidiStreamingClient[pb.StreamRequest, pb.BatchResult]
	cancel context.CancelFunc
}

// Stream opens a stream; Close ends it.
func (c *Client) Stream(ctx context.Context) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	// A stream stays on the node it opened on: its requests are not sent
	// again elsewhere when it breaks.
	s, err := c.pick(nil).client.Stream(ctx)
	if err != nil {
		cancel()
		return nil, callError(err)
	}
	return &Stream{s: s, cancel: cancel}, nil
}

// Send sends req under id, which its Result carries back. It blocks while
// the gateway holds requests back (its concurrency is taken and results
// wait to be read).
func (s *Stream) Send(id int64, req Request) error {
	return callError(s.s.Send(&pb.StreamRequest{Id: id, Request: req.wire()}))
}

// CloseSend says no more requests come; results still do, then io.EOF.
func (s *Stream) CloseSend() error { return s.s.CloseSend() }

// Recv returns the next result; io.EOF once every request sent is
// answered after CloseSend.
func (s *Stream) Recv() (Result, error) {
	m, err := s.s.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Result{}, err
		}
		return Result{}, callError(err)
	}
	resp, ferr := response(m.GetResponse())
	return Result{Index: m.GetIndex(), Response: resp, Err: ferr}, nil
}

// Close ends the stream, abandoning requests in flight.
func (s *Stream) Close() { s.cancel() }

// Verdicts a Feedback gives.
const (
	ContentInvalid = "content_invalid" // the page was not what it seemed
	Retract        = "ok"              // retract an earlier verdict (one more success)
)

// Feedback gives a late verdict on an attempt, by the Attempt.ID a trace
// gave, within the gateway's fetch.feedback_ttl. An unknown or expired id
// is an *Error with code not_found.
func (c *Client) Feedback(ctx context.Context, attemptID, verdict, reason string) error {
	// A verdict given twice is taken once, so it may be sent again.
	return c.call(ctx, true, func(ctx context.Context, node pb.FetcherClient) error {
		_, err := node.Feedback(ctx, &pb.FeedbackRequest{AttemptId: attemptID, Verdict: verdict, Reason: reason})
		return err
	})
}

// Node is who answered a Ping.
type Node struct {
	ID           string
	Version      string
	Uptime       time.Duration
	Routes       int
	RoutesUsable int
}

// Ping asks the gateway who it is, authenticated: a wrong token is an
// *Error with code unauthenticated, a gateway out of reach unavailable.
func (c *Client) Ping(ctx context.Context) (*Node, error) {
	var m *pb.PingResponse
	err := c.call(ctx, true, func(ctx context.Context, node pb.FetcherClient) (err error) {
		m, err = node.Ping(ctx, &pb.PingRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Node{ID: m.GetNode(), Version: m.GetVersion(), Uptime: time.Duration(m.GetUptimeMs()) * time.Millisecond,
		Routes: int(m.GetRoutes()), RoutesUsable: int(m.GetRoutesUsable())}, nil
}

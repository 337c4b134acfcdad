// Package fetchapi is the fetch API (docs/design/009-fetch-api.md): gRPC
// (switchyard.v1.Fetcher, grpc.health.v1, server reflection) and HTTP JSON
// with the same messages, on one listener split by content type, over the
// gateway's attempt loop (gateway.Fetch). It is the only package of ours
// that imports grpc, besides the generated code and the public client.
package fetchapi

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/cluster"
	"github.com/switchyard/switchyard/internal/gateway"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Fetcher is what the API carries requests with, checks callers and
// destinations against, and reports late verdicts to; *gateway.Gateway is
// one.
type Fetcher interface {
	Fetch(ctx context.Context, req gateway.FetchRequest) (*gateway.FetchResult, error)
	Feedback(now time.Time, route, target string, gens engine.Generations, sub gateway.SubExit, o engine.Outcome) error
	Admit(ctx context.Context, authority string) (string, error)
	TargetKey(authority string) string
	PaceForward(ctx context.Context, target string) (release func(), err error)
	Authenticate(ctx context.Context, user, password, remote string) (string, engine.Labels, error)
	RequiresAuth() bool
}

// Pool is what the API counts routes of; *engine.Engine is one.
type Pool interface {
	Routes() []engine.RouteStatus
}

var (
	_ Fetcher = (*gateway.Gateway)(nil)
	_ Pool    = (*engine.Engine)(nil)
)

// Options tune the API. Zero fields mean the documented defaults.
type Options struct {
	// Node names this gateway in traces and Ping. Default "local".
	Node string
	// Version is what Ping answers. Default the module's version as the
	// build recorded it, else "(devel)".
	Version string
	// Now is the clock of uptime and of the feedback table. Default
	// time.Now.
	Now func() time.Time
	// MaxRequestBytes caps one JSON request body and one gRPC message.
	// Default 4 MiB.
	MaxRequestBytes int
	// BodyTimeout bounds reading one JSON request body, so that a client
	// sending it slowly cannot hold a handler; 0 means none.
	BodyTimeout time.Duration
	// MaxBatch caps the requests of one Batch. Default 10000.
	MaxBatch int
	// Concurrency is how many requests of one Batch or Stream are carried
	// at once unless the batch asks for fewer; MaxConcurrency caps what a
	// batch may ask. Defaults 8 and 64.
	Concurrency, MaxConcurrency int
	// FeedbackTTL is how long an attempt can be given a late verdict, and
	// MaxFeedback how many attempts are remembered for it (the oldest
	// forgotten first). Defaults 15m and 100000.
	FeedbackTTL time.Duration
	MaxFeedback int
	// Log receives the late verdicts given; nil means none.
	Log *slog.Logger
	// Cluster, when set, authenticates node calls and forwards requests
	// to the node whose exits fit them (docs/design/013-cluster.md).
	Cluster *cluster.Cluster
	// RequestTimeout bounds a forward of a request that sets no
	// timeout_ms (retry.request_timeout), and the connect phase of a
	// CONNECT tunnelled through a peer. Default the gateway's.
	RequestTimeout time.Duration
	// ProxyPort is this node's forward proxy's port, which Ping
	// advertises for tunnels; 0 for none.
	ProxyPort int
}

// Defaults of the fields DefaultOptions leaves zero.
const (
	defaultNode    = "local"
	defaultVersion = "(devel)"
)

// DefaultOptions is what New gives zero limits, the one place they are
// defined: config.Default starts the [fetch] section from it. The
// feedback TTL is the gateway's (gateway.Config.FeedbackTTL), which the
// proxy's late verdicts share.
func DefaultOptions() Options {
	return Options{
		MaxRequestBytes: 4 << 20, MaxBatch: 10000, Concurrency: 8, MaxConcurrency: 64,
		FeedbackTTL: gateway.DefaultConfig().FeedbackTTL, MaxFeedback: 100000,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Node == "" {
		o.Node = defaultNode
	}
	if o.Version == "" {
		o.Version = defaultVersion
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
			o.Version = info.Main.Version
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	set(&o.MaxRequestBytes, d.MaxRequestBytes)
	set(&o.MaxBatch, d.MaxBatch)
	set(&o.MaxConcurrency, d.MaxConcurrency)
	set(&o.Concurrency, min(d.Concurrency, o.MaxConcurrency))
	set(&o.MaxFeedback, d.MaxFeedback)
	if o.FeedbackTTL <= 0 {
		o.FeedbackTTL = d.FeedbackTTL
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = gateway.DefaultConfig().RequestTimeout
	}
	return o
}

// Server is the fetch API. Handler serves it; Close ends its gRPC calls.
type Server struct {
	pb.UnimplementedFetcherServer

	// Immutable after New.
	opts     Options
	fetcher  Fetcher
	pool     Pool
	start    time.Time
	grpc     *grpc.Server
	json     *http.ServeMux
	attempts *attempts
}

// New returns the API over f and p.
func New(f Fetcher, p Pool, opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{opts: opts, fetcher: f, pool: p, start: opts.Now(), attempts: newAttempts(opts.FeedbackTTL, opts.MaxFeedback)}
	var sopts []grpc.ServerOption
	if opts.Cluster != nil {
		// Node calls are authenticated first: a forward carries the
		// user the entry authenticated, not the user's credentials.
		sopts = opts.Cluster.ServerOptions()
	}
	sopts = append(sopts, grpc.MaxRecvMsgSize(opts.MaxRequestBytes), grpc.ChainUnaryInterceptor(s.authUnary), grpc.ChainStreamInterceptor(s.authStream))
	s.grpc = grpc.NewServer(sopts...)
	pb.RegisterFetcherServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, health.NewServer()) // SERVING while the process runs
	reflection.Register(s.grpc)
	s.json = http.NewServeMux()
	s.json.HandleFunc("POST /v1/fetch", s.httpFetch)
	s.json.HandleFunc("POST /v1/batch", s.httpBatch)
	s.json.HandleFunc("POST /v1/feedback", s.httpFeedback)
	s.json.HandleFunc("GET /v1/ping", s.httpPing)
	s.json.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "not_found", "no such endpoint: POST /v1/fetch, /v1/batch, /v1/feedback; GET /v1/ping; gRPC switchyard.v1.Fetcher")
	})
	return s
}

// Handler serves gRPC (HTTP/2 with an application/grpc content type, h2c
// on a plain listener) and the JSON API (anything else) on one listener.
// Its http.Server must allow unencrypted HTTP/2 (Protocols).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		s.json.ServeHTTP(w, r)
	})
}

// Protocols are what the http.Server serving Handler must speak: HTTP/1
// for JSON clients, and HTTP/2 without TLS (h2c, prior knowledge) for
// gRPC ones.
func Protocols() *http.Protocols {
	p := &http.Protocols{}
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// Close ends the gRPC calls in progress; the http.Server that serves
// Handler closes its own connections.
func (s *Server) Close() { s.grpc.Stop() }

// caller is who made a request: a user of the gateway's, "" without users.
type caller struct {
	user   string
	labels engine.Labels
}

// credentials reads Basic or Bearer credentials from an Authorization
// value: Basic base64(name:password), or Bearer name:password (the same
// pair, unencoded, as API clients set tokens).
func credentials(auth string) (user, password string, ok bool) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(auth), " ")
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", "", false
		}
		rest = string(raw)
	case !strings.EqualFold(scheme, "Bearer"):
		return "", "", false
	}
	return strings.Cut(rest, ":")
}

// authenticate checks the Authorization value auth of a client at remote.
func (s *Server) authenticate(ctx context.Context, auth, remote string) (caller, error) {
	if !s.fetcher.RequiresAuth() {
		return caller{}, nil
	}
	user, password, ok := credentials(auth)
	if !ok {
		return caller{}, &gateway.AuthError{Reason: "denied"}
	}
	name, labels, err := s.fetcher.Authenticate(ctx, user, password, remote)
	return caller{user: name, labels: labels}, err
}

type callerKey struct{}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// grpcAuth authenticates a call of the Fetcher service from its metadata;
// health checks and reflection need no credentials, so that load
// balancers and tools can ask.
func (s *Server) grpcAuth(ctx context.Context, method string) (context.Context, error) {
	if !strings.HasPrefix(method, "/"+pb.Fetcher_ServiceDesc.ServiceName+"/") {
		return ctx, nil
	}
	if call, ok := cluster.CallFrom(ctx); ok {
		// A node's call, its token checked: a forward runs as the user
		// the entry authenticated, under that user's labels.
		labels, err := engine.ParseLabels(call.UserLabels)
		if err != nil {
			return ctx, status.Error(codes.InvalidArgument, "switchyard: cluster: the forward's user labels: "+err.Error())
		}
		return context.WithValue(ctx, callerKey{}, caller{user: call.User, labels: labels}), nil
	}
	var auth, remote string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	c, err := s.authenticate(ctx, auth, remote)
	if err != nil {
		return ctx, grpcAuthError(err)
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

// grpcAuthError is a refusal as a gRPC status: wrong or missing
// credentials are UNAUTHENTICATED, never UNAVAILABLE, so that a caller
// tells a bad token from a node out of reach.
func grpcAuthError(err error) error {
	var ae *gateway.AuthError
	if errors.As(err, &ae) {
		switch ae.Reason {
		case "throttled":
			return status.Error(codes.ResourceExhausted, "switchyard: "+ae.Error())
		case "busy":
			return status.Error(codes.Unavailable, "switchyard: "+ae.Error())
		}
	}
	return status.Error(codes.Unauthenticated, "switchyard: authentication required: Authorization: Bearer NAME:PASSWORD or Basic")
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.grpcAuth(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.grpcAuth(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

// authedStream is a stream whose context carries its caller.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }

// fetch carries one request for c, here or, in a cluster, on the node
// whose exits fit it, unless it was forwarded here (one hop only). A
// request that cannot be carried at all is answered with its error and no
// attempt.
func (s *Server) fetch(ctx context.Context, c caller, req *pb.FetchRequest) *pb.FetchResponse {
	switch {
	case s.opts.Cluster == nil:
	case cluster.Forwarded(ctx):
		s.opts.Cluster.CountForwardedIn()
	default:
		if resp := s.route(ctx, c, req); resp != nil {
			return resp
		}
	}
	return s.fetchHere(ctx, c, req)
}

// feedback reports a late verdict of c's on an attempt: here, or on the
// cluster node that ran it.
func (s *Server) feedback(ctx context.Context, c caller, req *pb.FeedbackRequest) (*pb.FeedbackResponse, error) {
	var class engine.Class
	switch req.GetVerdict() {
	case "content_invalid":
		class = engine.ContentInvalid
	case "ok":
		class = engine.OK
	default:
		return nil, &fieldError{"verdict", `want "content_invalid" or "ok" (to retract one)`}
	}
	now := s.opts.Now()
	a, fresh, ok := s.attempts.judge(req.GetAttemptId(), c.user, class, now)
	if !ok {
		return nil, errUnknownAttempt
	}
	if a.node != "" {
		return s.feedbackThere(ctx, c, a.node, req)
	}
	if fresh {
		o := engine.Outcome{Class: class}
		if class == engine.OK {
			o.Latency = a.latency
		}
		if err := s.fetcher.Feedback(now, a.route, a.target, a.gens, a.sub, o); err != nil {
			return nil, err // the route left the pool since
		}
		s.opts.Log.Info("feedback", "attempt", clip(req.GetAttemptId()), "route", a.route, "target", a.target,
			"verdict", class.String(), "reason", clip(req.GetReason()), "user", c.user)
	}
	return &pb.FeedbackResponse{Route: a.route, Target: a.target}, nil
}

// errUnknownAttempt refuses a verdict on an attempt the table does not
// hold.
var errUnknownAttempt = errors.New("unknown_attempt: no such attempt id, or it expired (verdicts are taken for fetch.feedback_ttl after the fetch, on this gateway only)")

// Summary is what this node advertises of itself to its peers.
func (s *Server) Summary() cluster.Summary {
	sum := cluster.Summarize(s.opts.Version, s.pool.Routes())
	sum.ProxyPort = s.opts.ProxyPort
	return sum
}

// ping answers who this node is, its routes by label set and its load.
func (s *Server) ping() *pb.PingResponse {
	p := s.Summary().PingResponse(s.opts.Node, s.opts.Now().Sub(s.start))
	if s.opts.Cluster != nil {
		p.ClusterAuth, p.Instance = true, s.opts.Cluster.Instance()
	}
	return p
}

// batch carries reqs for c, at most concurrency at once, and hands each
// result to send as it finishes, from one goroutine at a time. It stops
// starting requests once ctx ends or send fails, and returns send's error.
func (s *Server) batch(ctx context.Context, c caller, reqs []*pb.FetchRequest, concurrency int, send func(*pb.BatchResult) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan *pb.BatchResult)
	var wg sync.WaitGroup
	go func() {
		defer close(results)
		slots := make(chan struct{}, concurrency)
		for i, req := range reqs {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				wg.Wait()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The slot is held until the result is taken, so that a
				// caller that stops reading holds the batch back.
				defer func() { <-slots }()
				r := &pb.BatchResult{Index: int64(i), Response: s.fetch(ctx, c, req)}
				select {
				case results <- r:
				case <-ctx.Done():
				}
			}()
		}
		wg.Wait()
	}()
	var err error
	for r := range results {
		if err == nil {
			if err = send(r); err != nil {
				cancel()
			}
		}
	}
	return err
}

// concurrency is what a batch asking for n gets.
func (s *Server) concurrency(n int32) int {
	if n <= 0 {
		return s.opts.Concurrency
	}
	return min(int(n), s.opts.MaxConcurrency)
}

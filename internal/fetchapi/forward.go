package fetchapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/cluster"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Server-side forwarding (docs/design/013-cluster.md): the node that takes
// a request (the entry) picks the node whose exits fit it, itself
// included, and forwards it there over gRPC, one hop only.

// forwardSlack is the time an entry keeps, of a request's remaining
// deadline, to relay the answer: the executing node is given the rest, so
// that it answers with its trace before the entry's own deadline passes.
const forwardSlack = 500 * time.Millisecond

// failoverSafe reports whether a request of method may be sent to another
// node after its node failed: GET, HEAD and OPTIONS only, since a node
// that fails may have run the request's whole attempt loop already, and a
// PUT or DELETE replayed there is not always harmless to the caller's
// bookkeeping (docs/design/013-cluster.md, Failover).
func failoverSafe(method string) bool {
	switch strings.ToUpper(method) {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// transportFailure reports whether a forward's error says the node, not
// the request, failed: unreachable, or the connection cut before an
// answer (gRPC reports both as UNAVAILABLE).
func transportFailure(err error) bool { return status.Code(err) == codes.Unavailable }

// route carries req for c: here, or on the node that fits it. It returns
// nil when this node should run it itself.
func (s *Server) route(ctx context.Context, c caller, req *pb.FetchRequest) *pb.FetchResponse {
	cl := s.opts.Cluster
	// Admission at the entry, for a forward too: a destination refused
	// here never reaches another node, whatever its own configuration.
	u, err := url.Parse(req.GetUrl())
	if err != nil || u.Host == "" {
		return nil // the local path names the mistake
	}
	if _, err := s.fetcher.Admit(ctx, u.Host); err != nil {
		return nil // refused by the local path, with its own code
	}
	labels, target := s.labelsOf(c, req), req.GetTarget()
	if target == "" {
		target = s.fetcher.TargetKey(u.Host)
	}
	var trace []*pb.Attempt
	tried := map[string]bool{}
	began := time.Now()
	for n := 0; ; n++ {
		ch := cl.Pick(labels, target, tried)
		if ch.Self {
			if len(trace) == 0 {
				return nil
			}
			resp := s.fetchHere(ctx, c, req)
			resp.Trace.Attempts = append(trace, resp.Trace.Attempts...)
			return resp
		}
		// The entry's pacing holds for what it forwards, as for what it
		// runs (the local path paces itself).
		release, perr := s.fetcher.PaceForward(ctx, target)
		if perr != nil {
			ch.Done(nil)
			return &pb.FetchResponse{Trace: &pb.Trace{Attempts: trace}, Entry: cl.Self(), Error: apiError(perr)}
		}
		start := time.Now()
		resp, err := s.forward(ctx, ch, c, req)
		release()
		ch.Done(err)
		if err == nil {
			s.rememberForwarded(c, resp)
			resp.Entry = cl.Self()
			if resp.Trace == nil {
				resp.Trace = &pb.Trace{}
			}
			resp.Trace.Attempts = append(trace, resp.Trace.Attempts...)
			return resp
		}
		if refused := refusedResponse(err); refused != nil {
			return refused
		}
		tried[ch.Node] = true
		// The trace names the node of every try, the failed ones too.
		trace = append(trace, &pb.Attempt{Node: ch.Node, Class: "node_unavailable", LatencyUs: time.Since(start).Microseconds(),
			StartOffsetUs: start.Sub(began).Microseconds(), Detail: clip(status.Convert(err).Message())})
		switch {
		case !transportFailure(err) || ctx.Err() != nil:
			return nodeFailed(cl, trace, "node_failed", "node "+ch.Node+" could not run the request: "+status.Convert(err).Message())
		case !failoverSafe(req.GetMethod()):
			return nodeFailed(cl, trace, "node_unavailable",
				"node "+ch.Node+" failed in transport after the "+req.GetMethod()+" was sent; it may have run, so it is not sent again (only GET, HEAD and OPTIONS fail over)")
		case n >= cl.MaxFailover():
			return nodeFailed(cl, trace, "node_unavailable", "node "+ch.Node+" failed in transport; no node left to try within cluster.max_failover")
		}
	}
}

// fetchHere runs req on this node.
func (s *Server) fetchHere(ctx context.Context, c caller, req *pb.FetchRequest) *pb.FetchResponse {
	freq, err := fetchRequest(req, c.user, c.labels)
	if err != nil {
		return &pb.FetchResponse{Trace: &pb.Trace{}, Error: apiError(err), Node: s.opts.Node}
	}
	res, err := s.fetcher.Fetch(ctx, freq)
	now := s.opts.Now()
	for _, a := range res.Attempts {
		if a.Status != 0 { // an answer: a page a caller may judge later
			s.attempts.add(a.ID, attempt{user: c.user, route: a.Route, target: a.Target, gens: a.Gens, sub: a.SubExit, latency: a.Latency}, now)
		}
	}
	return fetchResponse(res, err, s.opts.Node)
}

// nodeFailed answers a request no node could run, with the nodes tried.
func nodeFailed(cl *cluster.Cluster, trace []*pb.Attempt, code, msg string) *pb.FetchResponse {
	return &pb.FetchResponse{Trace: &pb.Trace{Attempts: trace}, Entry: cl.Self(), Error: &pb.Error{Code: code, Message: msg}}
}

// labelsOf are the labels req's exits must carry: the caller's own and
// the request's. A conflict is the local path's to refuse.
func (s *Server) labelsOf(c caller, req *pb.FetchRequest) engine.Labels {
	labels := append(engine.Labels(nil), c.labels...)
	for _, l := range req.GetLabels() {
		if _, dup := labels.Get(l.GetKey()); !dup {
			labels = append(labels, engine.Label{Key: l.GetKey(), Value: l.GetValue()})
		}
	}
	return labels
}

// forward sends req to the node ch, as c's, within what is left of the
// request's time: its own timeout_ms or retry.request_timeout, and the
// caller's deadline, whichever ends first, less forwardSlack.
func (s *Server) forward(ctx context.Context, ch cluster.Choice, c caller, req *pb.FetchRequest) (*pb.FetchResponse, error) {
	budget := s.opts.RequestTimeout
	if t := time.Duration(req.GetTimeoutMs()) * time.Millisecond; t > 0 && t < budget {
		budget = t
	}
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl))
	}
	remote := budget - forwardSlack
	if remote <= 0 {
		return nil, status.Error(codes.DeadlineExceeded, "switchyard: no time left to forward the request")
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	fwd := proto.CloneOf(req)
	fwd.TimeoutMs = remote.Milliseconds()
	ctx = s.opts.Cluster.ForwardContext(ctx, c.user, c.labels.String())
	return pb.NewFetcherClient(ch.Conn).Fetch(ctx, fwd)
}

// refusedResponse is a node's refusal of a request (INVALID_ARGUMENT,
// PERMISSION_DENIED: the request's fault, not the node's) as the entry
// answers it, or nil for any other error.
func refusedResponse(err error) *pb.FetchResponse {
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument && st.Code() != codes.PermissionDenied {
		return nil
	}
	// The message is the node's Fetch's: "switchyard: CODE: message".
	code, msg, ok := strings.Cut(strings.TrimPrefix(st.Message(), "switchyard: "), ": ")
	if !ok {
		code, msg = "bad_request", st.Message()
	}
	return &pb.FetchResponse{Trace: &pb.Trace{}, Error: &pb.Error{Code: code, Message: msg}}
}

// rememberForwarded keeps the answered attempts of a forward's resp, so
// that a late verdict given to this entry reaches the node that ran them.
func (s *Server) rememberForwarded(c caller, resp *pb.FetchResponse) {
	now := s.opts.Now()
	for _, a := range resp.GetTrace().GetAttempts() {
		if a.GetStatus() != 0 && a.GetAttemptId() != "" {
			s.attempts.add(a.GetAttemptId(), attempt{user: c.user, route: a.GetRoute(), node: resp.GetNode()}, now)
		}
	}
}

// feedbackThere gives node the late verdict req of c's on an attempt it
// ran; the node takes a verdict given twice once, as this one does.
func (s *Server) feedbackThere(ctx context.Context, c caller, node string, req *pb.FeedbackRequest) (*pb.FeedbackResponse, error) {
	conn, ok := s.opts.Cluster.Conn(node)
	if !ok {
		return nil, errors.New("node " + node + " that ran the attempt has left the cluster")
	}
	resp, err := pb.NewFetcherClient(conn).Feedback(s.opts.Cluster.ForwardContext(ctx, c.user, c.labels.String()), req)
	switch status.Code(err) {
	case codes.OK:
		return resp, nil
	case codes.NotFound:
		return nil, errUnknownAttempt
	case codes.InvalidArgument:
		return nil, &fieldError{"verdict", status.Convert(err).Message()}
	}
	return nil, errors.New("node " + node + ": " + status.Convert(err).Message())
}

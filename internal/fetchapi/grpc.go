package fetchapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// The Fetcher service. Calls reach here authenticated (authUnary,
// authStream).

var _ pb.FetcherServer = (*Server)(nil)

// Fetch carries one request. A request that cannot be carried at all
// (malformed, refused by admission) is INVALID_ARGUMENT or
// PERMISSION_DENIED, one whose caller's deadline passed without a valid
// answer DEADLINE_EXCEEDED (CANCELED when the caller gave up); any other
// end, valid answer or not, is the response, whose error field says why
// it is not valid, beside the trace.
func (s *Server) Fetch(ctx context.Context, req *pb.FetchRequest) (*pb.FetchResponse, error) {
	resp := s.fetch(ctx, callerOf(ctx), req)
	if err := ctx.Err(); err != nil && resp.GetError() != nil {
		// The caller's deadline passed or it canceled: the call's own
		// status, not the last attempt's "canceled", which could still
		// reach a caller whose deadline timer had not fired yet.
		return nil, status.FromContextError(err).Err()
	}
	md := metadata.MD{}
	if resp.GetNode() != "" {
		md.Set("x-switchyard-node", resp.GetNode())
	}
	if resp.GetEntry() != "" {
		md.Set("x-switchyard-entry", resp.GetEntry())
	}
	// Best effort: the header goes with the answer or not at all.
	_ = grpc.SetHeader(ctx, md)
	if code, refused := refusedCode(resp.GetError()); refused {
		return nil, status.Error(code, "switchyard: "+resp.GetError().GetCode()+": "+resp.GetError().GetMessage())
	}
	return resp, nil
}

// refusedCode says whether e refused a request before anything was tried,
// and the gRPC code that says so.
func refusedCode(e *pb.Error) (codes.Code, bool) {
	switch e.GetCode() {
	case "bad_request", "body_too_large":
		return codes.InvalidArgument, true
	case "blocked_destination", "label_conflict":
		return codes.PermissionDenied, true
	}
	return codes.OK, false
}

// Batch carries the batch's requests, results streamed as they finish.
func (s *Server) Batch(req *pb.BatchRequest, stream grpc.ServerStreamingServer[pb.BatchResult]) error {
	if n := len(req.GetRequests()); n > s.opts.MaxBatch {
		return status.Errorf(codes.InvalidArgument, "switchyard: requests: %d in one batch, at most %d (fetch.max_batch)", n, s.opts.MaxBatch)
	}
	ctx := stream.Context()
	return s.batch(ctx, callerOf(ctx), req.GetRequests(), s.concurrency(req.GetConcurrency()), stream.Send)
}

// Stream carries requests as they come, at most Options.Concurrency at
// once, results sent as they finish. A caller that stops reading results
// stops the reading of its requests once that many wait, so gRPC's flow
// control holds it back.
func (s *Server) Stream(stream grpc.BidiStreamingServer[pb.StreamRequest, pb.BatchResult]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	c := callerOf(ctx)
	slots := make(chan struct{}, s.opts.Concurrency)
	var sending sync.Mutex // Send is not safe from several goroutines
	var sendErr error      // guarded by sending
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			wg.Wait()
			sending.Lock()
			defer sending.Unlock()
			return sendErr
		}
		if err != nil {
			return err
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r := &pb.BatchResult{Index: req.GetId(), Response: s.fetch(ctx, c, req.GetRequest())}
			sending.Lock()
			defer sending.Unlock()
			if sendErr == nil {
				if sendErr = stream.Send(r); sendErr != nil {
					cancel()
				}
			}
		}()
	}
}

// Ping answers who this node is.
func (s *Server) Ping(context.Context, *pb.PingRequest) (*pb.PingResponse, error) {
	return s.ping(), nil
}

// Feedback reports a late verdict.
func (s *Server) Feedback(ctx context.Context, req *pb.FeedbackRequest) (*pb.FeedbackResponse, error) {
	resp, err := s.feedback(ctx, callerOf(ctx), req)
	var fe *fieldError
	switch {
	case err == nil:
		return resp, nil
	case errors.As(err, &fe):
		return nil, status.Error(codes.InvalidArgument, "switchyard: "+fe.Error())
	case errors.Is(err, errUnknownAttempt):
		return nil, status.Error(codes.NotFound, "switchyard: "+err.Error())
	}
	return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("switchyard: %v", err))
}

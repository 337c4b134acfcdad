package fetchapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// The HTTP JSON API: the gRPC messages in protojson (field names in
// lowerCamelCase as written, either spelling read; bytes in base64).
// Errors are {"error": {"code", "message"}} with an HTTP status.

var (
	jsonOut = protojson.MarshalOptions{EmitUnpopulated: false}
	jsonIn  = protojson.UnmarshalOptions{} // unknown fields are errors, naming the field
)

// httpFetch is POST /v1/fetch: a FetchRequest in, a FetchResponse out. A
// request that cannot be carried at all is 400 (malformed) or 403
// (admission, label conflict); any other end is 200 with the response,
// whose error says why the answer is not valid.
func (s *Server) httpFetch(w http.ResponseWriter, r *http.Request) {
	c, ok := s.httpAuth(w, r)
	if !ok {
		return
	}
	req := &pb.FetchRequest{}
	if !s.decode(w, r, req) {
		return
	}
	resp := s.fetch(r.Context(), c, req)
	nodeHeaders(w.Header(), resp)
	if code, refused := refusedCode(resp.GetError()); refused {
		status := http.StatusForbidden
		if code == codes.InvalidArgument {
			status = http.StatusBadRequest
		}
		writeJSON(w, status, &pb.FetchResponse{Error: resp.GetError()})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// nodeHeaders name the node that ran resp (X-Switchyard-Node) and the
// entry that forwarded it there (X-Switchyard-Entry), as the proxy's
// answers do (README, The cluster).
func nodeHeaders(h http.Header, resp *pb.FetchResponse) {
	if resp.GetNode() != "" {
		h.Set("X-Switchyard-Node", resp.GetNode())
	}
	if resp.GetEntry() != "" {
		h.Set("X-Switchyard-Entry", resp.GetEntry())
	}
}

// httpBatch is POST /v1/batch: a BatchRequest in, one BatchResult per line
// out (NDJSON), each as it finishes.
func (s *Server) httpBatch(w http.ResponseWriter, r *http.Request) {
	c, ok := s.httpAuth(w, r)
	if !ok {
		return
	}
	req := &pb.BatchRequest{}
	if !s.decode(w, r, req) {
		return
	}
	if n := len(req.GetRequests()); n > s.opts.MaxBatch {
		fail(w, http.StatusRequestEntityTooLarge, "batch_too_large", fmt.Sprintf("requests: %d in one batch, at most %d (fetch.max_batch)", n, s.opts.MaxBatch))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	// An error means the client left: the batch stops starting requests.
	_ = s.batch(r.Context(), c, req.GetRequests(), s.concurrency(req.GetConcurrency()), func(res *pb.BatchResult) error {
		line, err := jsonOut.Marshal(res)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	})
}

// httpFeedback is POST /v1/feedback.
func (s *Server) httpFeedback(w http.ResponseWriter, r *http.Request) {
	c, ok := s.httpAuth(w, r)
	if !ok {
		return
	}
	req := &pb.FeedbackRequest{}
	if !s.decode(w, r, req) {
		return
	}
	resp, err := s.feedback(r.Context(), c, req)
	var fe *fieldError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, resp)
	case errors.As(err, &fe):
		fail(w, http.StatusBadRequest, "bad_request", fe.Error())
	case errors.Is(err, errUnknownAttempt):
		fail(w, http.StatusNotFound, "unknown_attempt", err.Error())
	default:
		fail(w, http.StatusConflict, "unknown_route", err.Error())
	}
}

// httpPing is GET /v1/ping.
func (s *Server) httpPing(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.httpAuth(w, r); ok {
		writeJSON(w, http.StatusOK, s.ping())
	}
}

// httpAuth authenticates r from its Authorization header, answering the
// client itself when it does not pass: 401 for wrong or missing
// credentials, 429 throttled, 503 busy.
func (s *Server) httpAuth(w http.ResponseWriter, r *http.Request) (caller, bool) {
	c, err := s.authenticate(r.Context(), r.Header.Get("Authorization"), r.RemoteAddr)
	if err == nil {
		return c, true
	}
	var ae *gateway.AuthError
	errors.As(err, &ae)
	switch {
	case ae != nil && ae.Reason == "throttled":
		w.Header().Set("Retry-After", strconv.Itoa(engine.RetryAfterSeconds(ae.RetryAfter)))
		fail(w, http.StatusTooManyRequests, "auth_throttled", ae.Error())
	case ae != nil && ae.Reason == "busy":
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusServiceUnavailable, "auth_busy", ae.Error())
	default:
		w.Header().Set("WWW-Authenticate", `Basic realm="switchyard"`)
		fail(w, http.StatusUnauthorized, "unauthenticated", "authentication required: Authorization: Bearer NAME:PASSWORD or Basic")
	}
	return caller{}, false
}

// decode reads r's body, at most MaxRequestBytes and within BodyTimeout,
// into m, answering 400 (naming the field protojson could not read) or 413
// itself.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	rc := http.NewResponseController(w)
	if d := s.opts.BodyTimeout; d > 0 {
		rc.SetReadDeadline(time.Now().Add(d))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxRequestBytes)))
	if err == nil && s.opts.BodyTimeout > 0 {
		rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		// What is left of the body will not be read: the connection ends
		// with the answer.
		w.Header().Set("Connection", "close")
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			fail(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body over %d bytes (fetch.max_request_bytes)", s.opts.MaxRequestBytes))
			return false
		}
		fail(w, http.StatusBadRequest, "bad_request", "reading the request: "+err.Error())
		return false
	}
	if err := decodeJSON(body, m); err != nil {
		fail(w, http.StatusBadRequest, "bad_request", err.Error())
		return false
	}
	return true
}

// decodeJSON reads one message in protojson.
func decodeJSON(body []byte, m proto.Message) error {
	if err := jsonIn.Unmarshal(body, m); err != nil {
		return fmt.Errorf("request JSON: %w", err)
	}
	return nil
}

// writeJSON answers m in protojson.
func writeJSON(w http.ResponseWriter, status int, m proto.Message) {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		fail(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// fail answers an error in the API's JSON.
func fail(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, &pb.FetchResponse{Error: &pb.Error{Code: code, Message: msg}})
}

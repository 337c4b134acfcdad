package fetchapi

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Bounds on one request's fields, so that a request cannot make the
// gateway compile a huge regexp or carry an unbounded header list.
const (
	maxHeaders = 100
	maxURL     = 8 << 10
	maxRegexp  = 4 << 10
	maxLabels  = 32
)

// fieldError is a request field that cannot be carried, named as the
// JSON API spells it (protojson's names).
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// fetchRequest is req as the gateway takes it, for user, whose labels it
// cannot escape. Every error is a *fieldError.
func fetchRequest(req *pb.FetchRequest, user string, userLabels engine.Labels) (gateway.FetchRequest, error) {
	out := gateway.FetchRequest{
		Method: req.GetMethod(), URL: req.GetUrl(), Body: req.GetBody(),
		Timeout: time.Duration(req.GetTimeoutMs()) * time.Millisecond, MaxAttempts: int(req.GetMaxAttempts()),
		Session: req.GetSession(), Strict: req.GetStrict(), Target: req.GetTarget(),
		User: user, UserLabels: userLabels,
	}
	switch {
	case out.URL == "":
		return out, &fieldError{"url", "required"}
	case len(out.URL) > maxURL:
		return out, &fieldError{"url", fmt.Sprintf("longer than %d bytes", maxURL)}
	case req.GetTimeoutMs() < 0:
		return out, &fieldError{"timeoutMs", "must not be negative"}
	case req.GetMaxAttempts() < 0:
		return out, &fieldError{"maxAttempts", "must not be negative"}
	case len(req.GetHeaders()) > maxHeaders:
		return out, &fieldError{"headers", fmt.Sprintf("more than %d", maxHeaders)}
	case len(req.GetLabels()) > maxLabels:
		return out, &fieldError{"labels", fmt.Sprintf("more than %d", maxLabels)}
	}
	if len(req.GetHeaders()) > 0 {
		out.Header = make(http.Header, len(req.GetHeaders()))
	}
	for i, h := range req.GetHeaders() {
		if !httpguts.ValidHeaderFieldName(h.GetName()) || !httpguts.ValidHeaderFieldValue(h.GetValue()) {
			return out, &fieldError{fmt.Sprintf("headers[%d]", i), fmt.Sprintf("invalid header %q", clip(h.GetName()))}
		}
		out.Header.Add(h.GetName(), h.GetValue())
	}
	for i, l := range req.GetLabels() {
		// One label at a time, so that a value cannot smuggle a second
		// label in with a comma.
		parsed, err := engine.ParseLabels(l.GetKey() + "=" + l.GetValue())
		if err != nil || len(parsed) != 1 {
			return out, &fieldError{fmt.Sprintf("labels[%d]", i), fmt.Sprintf("invalid label %q=%q", clip(l.GetKey()), clip(l.GetValue()))}
		}
		if _, dup := out.Labels.Get(parsed[0].Key); dup {
			return out, &fieldError{fmt.Sprintf("labels[%d]", i), "key " + parsed[0].Key + " given twice"}
		}
		out.Labels = append(out.Labels, parsed[0])
	}
	v, err := validators(req.GetValidators())
	out.Validators = v
	return out, err
}

// validators is v as the gateway takes it, its regexps compiled.
func validators(v *pb.Validators) (gateway.Validators, error) {
	var out gateway.Validators
	if v == nil {
		return out, nil
	}
	for i, s := range v.GetAcceptStatus() {
		if s < 100 || s > 999 {
			return out, &fieldError{fmt.Sprintf("validators.acceptStatus[%d]", i), fmt.Sprintf("%d is not an HTTP status", s)}
		}
		out.AcceptStatus = append(out.AcceptStatus, int(s))
	}
	var err error
	if out.MustMatch, err = compile("validators.mustMatch", v.GetMustMatch()); err != nil {
		return out, err
	}
	if out.MustNotMatch, err = compile("validators.mustNotMatch", v.GetMustNotMatch()); err != nil {
		return out, err
	}
	if v.GetMinBodyBytes() < 0 {
		return out, &fieldError{"validators.minBodyBytes", "must not be negative"}
	}
	out.MinBodyBytes = v.GetMinBodyBytes()
	if h := v.GetRequireHeader(); h != "" && !httpguts.ValidHeaderFieldName(h) {
		return out, &fieldError{"validators.requireHeader", fmt.Sprintf("invalid header name %q", clip(h))}
	}
	out.RequireHeader = v.GetRequireHeader()
	return out, nil
}

// compile compiles the regexp of field, nil for "".
func compile(field, expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	if len(expr) > maxRegexp {
		return nil, &fieldError{field, fmt.Sprintf("longer than %d bytes", maxRegexp)}
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, &fieldError{field, err.Error()}
	}
	return re, nil
}

// clip cuts what a message quotes of a request to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// fetchResponse is the gateway's result as the API answers it, the
// attempts run by node.
func fetchResponse(res *gateway.FetchResult, err error, node string) *pb.FetchResponse {
	out := &pb.FetchResponse{
		Status: int32(res.Status), Body: res.Body, BodyTruncated: res.Truncated,
		Trace: &pb.Trace{RequestId: res.RequestID, Attempts: make([]*pb.Attempt, len(res.Attempts))}, Node: node,
	}
	for name, values := range res.Header {
		for _, v := range values {
			out.Headers = append(out.Headers, &pb.Header{Name: name, Value: v})
		}
	}
	for i, a := range res.Attempts {
		class := a.Class.String()
		if a.Running {
			class = "running"
		}
		out.Trace.Attempts[i] = &pb.Attempt{
			AttemptId: a.ID, Route: a.Route, Class: class, Status: int32(a.Status),
			LatencyUs: a.Latency.Microseconds(), Bytes: a.Bytes, StartOffsetUs: a.Start.Microseconds(),
			Hedge: a.Hedge, Node: node, Detail: a.Detail,
		}
	}
	if err != nil {
		out.Error = apiError(err)
	}
	return out
}

// apiError is err as the API names it: a *gateway.FetchError's code, or
// internal.
func apiError(err error) *pb.Error {
	if fe, ok := err.(*gateway.FetchError); ok {
		return &pb.Error{Code: fe.Code, Message: fe.Message, RetryAfterMs: fe.RetryAfter.Milliseconds()}
	}
	if fe, ok := err.(*fieldError); ok {
		return &pb.Error{Code: "bad_request", Message: fe.Error()}
	}
	return &pb.Error{Code: "internal", Message: strings.TrimPrefix(err.Error(), "switchyard: ")}
}

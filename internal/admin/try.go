package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
)

// Fetcher runs one request through the gateway's attempt loop and says
// what happened to each attempt (gateway.Gateway, the fetch API's way in).
type Fetcher interface {
	Authenticate(ctx context.Context, user, password, remote string) (name string, labels engine.Labels, err error)
	Fetch(ctx context.Context, req gateway.FetchRequest) (*gateway.FetchResult, error)
}

var _ Fetcher = (*gateway.Gateway)(nil)

// tryTimeout bounds one request of the dashboard's "try a request".
const tryTimeout = 30 * time.Second

// tryRequest is the body of POST /api/try.
type tryRequest struct {
	URL     string `json:"url"`
	Method  string `json:"method"`  // default GET
	Session string `json:"session"` // sticky session id
	Labels  string `json:"labels"`  // hard constraints: key=value,…
	// MustNotMatch is a validator: an answer whose body matches this RE2
	// regexp is content_invalid for its route, tried elsewhere.
	MustNotMatch string `json:"must_not_match"`
	// User and Password are a gateway user's, for a gateway with
	// [[users]]: the request meets client auth as any other.
	User     string `json:"user"`
	Password string `json:"password"`
}

// tryResult is the answer of POST /api/try: the request's trace.
type tryResult struct {
	Status      int          `json:"status"`          // 0: no answer came back
	Error       string       `json:"error,omitempty"` // the fetch's code when it failed
	Detail      string       `json:"detail,omitempty"`
	LatencyMS   float64      `json:"latency_ms"`
	Bytes       int          `json:"bytes"`
	ContentType string       `json:"content_type,omitempty"`
	RequestID   string       `json:"request_id"`
	Attempts    []tryAttempt `json:"attempts"`
}

// tryAttempt is one attempt of a tried request.
type tryAttempt struct {
	Route     string  `json:"route"`
	Class     string  `json:"class"` // "running": a hedge's loser still in flight
	Status    int     `json:"status,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	StartMS   float64 `json:"start_ms"`
	Hedge     bool    `json:"hedge,omitempty"`
	Detail    string  `json:"detail,omitempty"` // why a validator refused it
}

// tryMethods are the methods the form may send: without a body, as the
// form has none.
var tryMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodDelete: true, http.MethodOptions: true,
}

// try is POST /api/try: one request through the gateway's attempt loop, as
// the fetch API runs it (SSRF admission, client auth, labels and sessions,
// retries and hedges all apply), for holders of the token, since it sends
// traffic through the exits. It answers with the trace; the body of the
// answer is counted, not returned: a page shown in the dashboard would be
// the target's content on its origin.
func (s *Server) try(w http.ResponseWriter, r *http.Request) {
	if s.fetcher == nil {
		writeError(w, http.StatusNotFound, "this gateway has no forward proxy to try")
		return
	}
	remote := slog.String("remote", r.RemoteAddr)
	if !s.mayChange(w, r, "try", remote) {
		return
	}
	var in tryRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "the body must be JSON: {\"url\": …, \"method\": …, \"session\": …, \"labels\": …}")
		return
	}
	in.Method = strings.ToUpper(cmp.Or(in.Method, http.MethodGet))
	if !tryMethods[in.Method] {
		writeError(w, http.StatusBadRequest, "method must be GET, HEAD, DELETE or OPTIONS")
		return
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		// The URL is not echoed: it may carry a secret in its query.
		writeError(w, http.StatusBadRequest, "url must be an absolute http:// or https:// URL without credentials")
		return
	}
	labels, err := engine.ParseLabels(in.Labels)
	if err != nil {
		writeError(w, http.StatusBadRequest, "labels: "+err.Error())
		return
	}
	req := gateway.FetchRequest{Method: in.Method, URL: u.String(), Session: in.Session, Labels: labels, Timeout: tryTimeout}
	if in.MustNotMatch != "" {
		if req.Validators.MustNotMatch, err = regexp.Compile(in.MustNotMatch); err != nil {
			writeError(w, http.StatusBadRequest, "must_not_match: "+err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), tryTimeout)
	defer cancel()
	if req.User, req.UserLabels, err = s.fetcher.Authenticate(ctx, in.User, in.Password, r.RemoteAddr); err != nil {
		writeError(w, http.StatusForbidden, "the gateway user was refused: "+err.Error())
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin try", remote, slog.String("method", in.Method))
	start := s.now()
	res, err := s.fetcher.Fetch(ctx, req)
	out := tryResult{LatencyMS: millis(s.now().Sub(start))}
	if res != nil {
		out.Status, out.Bytes, out.RequestID = res.Status, len(res.Body), res.RequestID
		out.ContentType = res.Header.Get("Content-Type")
		out.Attempts = make([]tryAttempt, len(res.Attempts))
		for i, a := range res.Attempts {
			out.Attempts[i] = tryAttempt{Route: a.Route, Class: a.Class.String(), Status: a.Status,
				LatencyMS: millis(a.Latency), StartMS: millis(a.Start), Hedge: a.Hedge, Detail: a.Detail}
			if a.Running {
				out.Attempts[i].Class = "running"
			}
		}
	}
	if fe, ok := errors.AsType[*gateway.FetchError](err); ok {
		out.Error, out.Detail = fe.Code, fe.Message
	} else if err != nil {
		out.Error = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

package admin

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// tryTimeout bounds one request of the dashboard's "try a request".
const tryTimeout = 30 * time.Second

// tryRequest is the body of POST /api/try.
type tryRequest struct {
	URL     string `json:"url"`
	Method  string `json:"method"`  // default GET
	Session string `json:"session"` // X-Switchyard-Session
	Labels  string `json:"labels"`  // X-Switchyard-Labels: key=value,…
	// User and Password are a gateway user's, for a gateway with
	// [[users]]: the request meets client auth as any other.
	User     string `json:"user"`
	Password string `json:"password"`
}

// tryResult is the answer of POST /api/try: what the gateway's answer
// said of how it was carried.
type tryResult struct {
	Status      int     `json:"status"`
	Route       string  `json:"route,omitempty"`    // X-Switchyard-Route
	Attempts    string  `json:"attempts,omitempty"` // X-Switchyard-Attempts
	Error       string  `json:"error,omitempty"`    // X-Switchyard-Error
	LatencyMS   float64 `json:"latency_ms"`
	Bytes       int64   `json:"bytes"`
	ContentType string  `json:"content_type,omitempty"`
}

// tryMethods are the methods the form may send: without a body, as the
// form has none.
var tryMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodDelete: true, http.MethodOptions: true,
}

// try is POST /api/try: one request through the forward proxy's own path,
// as a client's absolute-form request (SSRF admission, client auth,
// labels and sessions, retries and hedges all apply), for holders of the
// token, since it sends traffic through the exits. The body of the
// answer is counted, not returned: the trace is the point, and a page
// shown in the dashboard would be the target's content on its origin.
func (s *Server) try(w http.ResponseWriter, r *http.Request) {
	if s.proxy == nil {
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
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		// The URL is not echoed: it may carry a secret in its query.
		writeError(w, http.StatusBadRequest, "url must be an absolute http:// URL without credentials (https:// goes through CONNECT, which the form does not open)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, in.Method, u.String(), nil)
	if err != nil {
		writeError(w, http.StatusBadRequest, "the request cannot be built")
		return
	}
	// As the proxy's server would have read it from a client.
	req.RequestURI, req.RemoteAddr, req.Host = u.String(), r.RemoteAddr, u.Host
	if in.Session != "" {
		req.Header.Set("X-Switchyard-Session", in.Session)
	}
	if in.Labels != "" {
		req.Header.Set("X-Switchyard-Labels", in.Labels)
	}
	if in.User != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(in.User+":"+in.Password)))
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin try", remote, slog.String("method", in.Method))
	rec := &answerRecorder{header: make(http.Header)}
	start := s.now()
	s.proxy.ServeHTTP(rec, req)
	out := tryResult{
		Status:      cmp.Or(rec.status, http.StatusOK),
		Route:       rec.header.Get("X-Switchyard-Route"),
		Attempts:    rec.header.Get("X-Switchyard-Attempts"),
		Error:       rec.header.Get("X-Switchyard-Error"),
		LatencyMS:   round3(float64(s.now().Sub(start)) / float64(time.Millisecond)),
		Bytes:       rec.bytes,
		ContentType: rec.header.Get("Content-Type"),
	}
	writeJSON(w, http.StatusOK, out)
}

// answerRecorder is the ResponseWriter of a tried request: it keeps the
// status and headers and counts the body without keeping it.
type answerRecorder struct {
	header http.Header
	status int
	bytes  int64
}

func (a *answerRecorder) Header() http.Header { return a.header }

func (a *answerRecorder) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	a.bytes += int64(len(b))
	return len(b), nil
}

// Flush lets the proxy stream into the recorder as it would to a client.
func (a *answerRecorder) Flush() {}

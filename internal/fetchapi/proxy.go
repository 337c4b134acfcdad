package fetchapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/gateway"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// Forward-proxy requests on another node (docs/design/013-cluster.md): an
// absolute-form request the proxy took is carried to the node whose exits
// fit it as a fetch, and its answer relayed as the proxy answers.

var _ gateway.Forwarder = (*Server)(nil)

// Forward runs r, of user under labels, on the node that fits it best, and
// answers w, unless this node fits best: then it returns false with r's
// body as it was. The answer is whole (fetch.max_response_bytes) and
// names the node and the entry.
func (s *Server) Forward(w http.ResponseWriter, r *http.Request, user string, labels engine.Labels) bool {
	cl := s.opts.Cluster
	if cl == nil {
		return false
	}
	if entry := r.Header.Get(headerEntry); entry != "" {
		// Tunnelled here by an entry (tunnel.go): it runs here, one hop,
		// once the entry proved itself.
		if !cl.Verify(entry, r.Header.Get(headerEntryToken)) {
			h := w.Header()
			h.Set("X-Switchyard-Error", "unauthenticated")
			http.Error(w, "switchyard: cluster: wrong or missing node token for entry "+clip(entry)+" (is cluster.secret the same on every node?)", http.StatusForbidden)
			return true
		}
		cl.CountForwardedIn()
		return false
	}
	if r.Method == http.MethodConnect {
		return s.tunnelThere(w, r, labels)
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		// The gateway checked the length fits retry.max_body_bytes.
		if body, err = io.ReadAll(io.LimitReader(r.Body, r.ContentLength)); err != nil {
			http.Error(w, "switchyard: reading the request body: "+err.Error(), http.StatusBadRequest)
			return true
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	req := &pb.FetchRequest{Method: r.Method, Url: r.URL.String(), Body: body}
	for name, values := range gateway.ForwardHeader(r.Header) {
		for _, v := range values {
			req.Headers = append(req.Headers, &pb.Header{Name: name, Value: v})
		}
	}
	resp := s.route(r.Context(), caller{user: user, labels: labels}, req)
	if resp == nil {
		return false // this node: the gateway serves r, its body restored
	}
	proxyAnswer(w, resp)
	return true
}

// proxyAnswer writes a forwarded request's result as the proxy answers:
// the answer that came back, or the error as the proxy names it.
func proxyAnswer(w http.ResponseWriter, resp *pb.FetchResponse) {
	h := w.Header()
	if resp.GetStatus() != 0 {
		for _, hd := range resp.GetHeaders() {
			h.Add(hd.GetName(), hd.GetValue())
		}
	}
	nodeHeaders(h, resp)
	if as := resp.GetTrace().GetAttempts(); len(as) > 0 {
		h.Set("X-Switchyard-Route", as[len(as)-1].GetRoute())
		h.Set("X-Switchyard-Attempts", strconv.Itoa(len(as)))
	}
	if e := resp.GetError(); e != nil {
		h.Set("X-Switchyard-Error", e.GetCode())
	}
	if resp.GetStatus() != 0 {
		w.WriteHeader(int(resp.GetStatus()))
		w.Write(resp.GetBody())
		return
	}
	e := resp.GetError()
	status := http.StatusBadGateway
	switch e.GetCode() {
	case "bad_request", "body_too_large":
		status = http.StatusBadRequest
	case "blocked_destination", "label_conflict":
		status = http.StatusForbidden
	case "paced":
		status = http.StatusTooManyRequests
		if ra := time.Duration(e.GetRetryAfterMs()) * time.Millisecond; ra > 0 {
			h.Set("Retry-After", strconv.Itoa(max(1, int((ra+time.Second-1)/time.Second))))
		}
	case "request_timeout":
		status = http.StatusGatewayTimeout
	case "no_route", "no_eligible_route", "no_matching_route", "node_unavailable":
		status = http.StatusServiceUnavailable
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintln(w, "switchyard: "+e.GetCode()+": "+e.GetMessage())
}

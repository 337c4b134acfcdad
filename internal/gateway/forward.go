package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/guard"
	"github.com/switchyard/switchyard/internal/route"
)

// signatureWindow is how much of a 2xx body is searched for block
// signatures: captcha and ban pages say so early.
const signatureWindow = 16 << 10

// errAttemptTimeout is the cause of an attempt's context when
// Config.AttemptTimeout ran out, told apart from the client going away.
var errAttemptTimeout = errors.New("attempt timed out")

// result is one attempt's end as the loop sees it.
type result struct {
	route   string
	class   engine.Class
	resp    *http.Response // the upstream's answer; nil when there was none
	reached bool           // bytes of the request may have reached the target
	blocked *guard.Error   // admission refused the address dialled; the class is then Canceled
	// done ends the attempt's context, once resp's body is consumed or
	// dropped.
	done func()
}

// discard drops the attempt's answer.
func (res *result) discard() {
	if res.resp != nil {
		res.resp.Body.Close()
	}
	res.done()
}

// reqBody is the request body as each attempt sends it.
type reqBody struct {
	buf    []byte    // the whole body, when it fit in Config.RetryBody
	stream io.Reader // otherwise what was read so far, then the rest: one attempt only
}

func (b *reqBody) replayable() bool { return b.stream == nil }

// readBody buffers r's body up to RetryBody, so that a retry can resend it.
func (g *Gateway) readBody(r *http.Request) (*reqBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return &reqBody{}, nil
	}
	if r.ContentLength > g.cfg.RetryBody {
		return &reqBody{stream: r.Body}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, g.cfg.RetryBody+1))
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) > g.cfg.RetryBody {
		return &reqBody{stream: io.MultiReader(bytes.NewReader(buf), r.Body)}, nil
	}
	return &reqBody{buf: buf}, nil
}

// serveForward performs an absolute-form request, trying up to MaxAttempts
// routes, and answers with the last attempt's result.
func (g *Gateway) serveForward(w http.ResponseWriter, r *http.Request, s *settings, ctl control, rec *record) {
	if !g.admit(r.Context(), w, r.URL.Hostname()) {
		return
	}
	target, policy := s.targets.Resolve(r.URL.Hostname())
	release, ok := g.admitPace(w, r, s, target)
	if !ok {
		return
	}
	defer release()
	g.budget.request(g.cfg.Now())
	body, err := g.readBody(r)
	if err != nil {
		badRequest(w, "reading the request body: "+err.Error())
		return
	}
	g.noteOrigin(target, r.URL.Host)
	var signatures []string
	if policy != nil {
		signatures = policy.BlockSignatures
	}
	var tried []string
	var last *result // the failed attempt to answer with if no route takes the retry
	for {
		l, x, err := g.lease(r.Context(), s, ctl, target, tried)
		if err != nil {
			if last != nil {
				g.respond(w, rec, last, len(tried))
				return
			}
			acquireError(w, err)
			return
		}
		if last != nil {
			last.discard()
		}
		tried = append(tried, l.Route)
		res := g.attempt(r, l, x, body, signatures)
		if !g.retry(r.Method, ctl, body, &res, len(tried)) {
			g.respond(w, rec, &res, len(tried))
			return
		}
		last = &res
	}
}

// retry decides whether a failed attempt is tried again on another route
// (SPEC §2.4), in this order: the rule table says the class is worth
// another route; attempts are left; the request has no session (a
// session's exit never changes silently); the body can be sent again; the
// request is idempotent (RFC 9110 §9.2.2) or nothing of it can have reached
// the target; and the pool-wide budget has room.
func (g *Gateway) retry(method string, ctl control, body *reqBody, res *result, attempts int) bool {
	return g.engine.Config().Rules.Rule(res.class).Retry &&
		attempts < g.cfg.MaxAttempts &&
		ctl.session == "" &&
		body.replayable() &&
		(!res.reached || idempotent(method)) &&
		g.budget.allow(g.cfg.Now())
}

// idempotent reports whether method may be sent twice with the effect of
// once (RFC 9110 §9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// attempt carries r through the leased route and reports the outcome. The
// report is deferred so that it happens on every path, a panic included
// (then as Canceled: no evidence either way).
//
// Whether bytes may have reached the target is read from the connection:
// until the transport got a connection to the proxy (or, for SOCKS5 and
// Direct, the finished tunnel to the target), nothing of the request was
// written; failures there are *route.Error, which never left. Once it has
// one, any failure may have come after the request went out, so only an
// idempotent request is retried. A 407 answer is the proxy refusing before
// forwarding, so it never left either.
func (g *Gateway) attempt(r *http.Request, l engine.Lease, x *exit, body *reqBody, signatures []string) (res result) {
	outcome := engine.Outcome{Class: engine.Canceled}
	defer func() { g.report(l, outcome) }()

	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(g.cfg.AttemptTimeout, func() { cancel(errAttemptTimeout) })
	res = result{route: l.Route, done: func() { timer.Stop(); cancel(nil) }}
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	out := outbound(httptrace.WithClientTrace(ctx, trace), r, body)

	start := g.cfg.Now()
	resp, err := x.transport.RoundTrip(out)
	outcome.Latency = g.cfg.Now().Sub(start)
	if err == nil {
		res.resp = resp
		res.class, outcome.RetryAfter = route.ClassifyStatus(resp.StatusCode, resp.Header, g.cfg.Now())
		res.reached = resp.StatusCode != http.StatusProxyAuthRequired
		if res.class == engine.OK {
			err = checkSignatures(resp, signatures, &res.class)
		}
	}
	// A timer that already fired cut the attempt, whatever came back.
	if !timer.Stop() && err == nil {
		err = errAttemptTimeout
	}
	if err != nil {
		if res.resp != nil {
			res.resp.Body.Close()
			res.resp = nil
		}
		res.class, res.reached = classifyError(r.Context(), ctx, err, gotConn.Load(), x.route)
		if res.blocked = refusal(err); res.blocked != nil {
			// Admission's verdict, not the route's: no evidence, no retry.
			res.class, res.reached = engine.Canceled, false
		}
	}
	outcome.Class = res.class
	return res
}

// outbound is the request as it leaves through a route: hop-by-hop and
// control headers stripped, the body fresh for this attempt.
func outbound(ctx context.Context, r *http.Request, body *reqBody) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Close = false
	out.Trailer = nil
	stripHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // no Go-http-client: the client sent none
	}
	switch {
	case body.stream != nil:
		out.Body = io.NopCloser(body.stream)
	case len(body.buf) > 0:
		buf := body.buf
		out.Body = io.NopCloser(bytes.NewReader(buf))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		out.ContentLength = int64(len(buf))
	default:
		out.Body, out.GetBody, out.ContentLength = nil, nil, 0
	}
	return out
}

// checkSignatures searches the start of a 2xx text answer for one of the
// target's block signatures, turning the class into ContentInvalid on a
// match. The bytes read are put back in front of the body.
func checkSignatures(resp *http.Response, signatures []string, class *engine.Class) error {
	if len(signatures) == 0 || resp.StatusCode > 299 || !textual(resp.Header) {
		return nil
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, signatureWindow))
	if err != nil {
		return err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	for _, sig := range signatures {
		if sig != "" && bytes.Contains(head, []byte(sig)) {
			*class = engine.ContentInvalid
			return nil
		}
	}
	return nil
}

// textual reports whether a body is plain text or HTML as sent, the only
// kind searched for signatures (compressed bodies are not).
func textual(h http.Header) bool {
	if enc := h.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return false
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (strings.HasPrefix(mt, "text/") || mt == "application/xhtml+xml")
}

// classifyError maps a failed round trip to its class, and says whether
// bytes of the request may have reached the target (see attempt).
func classifyError(client, attempt context.Context, err error, gotConn bool, r *route.Route) (engine.Class, bool) {
	var re *route.Error
	switch {
	case client.Err() != nil:
		return engine.Canceled, gotConn
	case errors.Is(err, errAttemptTimeout) || context.Cause(attempt) == errAttemptTimeout:
		// Once the proxy link is up, the wait is the target's (a Direct
		// route has no proxy to blame).
		if gotConn || r.Scheme == route.Direct {
			return engine.TargetTimeout, gotConn
		}
		return engine.ProxyTimeout, false
	case errors.As(err, &re):
		return re.Class(), !re.NeverLeft()
	case !gotConn:
		return engine.ProxyConnectFailed, false
	case isTimeout(err):
		return engine.TargetTimeout, true
	}
	return engine.TargetReset, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// respond notes the attempt's result in rec, for the log, and answers.
func (g *Gateway) respond(w http.ResponseWriter, rec *record, res *result, attempts int) {
	rec.route, rec.class, rec.attempts = res.route, res.class, attempts
	g.answer(w, rec.method, res, attempts)
}

// answer sends the client the attempt's result: the upstream's answer, or
// a 502 naming the class when there is none to pass on. A proxy's 407 is
// about the route's credentials, not the client's, so it is never passed
// on as such.
func (g *Gateway) answer(w http.ResponseWriter, method string, res *result, attempts int) {
	defer res.done()
	g.observeRequest(method, res.class, attempts)
	h := w.Header()
	h.Set(headerRoute, res.route)
	h.Set(headerAttempts, strconv.Itoa(attempts))
	if res.blocked != nil {
		blockedDestination(w, res.blocked)
		return
	}
	resp := res.resp
	if resp == nil || resp.StatusCode == http.StatusProxyAuthRequired {
		if resp != nil {
			resp.Body.Close()
		}
		fail(w, http.StatusBadGateway, res.class.String(),
			"switchyard: "+res.class.String()+" through route "+res.route+" after "+strconv.Itoa(attempts)+" attempt(s)")
		return
	}
	defer resp.Body.Close()
	stripHop(resp.Header)
	for k, v := range resp.Header {
		h[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if resp.ContentLength >= 0 {
		io.Copy(w, resp.Body)
		return
	}
	// Unknown length (streams, server-sent events): pass each piece on as
	// it comes.
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

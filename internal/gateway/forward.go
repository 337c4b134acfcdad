package gateway

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/lookalike"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// signatureWindow is how much of an answer's body is searched for block
// signatures: captcha and ban pages say so early.
const signatureWindow = 16 << 10

// reqBody is the request body as each attempt sends it.
type reqBody struct {
	buf    []byte        // the whole body, when it fit in Config.MaxBodyBytes
	stream *clientStream // otherwise what was read so far, then the rest: one attempt only
}

func (b *reqBody) replayable() bool { return b.stream == nil }

// clientErr is why reading the client's streamed body broke off, or nil.
func (b *reqBody) clientErr() error {
	if b.stream == nil {
		return nil
	}
	if err := b.stream.err.Load(); err != nil {
		return *err
	}
	return nil
}

// clientStream is a body streamed from the client as the attempt sends it
// (the attempt's goroutine reads it). A read that fails is the
// client's doing, gone or too slow (the server's body deadline), never
// the route's: it is kept so the attempt is not judged by it.
type clientStream struct {
	r   io.Reader
	err atomic.Pointer[error]
}

func (c *clientStream) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

// noBody is the body of a request without one: read-only, shared.
var noBody = &reqBody{}

// readBody buffers r's body up to MaxBodyBytes, so that a retry can resend it.
func (g *Gateway) readBody(r *http.Request) (*reqBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return noBody, nil
	}
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return &reqBody{stream: &clientStream{r: r.Body}}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) > g.cfg.MaxBodyBytes {
		return &reqBody{stream: &clientStream{r: io.MultiReader(bytes.NewReader(buf), r.Body)}}, nil
	}
	return &reqBody{buf: buf}, nil
}

// serveForward performs an absolute-form request through the attempt loop
// and answers with its winner or, failing that, its last failure.
func (g *Gateway) serveForward(w http.ResponseWriter, r *http.Request, s *settings, ctl control, rec *record) {
	host, hostport, ok := g.admit(r.Context(), w, r.URL.Host, false)
	if !ok {
		return
	}
	target, policy := s.targets.Resolve(host)
	release, ok := g.admitPace(w, r, rec, s, target)
	if !ok {
		return
	}
	defer release()
	body, err := g.readBody(r)
	if err != nil {
		badRequest(w, "reading the request body: "+err.Error())
		return
	}
	j := &job{target: target, ctl: ctl, req: r, body: body, url: *r.URL, header: outboundHeader(r.Header)}
	// Addressed as admission read the target, in the URL and the Host
	// header: net/http would otherwise map a non-ASCII host itself, and
	// differently for the request line to an HTTP proxy (Punycode) than
	// for the dial (UTS-46).
	j.url.Host = hostport
	hedge := j.judgeBy(policy, g.lookalike)
	if protocol := upgradeTo(r.Header); protocol != "" {
		// Asked on a connection of its own, which becomes the client's at
		// the 101: hop-by-hop, so put back.
		j.upgrade = true
		j.header.Set("Connection", "Upgrade")
		j.header.Set("Upgrade", protocol)
	}
	// A body streamed once cannot be sent again; a session's bound exit
	// never changes silently (bound), and a session's first answer binds
	// it, so a session's request is never hedged; nor is an upgrade, each
	// attempt of which the site would take for a client.
	j.another = body.replayable()
	j.hedge = hedge && j.another && ctl.session == "" && route.Idempotent(r.Method) && !j.upgrade
	win, last, attempts, hedges, err := g.run(r.Context(), s, j)
	rec.waited = j.waited
	if answered := cmp.Or(win, last); answered != nil && answered.resp != nil {
		s.targets.NoteOrigin(target, hostport) // admitted, and a target answered there: probes go there
		// A client that leaves mid-answer ends the attempt, so that a body
		// the upstream stalls does not hold the lease, the connection and
		// this goroutine until the upstream gives up.
		defer context.AfterFunc(r.Context(), answered.done)()
	}
	switch {
	case win != nil:
		g.deliver(w, rec, win, attempts, hedges)
	case last != nil:
		if g.respond(w, rec, last, attempts, hedges) {
			panic(http.ErrAbortHandler)
		}
	default:
		acquireError(w, rec, err)
	}
}

// forward carries j's request through the leased route. The outcome of an
// answer is its status's (a 2xx with a block signature is content_invalid);
// of a failure, route.Classify's, from how far the Exit got and the cause
// of ctx's end, which also says whether bytes may have reached the target,
// so that only an idempotent request is retried then.
func (g *Gateway) forward(ctx context.Context, j *job, l engine.Lease, x *route.Exit) *outcome {
	o := &outcome{lease: l}
	start := g.cfg.Now()
	resp, err := x.RoundTrip(j.outbound(ctx), &o.progress)
	o.latency = g.cfg.Now().Sub(start)
	if err == nil {
		o.resp, o.reached = resp, true
		o.class, o.retryAfter = route.ClassifyStatus(resp.StatusCode, resp.Header, g.cfg.Now())
		err = j.judge(resp, l.Route, &o.class)
		if err == nil && j.fetch != nil {
			// The fetch API reads the whole answer within the attempt, so
			// that a body that breaks off is this route's failure, retried
			// elsewhere, and the validators can judge it.
			err = j.fetch.read(o)
		}
	}
	if ctx.Err() != nil {
		// The attempt was ended, whatever came back: its body is cut.
		err = context.Cause(ctx)
	}
	if err != nil {
		if o.resp != nil {
			o.resp.Body.Close()
			o.resp = nil
		}
		o.class, o.reached = route.Classify(err, &o.progress)
		if o.blocked = refusal(err); o.blocked != nil {
			// Admission's verdict, not the route's: no evidence, no retry.
			o.class, o.reached = engine.Canceled, false
		}
		if o.bodyErr = j.body.clientErr(); o.bodyErr != nil {
			// The client's body broke off: no evidence, and part of it may
			// have gone out.
			o.class, o.reached = engine.Canceled, true
		}
		if o.local = route.LocalReason(err); o.local != "" {
			// The gateway's own want: no evidence, nothing went out.
			o.latency = 0
			g.localFailure(o.local, l.Route, err)
		}
	}
	o.timeout = o.progress.Timeout()
	return o
}

// outboundHeader is h as a request leaves through a route: hop-by-hop and
// control headers stripped, and an empty User-Agent when the client sent
// none (none is written then). Made once per request and shared by its
// attempts, hedges included: nothing writes it after (route.Exit writes
// the route's Proxy-Authorization with the request, not into it).
func outboundHeader(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	stripHop(out)
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""}
	}
	return out
}

// outbound is j's request as one attempt sends it, in ctx: a shallow copy
// of the client's, addressed and with the headers as they leave
// (outboundHeader), the body fresh for this attempt.
func (j *job) outbound(ctx context.Context) *http.Request {
	out := j.req.WithContext(ctx)
	out.URL, out.Host, out.Header = &j.url, j.url.Host, j.header
	out.RequestURI = ""
	out.Close = false
	out.Trailer = nil
	switch body := j.body; {
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

// judgeBy takes the signatures of policy, the target's (nil: none), and
// the lookalike detector d unless policy turns it off, and reports whether
// its requests may be hedged.
func (j *job) judgeBy(policy *target.Policy, d *lookalike.Detector) (hedge bool) {
	if policy == nil {
		j.builtin, j.lookalike = true, d
		return true
	}
	j.signatures, j.builtin = policy.BlockSignatures, !policy.NoBuiltinSignatures
	if !policy.NoLookalike {
		j.lookalike = d
	}
	return !policy.NoHedge
}

// judge looks for a soft ban in an answer the rule table took for ok, a
// 5xx or another 4xx: a challenge or block page sent in place of the page
// (a built-in signature, unless the target turned them off, or one of
// the target's own) makes class ContentInvalid, evidence against the route
// at the target, whatever the status says (a Cloudflare challenge's 503 is
// not the site down, AWS WAF's 405 is not the client's mistake). Headers
// are checked first, on all three; then, for a 2xx or 5xx, the start of a
// text or HTML body, decoded, is searched (target.Signature.On5xx says
// which built-in marks count on a 5xx), and the bytes read are put back in
// front of the body; a body read to its end has its length recorded in
// resp.ContentLength, for answer to tell the client.
// An ok answer no signature marks is then judged, as route's, by the
// lookalike detector (lookalike.go).
func (j *job) judge(resp *http.Response, route string, class *engine.Class) error {
	if *class != engine.OK && *class != engine.Target5xx && *class != engine.ClientError {
		return nil
	}
	if _, ok := target.MatchBuiltin(resp.StatusCode, resp.Header, nil); ok && j.builtin {
		*class = engine.ContentInvalid
		return nil
	}
	if *class == engine.ClientError {
		return nil // a 4xx's page is the site's error page: only a vendor's header marks it
	}
	mt := mediaType(resp.Header)
	// The built-in marks are of HTML pages: an event stream or a plain
	// text download is not held back for its start to be read.
	builtin := j.builtin && (mt == "text/html" || mt == "application/xhtml+xml")
	look := j.lookalike != nil && *class == engine.OK && lookable(mt)
	if !builtin && !look && (len(j.signatures) == 0 || !textual(mt)) {
		return nil
	}
	raw, err := readPrefix(resp.Body, resp.ContentLength)
	if err != nil {
		return err
	}
	if len(raw) < signatureWindow && resp.ContentLength < 0 && resp.Body != http.NoBody {
		resp.ContentLength = int64(len(raw)) // the whole body: it ended before the window did
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(raw), resp.Body), resp.Body}
	head := decodedPrefix(resp.Header.Get("Content-Encoding"), raw, signatureWindow)
	if _, ok := target.MatchBuiltin(resp.StatusCode, nil, head); ok && builtin {
		*class = engine.ContentInvalid
		return nil
	}
	for _, sig := range j.signatures {
		if sig != "" && bytes.Contains(head, []byte(sig)) {
			*class = engine.ContentInvalid
			return nil
		}
	}
	if look && j.looksAlike(route, head) {
		*class = engine.ContentInvalid
	}
	return nil
}

// readPrefix reads r up to its end or signatureWindow bytes, whichever
// comes first, into a buffer of the size read: io.ReadAll grows its
// buffer from 512 bytes, a copy and an allocation at each step, on every
// answer judged. A body of known length is read into a buffer that size;
// one of unknown length (chunked) into a pooled window, then copied out,
// so that a short page does not keep a whole window until it is relayed.
func readPrefix(r io.Reader, size int64) ([]byte, error) {
	switch {
	case r == http.NoBody: // a HEAD's, whose length is the GET's
		return nil, nil
	case size >= 0:
		return readInto(r, make([]byte, min(size, signatureWindow)))
	}
	window := windows.Get().(*[signatureWindow]byte)
	defer windows.Put(window)
	buf, err := readInto(r, window[:])
	return bytes.Clone(buf), err
}

// windows are readPrefix's buffers for bodies of unknown length.
var windows = sync.Pool{New: func() any { return new([signatureWindow]byte) }}

// readInto reads r into buf until buf is full or r ends, and returns what
// it read; r's end (io.EOF) is no error, any other error is returned.
func readInto(r io.Reader, buf []byte) ([]byte, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err == io.EOF:
			return buf[:n], nil
		case err != nil:
			return buf[:n], err
		}
	}
	return buf, nil
}

// mediaType is an answer's media type without its parameters, lower
// case; "" when it has none. It runs on every answer: no allocation for
// the usual lower-case types (mime.ParseMediaType makes a map).
func mediaType(h http.Header) string {
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// textual reports whether media type mt is text or HTML (or unsaid), the
// kind a target's own signatures are searched in.
func textual(mt string) bool {
	return mt == "" || strings.HasPrefix(mt, "text/") || mt == "application/xhtml+xml"
}

// deliver answers with the winning attempt and reports it once its body
// has been relayed: a body that ends early (short of its Content-Length, a
// broken chunk, a reset) is the attempt's failure, target_reset, and the
// client's connection is cut so that it sees the truncation too. A body
// still streaming at half the engine's lease TTL is reported OK then, so a
// long download does not outlive its lease.
func (g *Gateway) deliver(w http.ResponseWriter, rec *record, win *outcome, attempts, hedges int) {
	long := time.AfterFunc(g.engine.Config().LeaseTTL/2, func() { g.reportWin(win, engine.OK) })
	broken := g.respond(w, rec, win, attempts, hedges)
	long.Stop()
	g.reportWin(win, win.class)
	if broken {
		panic(http.ErrAbortHandler) // the server closes the connection, unlogged
	}
}

// reportWin reports the winning attempt as class c, the first time only.
// It reads none of win's class, which answer may be changing.
func (g *Gateway) reportWin(win *outcome, c engine.Class) {
	if win.reported.CompareAndSwap(false, true) {
		g.reportAttempt(win, engine.Outcome{Class: c, Latency: win.latency, RetryAfter: win.retryAfter})
	}
}

// respond notes the attempt's outcome in rec, for the log, and answers. It
// reports whether the upstream's body broke off: the client's connection
// must then be cut (http.ErrAbortHandler), or it would take a truncated
// answer for a whole one.
func (g *Gateway) respond(w http.ResponseWriter, rec *record, o *outcome, attempts, hedges int) (broken bool) {
	if o.resp != nil { // a relayed answer: the client may judge it later
		w.Header().Set(headerAttempt, g.attemptToken(o.lease, g.subExitOf(o.lease, o.exit), rec.user, g.cfg.Now()))
	}
	broken = g.answer(w, rec.method, rec.start, o, attempts, hedges)
	rec.route, rec.class, rec.attempts, rec.hedges = o.lease.Route, o.class, attempts, hedges
	if o.resp != nil && o.resp.StatusCode == http.StatusSwitchingProtocols {
		rec.status = http.StatusSwitchingProtocols // a hijacked answer: w never saw it
	}
	return broken
}

// answer sends the client the attempt's outcome: the upstream's answer, or
// a 502 naming the class when there is none to pass on (a proxy's 407 is
// about the route's credentials, not the client's, and never reaches here
// as an answer: route.Exit.RoundTrip). A body that broke off turns the
// outcome into target_reset and is reported as broken.
func (g *Gateway) answer(w http.ResponseWriter, method string, start time.Time, o *outcome, attempts, hedges int) (broken bool) {
	defer o.done()
	defer func() { g.observeRequest(method, o.class, attempts, hedges, start) }()
	h := w.Header()
	h.Set(headerRoute, o.lease.Route)
	h.Set(headerAttempts, strconv.Itoa(attempts))
	if sub := subExitHeader(o); sub != "" {
		h.Set(headerSubExit, sub)
	}
	switch {
	case o.timedOut:
		fail(w, http.StatusGatewayTimeout, "request_timeout",
			"switchyard: request_timeout: no answer within "+g.cfg.RequestTimeout.String()+" (retry.request_timeout) after "+strconv.Itoa(attempts)+" attempt(s)")
		return false
	case o.blocked != nil:
		blockedDestination(w, o.blocked)
		return false
	case o.bodyErr != nil:
		// The rest of the body will not come: the connection is done
		// (the server would otherwise wait to read it off).
		h.Set("Connection", "close")
		badRequest(w, "reading the request body: "+o.bodyErr.Error())
		return false
	case o.local != "":
		localResources(w, o.local)
		return false
	}
	noAnswer := func() {
		fail(w, http.StatusBadGateway, o.class.String(),
			"switchyard: "+o.class.String()+" through route "+o.lease.Route+" after "+strconv.Itoa(attempts)+" attempt(s)")
	}
	resp := o.resp
	if resp == nil {
		noAnswer()
		return false
	}
	defer resp.Body.Close()
	protocol := resp.Header.Get("Upgrade")
	head := func() {
		stripHop(resp.Header)
		for k, v := range resp.Header {
			if !strings.HasPrefix(k, headerPrefix) { // a site's must not pass for ours
				h[k] = v
			}
		}
		if resp.ContentLength > 0 && h.Get("Content-Length") == "" {
			// A chunked page judge read whole goes out with its length, so
			// that the client has it all with its last byte, not once the
			// chunked ending follows after the request's log line: one
			// write fewer, and the answer complete sooner.
			h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		}
		// The class tells a relayed 403 (blocked) or soft ban
		// (content_invalid, every route tried having served one) from a
		// page.
		h[headerClass] = []string{o.class.String()}
	}
	if u, ok := resp.Body.(*route.Upgraded); ok {
		head()
		switchProtocols(w, u, protocol)
		return false
	}
	// The body's first piece is read before the head is written: a body
	// that breaks off before its first byte (an exit that sent a head and
	// died) is told the client as a 502 naming target_reset, where a cut
	// connection would leave it nothing to read. It delays nothing: the
	// head goes out with the first piece anyway (relay).
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	first, err := readSome(resp.Body, *bp)
	if first == 0 && err != io.EOF && !errors.Is(err, context.Canceled) {
		o.class = engine.TargetReset
		noAnswer()
		return false
	}
	head()
	w.WriteHeader(resp.StatusCode)
	n, err := relay(w, resp.Body, (*bp)[:first], err, *bp)
	g.charge(o.lease.Route, 0, n)
	if err != nil {
		o.class = engine.TargetReset
		return true
	}
	return false
}

// relayBuffers hold the buffers answers are copied through: a fresh 32 KB
// per response was most of what the gateway allocated.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies body to w, each piece passed on as it comes: a stream, a
// server-sent event or a slow page reaches the client as the upstream
// sends it, headers first, not once a buffer fills (a fast body's reads
// fill whole buffers, so this costs it no extra writes). It starts with
// first, already read, and err, what its read returned; then it reads
// body into buf. It returns the error that broke reading the body off,
// nil at its proper end; a client that stops taking it or leaves (its
// request's end cancels the attempt) is not the body's failure and ends
// the copy with nil. It returns the bytes read of body too.
func relay(w http.ResponseWriter, body io.Reader, first []byte, err error, buf []byte) (read int64, _ error) {
	rc := http.NewResponseController(w)
	piece := first
	for {
		if len(piece) > 0 {
			read += int64(len(piece))
			if _, werr := w.Write(piece); werr != nil {
				return read, nil
			}
			rc.Flush()
		}
		switch {
		case err == io.EOF, errors.Is(err, context.Canceled):
			return read, nil
		case err != nil:
			return read, err
		}
		var n int
		n, err = body.Read(buf)
		piece = buf[:n]
	}
}

// readSome reads into buf until a read returns bytes or an error: the
// first piece of a body, which the head waits for (Gateway.answer).
func readSome(r io.Reader, buf []byte) (int, error) {
	for {
		if n, err := r.Read(buf); n > 0 || err != nil {
			return n, err
		}
	}
}

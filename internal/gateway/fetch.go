package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
)

// The fetch API's way into the attempt loop (docs/design/009-fetch-api.md):
// a request given as data rather than as an HTTP request to the proxy,
// carried by the same loop as the forward proxy's (admission, pacing,
// labels, sessions, retries, hedging and the budgets alike), whose answer
// is read whole within each attempt, so that validators can judge it and a
// failing one is retried elsewhere, and whose every attempt is traced.

// FetchRequest is one request of the fetch API.
type FetchRequest struct {
	Method string // "" means GET
	URL    string // absolute http:// or https://
	Header http.Header
	Body   []byte // at most Config.MaxBodyBytes: every attempt sends it again
	// Timeout bounds all attempts together; 0 or more than
	// Config.RequestTimeout means Config.RequestTimeout.
	Timeout time.Duration
	// MaxAttempts caps the attempts, hedges included; 0 or more than
	// Config.MaxAttempts means Config.MaxAttempts.
	MaxAttempts int
	Session     string
	Labels      engine.Labels
	// Strict refuses the least-bad fallback: with no eligible route the
	// fetch fails with code no_eligible_route.
	Strict bool
	// Target overrides the target key routes are judged against; "" means
	// the one the target rules give the URL's host.
	Target     string
	Validators Validators
	// User and UserLabels are the authenticated caller (Authenticate),
	// whose labels the request cannot escape; "" for none.
	User       string
	UserLabels engine.Labels
}

// Validators judge an answer; one that fails makes its attempt
// content_invalid for its route and target, retried elsewhere within the
// budget. The zero value accepts any 2xx.
type Validators struct {
	// AcceptStatus lists the statuses that count as an answer, in place
	// of 2xx: a 404 listed is an answer, not a client_error.
	AcceptStatus []int
	// MustMatch and MustNotMatch search the decoded start of the body
	// (its first ValidateWindow bytes).
	MustMatch, MustNotMatch *regexp.Regexp
	MinBodyBytes            int64
	RequireHeader           string // a response header that must be present
}

// ValidateWindow is how much of a decoded body the regexp validators
// search: ban and captcha pages say so early, and a bound keeps a large
// body from costing a scan of all of it.
const ValidateWindow = 1 << 20

// FetchResult is what a fetch brought back: the answer passed on (a
// valid one, or else the last failure's, when one came back) and the
// trace of every attempt.
type FetchResult struct {
	Status    int // 0 when no answer came back
	Header    http.Header
	Body      []byte
	Truncated bool // the body was longer than Config.MaxFetchBody and is cut there
	RequestID string
	Attempts  []AttemptTrace
}

// AttemptTrace is one attempt of a fetch.
type AttemptTrace struct {
	ID      string             // the request id and the attempt's number: what Feedback names
	Route   string             // the route id, never credentials
	Target  string             // the target key the attempt was judged against
	Gens    engine.Generations // of the route's records when leased, for a late verdict (Gateway.Feedback)
	SubExit SubExit            // the gateway route's sub-exit it went through, for a late verdict
	Class   engine.Class
	Running bool // still in flight when the fetch returned (a hedge's loser): Class is not known yet
	Status  int  // 0 when no answer came back
	Latency time.Duration
	Bytes   int64         // body bytes read
	Start   time.Duration // from the fetch's start
	Hedge   bool          // started beside an attempt in flight
	Detail  string        // why a validator refused the answer; "" otherwise
}

// FetchError is why a fetch did not end with a valid answer. Code is one of
// bad_request, body_too_large, label_conflict, blocked_destination, paced,
// canceled, no_route, no_eligible_route (strict), busy, no_matching_route,
// session_restart_required, request_timeout, local_resources, or the
// last attempt's class.
type FetchError struct {
	Code       string
	Message    string
	RetryAfter time.Duration // when to ask again; 0 when unknown
}

func (e *FetchError) Error() string { return "switchyard: " + e.Code + ": " + e.Message }

// Fetch carries req through the attempt loop and returns its answer and
// trace. The error, a *FetchError, says why there is no valid answer; the
// result, never nil, holds the trace and any answer that came back.
func (g *Gateway) Fetch(ctx context.Context, req FetchRequest) (*FetchResult, error) {
	s := g.current.Load()
	start := g.cfg.Now()
	res := &FetchResult{RequestID: newRequestID()}
	rec := &record{method: req.Method, start: start, user: req.User, session: req.Session}
	defer g.logRequest(ctx, rec)
	j, release, err := g.fetchJob(ctx, s, &req, res.RequestID, start, rec)
	if err != nil {
		return res, err
	}
	defer release()
	win, last, attempts, hedges, err := g.run(ctx, s, j)
	rec.waited = j.waited
	res.Attempts = j.fetch.snapshot()
	answered := win
	if answered == nil {
		answered = last
	}
	if answered == nil {
		return res, fetchAcquireError(err, rec, req.Strict)
	}
	defer answered.discard()
	rec.route, rec.class, rec.attempts, rec.hedges = answered.lease.Route, answered.class, attempts, hedges
	g.observeRequest(rec.method, answered.class, attempts, hedges, start)
	if a := answered.fetched; a != nil && answered.resp != nil {
		s.targets.NoteOrigin(j.target, j.url.Host)
		stripHop(answered.resp.Header) // as the proxy passes answers on
		res.Status, res.Header, res.Body, res.Truncated = answered.resp.StatusCode, answered.resp.Header, a.body, a.truncated
		rec.status = res.Status
	}
	if win != nil {
		// The answer is all read: the winner is reported now.
		g.reportWin(win, engine.OK)
		return res, nil
	}
	switch {
	case last.timedOut:
		res.Status, res.Header, res.Body = 0, nil, nil
		return res, &FetchError{Code: "request_timeout", Message: "no valid answer within " + j.timeout.String() + " after " + strconv.Itoa(attempts) + " attempt(s)"}
	case last.blocked != nil:
		return res, &FetchError{Code: "blocked_destination", Message: last.blocked.Error()}
	case last.local != "":
		return res, &FetchError{Code: "local_resources", Message: "the gateway ran out of " + last.local, RetryAfter: localRetryAfter}
	case req.Strict && errors.Is(err, engine.ErrNoRoute):
		return res, &FetchError{Code: "no_eligible_route", Message: "strict: no eligible route left after " + last.class.String() + " through " + last.lease.Route}
	}
	return res, &FetchError{Code: last.class.String(), Message: "through route " + last.lease.Route + " after " + strconv.Itoa(attempts) + " attempt(s)"}
}

// fetchJob checks req as the forward proxy checks a client's request
// (URL, method, session, labels, admission, pacing) and makes its job.
// release ends the target's pacing slot once the fetch is done.
func (g *Gateway) fetchJob(ctx context.Context, s *settings, req *FetchRequest, id string, start time.Time, rec *record) (*job, func(), error) {
	bad := func(msg string) (*job, func(), error) {
		return nil, nil, &FetchError{Code: "bad_request", Message: msg}
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	rec.method = method
	if !validMethod(method) || method == http.MethodConnect {
		return bad(fmt.Sprintf("method %q: want an HTTP method such as GET or POST", clip(method, maxLogField)))
	}
	u, err := url.Parse(req.URL)
	switch {
	case err != nil:
		return bad("url: " + err.Error())
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("url: want an absolute http:// or https:// URL")
	case u.Host == "":
		return bad("url: no host")
	case u.User != nil:
		return bad("url: credentials in the URL are not sent; use an Authorization header")
	}
	rec.url = u.Scheme + "://" + u.Host + u.EscapedPath()
	if int64(len(req.Body)) > g.cfg.MaxBodyBytes {
		return nil, nil, &FetchError{Code: "body_too_large", Message: fmt.Sprintf("body of %d bytes: at most %d (retry.max_body_bytes), so that a retry can send it again", len(req.Body), g.cfg.MaxBodyBytes)}
	}
	if err := checkSession(req.Session); err != nil {
		return bad(err.Error())
	}
	ctl := control{session: req.Session, labels: req.Labels, strict: req.Strict}
	if req.User != "" {
		if ctl.labels, err = constrain(req.User, req.UserLabels, req.Labels); err != nil {
			return nil, nil, &FetchError{Code: "label_conflict", Message: err.Error()}
		}
	}
	host, hostport, err := admit.NormalizeHostPort(u.Host, false)
	if err == nil {
		err = g.check(ctx, host)
	}
	if err != nil {
		if e := refusal(err); e != nil && e.Malformed {
			return bad(e.Error())
		}
		return nil, nil, &FetchError{Code: "blocked_destination", Message: err.Error()}
	}
	target, policy := s.targets.Resolve(host)
	if req.Target != "" {
		if err := checkTargetKey(req.Target); err != nil {
			return bad(err.Error())
		}
		target = req.Target
	}
	rec.target = target
	release, err := g.pace(ctx, s, target)
	if err != nil {
		rec.paced, _ = errors.AsType[*pacing.Error](err)
		return nil, nil, fetchAcquireError(err, rec, req.Strict)
	}
	body := noBody
	if len(req.Body) > 0 {
		body = &reqBody{buf: req.Body}
	}
	j := &job{
		target: target, ctl: ctl, body: body, url: *u, header: outboundHeader(req.Header),
		req:     &http.Request{Method: method, URL: u, Header: http.Header{}},
		another: true,
		limit:   g.cfg.MaxAttempts,
		timeout: g.cfg.RequestTimeout,
		fetch:   &fetchJob{id: id, start: start, validators: req.Validators, maxBody: g.cfg.MaxFetchBody},
	}
	j.url.Host = hostport // as admission read it (serveForward says why)
	if req.MaxAttempts > 0 {
		j.limit = min(j.limit, req.MaxAttempts)
	}
	if req.Timeout > 0 {
		j.timeout = min(j.timeout, req.Timeout)
	}
	j.hedge = j.judgeBy(policy, g.lookalike) && ctl.session == "" && route.Idempotent(method)
	return j, release, nil
}

// validMethod reports whether m is an HTTP method token (RFC 9110 §9.1).
func validMethod(m string) bool {
	return m != "" && !strings.ContainsFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) })
}

// checkTargetKey keeps a target override to what a target key may hold:
// it names engine state and reaches the admin UI.
func checkTargetKey(k string) error {
	if len(k) > maxLogField {
		return fmt.Errorf("target longer than %d bytes", maxLogField)
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r)) {
			return fmt.Errorf("target %q: only letters, digits and _.:- are allowed", k)
		}
	}
	return nil
}

// fetchAcquireError is the *FetchError of a fetch for which no route
// could be leased, as acquireError answers a client of the proxy.
func fetchAcquireError(err error, rec *record, strict bool) error {
	if paced, ok := errors.AsType[*pacing.Error](err); ok {
		rec.paced = paced
		return &FetchError{Code: "paced", Message: "the target is paced (" + paced.Reason + ")", RetryAfter: paced.RetryAfter}
	}
	if pe, ok := errors.AsType[*engine.PacedError](err); ok {
		rec.paced = &pacing.Error{Reason: "learned", RetryAfter: pe.RetryAfter}
		return &FetchError{Code: "paced", Message: "the target's routes are at the rate it allows (learned)", RetryAfter: pe.RetryAfter}
	}
	e := &FetchError{Code: "no_route", Message: "no route can carry the request"}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e.Code, e.Message = "canceled", "the caller gave up while the request waited for its target's pacing or a route"
	case errors.Is(err, engine.ErrSessionRestartRequired):
		e.Code, e.Message = "session_restart_required", "the session's route can no longer carry it: start a new session"
	case errors.Is(err, engine.ErrBusy):
		e.Code, e.Message = "busy", "the routes drawn are at max_inflight"
	case errors.Is(err, engine.ErrNoMatch):
		e.Code, e.Message = "no_matching_route", "no route has the labels asked for"
	case strict && errors.Is(err, engine.ErrNoRoute):
		e.Code, e.Message = "no_eligible_route", "strict: no eligible route"
	case err != nil && !errors.Is(err, engine.ErrNoRoute):
		e.Message = err.Error()
	}
	if u, ok := errors.AsType[*unavailableError](err); ok {
		e.RetryAfter = max(time.Second, u.retryAfter)
	}
	return e
}

// newRequestID is a fetch's id: random, so that attempt ids cannot be
// guessed from one another's.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fetchJob is a fetch as the loop carries it: what reads and validates
// each attempt's answer, and the trace. Attempts run on their own
// goroutines, so the trace is guarded.
type fetchJob struct {
	// Immutable.
	id         string
	start      time.Time
	validators Validators
	maxBody    int64

	mu     sync.Mutex
	trace  []AttemptTrace // guarded by mu
	leases []uint64       // guarded by mu: the lease of each attempt of trace
}

// fetched is an attempt's answer as the fetch API read it.
type fetched struct {
	body      []byte
	truncated bool
	detail    string // the validator that refused it
}

// begin records an attempt leased at now, to go through sub.
func (f *fetchJob) begin(l engine.Lease, sub SubExit, now time.Time, hedge bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trace = append(f.trace, AttemptTrace{
		ID: f.id + "." + strconv.Itoa(len(f.trace)+1), Route: l.Route, Target: l.Target, Gens: l.Gens, SubExit: sub,
		Running: true, Start: now.Sub(f.start), Hedge: hedge,
	})
	f.leases = append(f.leases, l.ID)
}

// end records how an attempt ended.
func (f *fetchJob) end(o *outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.leases, o.lease.ID)
	if i < 0 {
		return
	}
	a := &f.trace[i]
	a.Running, a.Class, a.Latency = false, o.class, o.latency
	if o.resp != nil {
		a.Status = o.resp.StatusCode
	}
	if o.fetched != nil {
		a.Bytes, a.Detail = int64(len(o.fetched.body)), o.fetched.detail
	}
}

// snapshot is the trace as it stands.
func (f *fetchJob) snapshot() []AttemptTrace {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trace)
}

// read reads o's answer whole, up to maxBody, and judges it: an accepted
// status that is not 2xx is an answer (OK), and an answer a validator
// refuses is content_invalid. An error reading the body is the
// attempt's failure.
func (f *fetchJob) read(o *outcome) error {
	resp := o.resp
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBody+1))
	resp.Body.Close()
	if err != nil {
		return err
	}
	a := &fetched{body: body}
	if int64(len(body)) > f.maxBody {
		a.body, a.truncated = body[:f.maxBody], true
	}
	resp.Body = http.NoBody
	o.fetched = a
	v := &f.validators
	if len(v.AcceptStatus) > 0 {
		switch accepted := slices.Contains(v.AcceptStatus, resp.StatusCode); {
		case accepted && o.class != engine.OK && o.class != engine.ContentInvalid:
			o.class, o.retryAfter = engine.OK, 0
		case !accepted && o.class == engine.OK:
			o.class, a.detail = engine.ContentInvalid, "status "+strconv.Itoa(resp.StatusCode)+" not accepted"
		}
	}
	if o.class == engine.OK {
		if a.detail = v.check(resp.Header, a.body, a.truncated); a.detail != "" {
			o.class = engine.ContentInvalid
		}
	}
	return nil
}

// check returns why an answer with header h and body fails v, "" when it
// passes. truncated says body is only the start of it.
func (v *Validators) check(h http.Header, body []byte, truncated bool) string {
	if v.RequireHeader != "" && len(h.Values(v.RequireHeader)) == 0 {
		return "header " + v.RequireHeader + " missing"
	}
	if v.MinBodyBytes > 0 && !truncated && int64(len(body)) < v.MinBodyBytes {
		return fmt.Sprintf("body of %d bytes, under min_body_bytes %d", len(body), v.MinBodyBytes)
	}
	if v.MustMatch == nil && v.MustNotMatch == nil {
		return ""
	}
	prefix := decodedPrefix(h.Get("Content-Encoding"), body, ValidateWindow)
	if v.MustMatch != nil && !v.MustMatch.Match(prefix) {
		return "body does not match must_match"
	}
	if v.MustNotMatch != nil && v.MustNotMatch.Match(prefix) {
		return "body matches must_not_match"
	}
	return ""
}

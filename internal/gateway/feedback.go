package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Late verdicts on the proxy path (docs/design/012-mitm.md): every relayed
// answer names its attempt in X-Switchyard-Attempt, and a client that
// finds the page is a ban the gateway could not see (a captcha its
// parser recognised, an empty result list) sends that token back in
// X-Switchyard-Feedback on a later request: the attempt's route×target
// takes the verdict, as the fetch API's Feedback gives it, and so does
// the gateway route's sub-exit it went through (Gateway.Feedback). The
// token is the attempt itself, sealed with a key of this process, so the
// gateway keeps nothing per answer. A value that is no token is refused (400); a
// token that does not open (forged, altered, another user's, sealed
// before a restart) or is older than Config.FeedbackTTL is ignored, no
// evidence; and a verdict repeated after the pair moved on moves nothing
// again (engine.FeedbackAt).

const (
	headerAttempt  = "X-Switchyard-Attempt"
	headerFeedback = "X-Switchyard-Feedback"
	// feedbackMAC is how much of the HMAC-SHA256 a token carries: 128
	// bits, beyond forging.
	feedbackMAC = 16
)

// feedbackVerdicts are the classes a client may give: the target-scoped
// ones a parser can see and the gateway cannot.
var feedbackVerdicts = map[string]engine.Class{
	"content_invalid": engine.ContentInvalid,
	"blocked":         engine.Blocked,
}

// sealer seals attempt tokens with a key of this process. Every relayed
// answer carries a token, so it keeps the HMAC state and the buffers of
// the tokens it sealed for the next ones: made afresh, one token cost a
// dozen allocations.
type sealer struct {
	pool sync.Pool // of *sealing
}

// sealing is one token's HMAC and buffers.
type sealing struct {
	mac     hash.Hash
	body    []byte // the token's body, then its seal after it
	scratch []byte
	sum     [sha256.Size]byte
	out     []byte // the token, encoded
}

// newSealer is a sealer with a new random key.
func newSealer() *sealer {
	key := make([]byte, 32)
	rand.Read(key)
	return &sealer{pool: sync.Pool{New: func() any { return &sealing{mac: hmac.New(sha256.New, key)} }}}
}

func (s *sealer) get() *sealing  { return s.pool.Get().(*sealing) }
func (s *sealer) put(t *sealing) { s.pool.Put(t) }

// seal is the seal of body for user, valid until t's next use.
func (t *sealing) seal(body []byte, user string) []byte {
	t.mac.Reset()
	t.mac.Write(body)
	t.scratch = append(append(t.scratch[:0], 0), user...)
	t.mac.Write(t.scratch)
	return t.mac.Sum(t.sum[:0])[:feedbackMAC]
}

// attemptToken seals what a verdict needs of an attempt: its route, target
// and generations, the sub-exit it went through, when it was answered and
// for whom (user, "" without client auth), which is sealed but not
// carried: only that user's verdict opens it.
func (g *Gateway) attemptToken(l engine.Lease, sub SubExit, user string, at time.Time) string {
	t := g.tokens.get()
	defer g.tokens.put(t)
	b := t.body[:0]
	b = binary.AppendUvarint(b, uint64(at.Unix()))
	b = binary.AppendUvarint(b, uint64(l.Gens.Route))
	b = binary.AppendUvarint(b, uint64(l.Gens.Pair))
	if r := sub.ref; r.Serial != 0 {
		// A route id is never empty: a 0 where its length would be says a
		// sub-exit comes first, so a token through none is as it was.
		b = append(b, 0)
		b = binary.AppendUvarint(b, r.Serial)
		b = binary.AppendUvarint(b, uint64(len(r.Key)))
		b = append(b, r.Key...)
	}
	b = binary.AppendUvarint(b, uint64(len(l.Route)))
	b = append(b, l.Route...)
	b = append(b, l.Target...)
	b = append(b, t.seal(b, user)...)
	t.body = b
	t.out = base64.RawURLEncoding.AppendEncode(t.out[:0], b)
	return string(t.out)
}

// errFeedbackExpired is a token past Config.FeedbackTTL: no verdict, and
// no error the client need act on.
var errFeedbackExpired = errors.New("expired")

// applyFeedback takes the verdicts of r's X-Switchyard-Feedback values,
// "TOKEN" (content_invalid) or "TOKEN; class=blocked". It returns what
// to tell the client of them ("applied", "expired"), or an error naming
// the value that is not a verdict.
func (g *Gateway) applyFeedback(r *http.Request, user string) (string, error) {
	values := r.Header.Values(headerFeedback)
	if len(values) == 0 {
		return "", nil
	}
	result := "applied"
	now := g.cfg.Now()
	for _, v := range values {
		token, params, _ := strings.Cut(v, ";")
		class := engine.ContentInvalid
		if params = strings.TrimSpace(params); params != "" {
			name, _ := strings.CutPrefix(params, "class=")
			var ok bool
			if class, ok = feedbackVerdicts[name]; !ok {
				return "", fmt.Errorf("%s: want TOKEN or TOKEN; class=content_invalid|blocked", headerFeedback)
			}
		}
		a, err := g.openToken(strings.TrimSpace(token), user, now)
		switch {
		case errors.Is(err, errFeedbackExpired):
			result = "expired"
			continue
		case err != nil:
			return "", fmt.Errorf("%s: %v", headerFeedback, err)
		}
		if err := g.Feedback(now, a.route, a.target, a.gens, a.sub, engine.Outcome{Class: class}); err != nil {
			result = "expired" // the route left the list since
		}
	}
	return result, nil
}

// tokenAttempt is an attempt as its token names it.
type tokenAttempt struct {
	route, target string
	gens          engine.Generations
	sub           SubExit
}

var errNotToken = errors.New("not an attempt token")

// openToken checks a token's seal and age and returns the attempt.
func (g *Gateway) openToken(token, user string, now time.Time) (a tokenAttempt, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < feedbackMAC {
		return a, errNotToken
	}
	body, mac := b[:len(b)-feedbackMAC], b[len(b)-feedbackMAC:]
	t := g.tokens.get()
	sealed := hmac.Equal(mac, t.seal(body, user))
	g.tokens.put(t)
	if !sealed {
		// Forged, altered, another user's, or sealed before a restart
		// with another key: none can be told apart, and none is evidence.
		return a, errFeedbackExpired
	}
	r := tokenReader{rest: body}
	at, routeGen, pairGen, n := r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
	if n == 0 {
		a.sub.ref.Serial = r.uvarint()
		a.sub.ref.Key = r.string(r.uvarint())
		n = r.uvarint()
	}
	a.route = r.string(n)
	if r.bad {
		return tokenAttempt{}, errNotToken
	}
	if now.Sub(time.Unix(int64(at), 0)) > g.cfg.FeedbackTTL {
		return tokenAttempt{}, errFeedbackExpired
	}
	a.target, a.gens = string(r.rest), engine.Generations{Route: uint32(routeGen), Pair: uint32(pairGen)}
	return a, nil
}

// tokenReader reads a token's body; once a read falls short, bad is set
// and every read after it is zero.
type tokenReader struct {
	rest []byte
	bad  bool
}

func (r *tokenReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.rest)
	if r.bad || n <= 0 {
		r.bad = true
		return 0
	}
	r.rest = r.rest[n:]
	return v
}

func (r *tokenReader) string(n uint64) string {
	if r.bad || n > uint64(len(r.rest)) {
		r.bad = true
		return ""
	}
	s := string(r.rest[:n])
	r.rest = r.rest[n:]
	return s
}

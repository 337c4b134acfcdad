package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Late verdicts on the proxy path (docs/design/012-mitm.md): every relayed
// answer names its attempt in X-Switchyard-Attempt, and a client that
// finds the page is a ban the gateway could not see (a captcha its
// parser recognised, an empty result list) sends that token back in
// X-Switchyard-Feedback on a later request: the attempt's route×target
// takes the verdict, as the fetch API's Feedback gives it. The token is
// the attempt itself, sealed with a key of this process, so the gateway
// keeps nothing per answer. A value that is no token is refused (400); a
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

// newFeedbackKey is a process's sealing key.
func newFeedbackKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// attemptToken seals what a verdict needs of an attempt: its route, target
// and generations, when it was answered and for whom (user, "" without
// client auth), which is sealed but not carried: only that user's verdict
// opens it.
func (g *Gateway) attemptToken(l engine.Lease, user string, at time.Time) string {
	var b []byte
	b = binary.AppendUvarint(b, uint64(at.Unix()))
	b = binary.AppendUvarint(b, uint64(l.Gens.Route))
	b = binary.AppendUvarint(b, uint64(l.Gens.Pair))
	b = binary.AppendUvarint(b, uint64(len(l.Route)))
	b = append(b, l.Route...)
	b = append(b, l.Target...)
	b = append(b, g.seal(b, user)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (g *Gateway) seal(body []byte, user string) []byte {
	m := hmac.New(sha256.New, g.feedbackKey)
	m.Write(body)
	m.Write([]byte{0})
	m.Write([]byte(user))
	return m.Sum(nil)[:feedbackMAC]
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
		route, target, gens, err := g.openToken(strings.TrimSpace(token), user, now)
		switch {
		case errors.Is(err, errFeedbackExpired):
			result = "expired"
			continue
		case err != nil:
			return "", fmt.Errorf("%s: %v", headerFeedback, err)
		}
		if err := g.engine.FeedbackAt(now, route, target, gens, engine.Outcome{Class: class}); err != nil {
			result = "expired" // the route left the list since
		}
	}
	return result, nil
}

// openToken checks a token's seal and age and returns the attempt.
func (g *Gateway) openToken(token, user string, now time.Time) (route, target string, gens engine.Generations, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < feedbackMAC {
		return "", "", gens, errors.New("not an attempt token")
	}
	body, mac := b[:len(b)-feedbackMAC], b[len(b)-feedbackMAC:]
	if !hmac.Equal(mac, g.seal(body, user)) {
		// Forged, altered, another user's, or sealed before a restart
		// with another key: none can be told apart, and none is evidence.
		return "", "", gens, errFeedbackExpired
	}
	var fields [4]uint64
	rest := body
	for i := range fields {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return "", "", gens, errors.New("not an attempt token")
		}
		fields[i], rest = v, rest[n:]
	}
	if fields[3] > uint64(len(rest)) {
		return "", "", gens, errors.New("not an attempt token")
	}
	if at := time.Unix(int64(fields[0]), 0); now.Sub(at) > g.cfg.FeedbackTTL {
		return "", "", gens, errFeedbackExpired
	}
	gens = engine.Generations{Route: uint32(fields[1]), Pair: uint32(fields[2])}
	return string(rest[:fields[3]]), string(rest[fields[3]:]), gens, nil
}

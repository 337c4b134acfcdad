package route

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// ClassifyStatus maps a target's HTTP answer to an outcome class
// (docs/design/006-model.md) and, for 429 and 503, the Retry-After it asked
// for. A target's 407 is its own 4xx, client_error: a proxy's refusal of
// the route's credentials never reaches here (Exit.RoundTrip).
func ClassifyStatus(status int, h http.Header, now time.Time) (engine.Class, time.Duration) {
	switch {
	case status == http.StatusForbidden || status == http.StatusUnavailableForLegalReasons:
		return engine.Blocked, 0
	case status == http.StatusTooManyRequests:
		return engine.RateLimited, RetryAfter(h, now)
	case status >= 500:
		return engine.Target5xx, RetryAfter(h, now)
	case status >= 400:
		return engine.ClientError, 0
	}
	return engine.OK, 0
}

// RetryAfter parses a Retry-After header: seconds or an HTTP date; 0 when
// absent, malformed or in the past.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

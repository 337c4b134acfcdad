package gateway

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/engine"
)

// The per-request control headers (docs/design/008-gateway.md). They, and
// the proxy credentials that may carry the same parameters, never leave the
// gateway.
const (
	headerSession = "X-Switchyard-Session"
	headerLabels  = "X-Switchyard-Labels"
	// headerStrict, "1" (or the username's strict-1), asks for strict
	// mode: no least-bad fallback, and a session that must keep its exit
	// and IP, failing with session_restart_required once a provider
	// session behind it is gone (docs/design/014-provider-gateways.md).
	headerStrict = "X-Switchyard-Strict"
)

// maxSession bounds a session id, as a label value is bounded.
const maxSession = 128

// control is what a client asked of the gateway for one request.
type control struct {
	session string        // sticky session id; "" for none
	labels  engine.Labels // hard constraints on the route
	strict  bool          // no least-bad fallback (the fetch API's strict mode)
}

// parseControl reads the control headers and the proxy username. The
// username follows the convention of commercial rotating gateways, so that
// CONNECT clients, which cannot set headers inside the tunnel, can steer
// too: "anything-session-abc123-region-us" is the session abc123 and the
// label region=us. Its first token is the account: the user name when
// Config.Users is set (checked by authenticate), free otherwise.
func parseControl(h http.Header) (control, error) {
	var c control
	var fromUser []string
	if auth := h.Get("Proxy-Authorization"); auth != "" {
		user, err := proxyUser(auth)
		if err != nil {
			return c, err
		}
		c.session, c.strict, fromUser, err = parseUsername(user)
		if err != nil {
			return c, err
		}
	}
	if v := strings.TrimSpace(h.Get(headerStrict)); v != "" {
		strict, err := parseStrict(v)
		if err != nil {
			return c, errors.New(headerStrict + ": " + err.Error())
		}
		c.strict = c.strict || strict
	}
	if s := strings.TrimSpace(h.Get(headerSession)); s != "" {
		if c.session != "" && c.session != s {
			return c, errors.New("session given twice, differently, in " + headerSession + " and the proxy username")
		}
		c.session = s
	}
	if err := checkSession(c.session); err != nil {
		return c, err
	}
	// As for the session: a label given in both places with one value is
	// that label; with two values it is refused rather than one silently
	// winning. Within one place a key given twice is a duplicate.
	user, err := engine.ParseLabels(strings.Join(fromUser, ","))
	if err != nil {
		return c, fmt.Errorf("bad labels in the proxy username: %w", err)
	}
	header, err := engine.ParseLabels(strings.Join(h.Values(headerLabels), ","))
	if err != nil {
		return c, fmt.Errorf("bad labels: %w", err)
	}
	c.labels = user
	for _, l := range header {
		i := slices.IndexFunc(user, func(u engine.Label) bool { return u.Key == l.Key })
		switch {
		case i < 0:
			c.labels = append(c.labels, l)
		case user[i].Value != l.Value:
			return c, fmt.Errorf("label %s given twice, differently, in %s and the proxy username", l.Key, headerLabels)
		}
	}
	slices.SortFunc(c.labels, func(a, b engine.Label) int { return strings.Compare(a.Key, b.Key) })
	return c, nil
}

// proxyUser returns the username of a Basic Proxy-Authorization.
func proxyUser(auth string) (string, error) {
	scheme, encoded, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return "", errors.New("Proxy-Authorization: only the Basic scheme is accepted")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", errors.New("Proxy-Authorization: malformed Basic credentials")
	}
	user, _, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", errors.New("Proxy-Authorization: malformed Basic credentials")
	}
	return user, nil
}

// parseUsername splits "account-key-value-key-value…" into the session,
// strict mode (strict-1) and labels as "key=value" tokens.
func parseUsername(user string) (session string, strict bool, labels []string, err error) {
	tokens := strings.Split(user, "-")[1:]
	if len(tokens)%2 != 0 {
		return "", false, nil, fmt.Errorf("proxy username %q: parameters after the first token must be key-value pairs", user)
	}
	for i := 0; i < len(tokens); i += 2 {
		key, value := tokens[i], tokens[i+1]
		if key == "" || value == "" {
			return "", false, nil, fmt.Errorf("proxy username %q: empty parameter key or value", user)
		}
		switch key {
		case "session":
			if session != "" {
				return "", false, nil, fmt.Errorf("proxy username %q: session given twice", user)
			}
			session = value
		case "strict":
			if strict, err = parseStrict(value); err != nil {
				return "", false, nil, fmt.Errorf("proxy username %q: strict: %w", user, err)
			}
		default:
			labels = append(labels, key+"="+value)
		}
	}
	return session, strict, labels, nil
}

// parseStrict reads a strict mode flag: 1 or true, 0 or false.
func parseStrict(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, errors.New("want 1 or 0")
}

// checkSession keeps session ids to what a label value may hold: they
// reach the engine's events and the admin UI.
func checkSession(s string) error {
	if len(s) > maxSession {
		return fmt.Errorf("session id longer than %d bytes", maxSession)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r)) {
			return fmt.Errorf("session id %q: only letters, digits and _.:- are allowed", s)
		}
	}
	return nil
}

// hopHeaders are meaningful for one connection only and are never passed
// on (RFC 9110 §7.6.1), plus the proxy credentials of either leg.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// stripHop removes the hop-by-hop headers from h, those named by its
// Connection header included, and every X-Switchyard- header: the
// client's control headers must not leave, and an upstream must not pass
// for the gateway.
func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "X-Switchyard-") {
			delete(h, name)
		}
	}
}

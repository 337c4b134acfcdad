package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/engine"
)

// User is a client allowed through the gateway when Config.Users is set
// (SPEC §1.1).
type User struct {
	// Password is compared in constant time, as a SHA-256 digest.
	Password string
	// Labels are hard constraints this user cannot escape: they are merged
	// into every request's own labels, and a request label with the same
	// key and another value is refused (403) rather than overriding them.
	Labels engine.Labels
}

// account is a User as the gateway keeps it: only the password's digest.
type account struct {
	digest [sha256.Size]byte
	labels engine.Labels
}

// accounts are the configured users by name. Immutable after New.
type accounts struct {
	byName map[string]account
	// dummy is compared against when the name is unknown, so that an
	// unknown user costs the same as a wrong password and the timing does
	// not reveal which users exist.
	dummy [sha256.Size]byte
}

// newAccounts digests the passwords of users; nil users means no auth.
func newAccounts(users map[string]User) *accounts {
	if len(users) == 0 {
		return nil
	}
	a := &accounts{byName: make(map[string]account, len(users)), dummy: sha256.Sum256([]byte("switchyard: no such user"))}
	for name, u := range users {
		a.byName[name] = account{digest: sha256.Sum256([]byte(u.Password)), labels: u.Labels}
	}
	return a
}

// authenticate checks the Basic Proxy-Authorization in h. The user name is
// the username's first "-"-separated token, the rest being the control
// parameters parseControl reads. Both sides are digested before the
// constant-time comparison, so neither the password's length nor its
// prefix leaks through timing.
func (a *accounts) authenticate(h http.Header) (name string, labels engine.Labels, ok bool) {
	scheme, encoded, _ := strings.Cut(h.Get("Proxy-Authorization"), " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if !strings.EqualFold(scheme, "Basic") || err != nil {
		return "", nil, false
	}
	user, password, _ := strings.Cut(string(raw), ":")
	name, _, _ = strings.Cut(user, "-")
	acct, known := a.byName[name]
	want := acct.digest
	if !known {
		want = a.dummy
	}
	got := sha256.Sum256([]byte(password))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !known {
		return "", nil, false
	}
	return name, acct.labels, true
}

// challenge answers a request without valid client credentials.
func challenge(w http.ResponseWriter) {
	w.Header().Set("Proxy-Authenticate", `Basic realm="switchyard"`)
	fail(w, http.StatusProxyAuthRequired, "proxy_auth_required", "switchyard: proxy authentication required")
}

// constrain merges the user's labels into the request's, refusing a
// request label that contradicts one of the user's: silently dropping it
// would route the request somewhere the client did not ask for.
func constrain(user string, userLabels, request engine.Labels) (engine.Labels, error) {
	merged := slices.Clone(userLabels)
	for _, lb := range request {
		if v, ok := userLabels.Get(lb.Key); ok {
			if v != lb.Value {
				return nil, fmt.Errorf("label %s=%s conflicts with user %s's %s=%s", lb.Key, lb.Value, user, lb.Key, v)
			}
			continue
		}
		merged = append(merged, lb)
	}
	slices.SortFunc(merged, func(a, b engine.Label) int { return strings.Compare(a.Key, b.Key) })
	return merged, nil
}

package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"runtime"
	"sync/atomic"

	"golang.org/x/crypto/bcrypt"

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
	// PasswordHash, used when Password is "", is a bcrypt hash of it.
	PasswordHash string
	// Labels are hard constraints this user cannot escape: they are merged
	// into every request's own labels, and a request label with the same
	// key and another value is refused (403) rather than overriding them.
	Labels engine.Labels
}

// account is a User as the gateway keeps it: never the plain password.
type account struct {
	digest [sha256.Size]byte // of the plain password; unused with hash
	hash   []byte            // bcrypt; nil for a plain password
	// verified is the digest of the last password hash accepted: bcrypt
	// costs tens of milliseconds by design, so a client's password is run
	// through it once, not on every request.
	verified atomic.Pointer[[sha256.Size]byte]
	labels   engine.Labels
}

// accounts are the configured users by name. Immutable after newAccounts.
type accounts struct {
	byName map[string]*account
	// dummy stands in for an unknown user, so that an unknown user costs
	// the same as a wrong password (a bcrypt check when any user has a
	// hash) and the timing does not reveal which users exist.
	dummy account
	// hashing bounds the bcrypt checks running at once, so a flood of
	// wrong passwords queues instead of taking every core.
	hashing chan struct{}
}

// newAccounts digests the passwords of users; nil users means no auth.
func newAccounts(users map[string]User) *accounts {
	if len(users) == 0 {
		return nil
	}
	a := &accounts{byName: make(map[string]*account, len(users)), hashing: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
	a.dummy.digest = sha256.Sum256([]byte("switchyard: no such user"))
	for name, u := range users {
		acct := &account{labels: u.Labels}
		if u.Password == "" && u.PasswordHash != "" {
			acct.hash = []byte(u.PasswordHash)
			if a.dummy.hash == nil {
				a.dummy.hash = unguessableHash()
			}
		} else {
			acct.digest = sha256.Sum256([]byte(u.Password))
		}
		a.byName[name] = acct
	}
	return a
}

// unguessableHash is a bcrypt hash, at the usual cost, of a random password
// no client can know.
func unguessableHash() []byte {
	h, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), bcrypt.DefaultCost)
	if err != nil {
		panic("gateway: bcrypt: " + err.Error()) // only for passwords over 72 bytes
	}
	return h
}

// authenticate checks the Basic Proxy-Authorization in h. The user name is
// the username's first "-"-separated token, the rest being the control
// parameters parseControl reads. Plain passwords are digested before the
// constant-time comparison, so neither their length nor a prefix leaks
// through timing; hashed ones go through bcrypt, which compares in
// constant time itself.
func (a *accounts) authenticate(h http.Header) (name string, labels engine.Labels, ok bool) {
	scheme, encoded, _ := strings.Cut(h.Get("Proxy-Authorization"), " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if !strings.EqualFold(scheme, "Basic") || err != nil {
		return "", nil, false
	}
	user, password, _ := strings.Cut(string(raw), ":")
	name, _, _ = strings.Cut(user, "-")
	acct, known := a.byName[name]
	if !known {
		acct = &a.dummy
	}
	if !a.check(acct, password) || !known {
		return "", nil, false
	}
	return name, acct.labels, true
}

// check reports whether password is acct's.
func (a *accounts) check(acct *account, password string) bool {
	got := sha256.Sum256([]byte(password))
	if acct.hash == nil {
		return subtle.ConstantTimeCompare(got[:], acct.digest[:]) == 1
	}
	if v := acct.verified.Load(); v != nil && subtle.ConstantTimeCompare(got[:], v[:]) == 1 {
		return true
	}
	a.hashing <- struct{}{}
	err := bcrypt.CompareHashAndPassword(acct.hash, []byte(password))
	<-a.hashing
	if err != nil {
		return false
	}
	if acct != &a.dummy {
		acct.verified.Store(&got)
	}
	return true
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

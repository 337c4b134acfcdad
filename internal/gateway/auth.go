package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/engine"
)

// User is a client allowed through the gateway when Config.Users is set
// (docs/design/008-gateway.md).
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
	// verified is the digest of the last password accepted: bcrypt costs
	// tens of milliseconds by design, so a client's password is run
	// through it once, not on every request, and not again after a reload
	// that keeps the hash; and a right password, hashed or plain, skips
	// the client address's failure count.
	verified atomic.Pointer[[sha256.Size]byte]
	labels   engine.Labels
}

// accounts are the configured users by name. Immutable after newAccounts.
type accounts struct {
	byName map[string]*account
	// dummy stands in for an unknown user, so that an unknown user costs
	// the same as a wrong password (a bcrypt check when any user has a
	// hash) and the timing does not reveal which users exist.
	dummy  account
	checks *checks // shared with the accounts of earlier reloads
}

// Bounds on password checks, so that a flood of wrong passwords cannot
// queue bcrypt work without end and lock the users out.
const (
	// hashWaiting is how many bcrypt checks may wait per one running;
	// beyond, a client is answered 503 at once rather than queued, so
	// that a check waits at most hashWaiting+1 bcrypt runs.
	hashWaiting = 16
	// failureBurst wrong passwords from one client address are checked,
	// then one per failureEvery; beyond, the address is answered 429
	// without a check, right password or not, unless it is the one
	// verified last (cached). Unknown users count as wrong passwords.
	failureBurst = 4
	failureEvery = time.Second
	// maxFailureAddrs bounds the addresses whose failures are remembered.
	maxFailureAddrs = 10000
)

// checks admits password checks: bcrypt ones a few at a time, within a
// bounded queue, and each client address within its failures.
type checks struct {
	running  chan struct{}                     // bcrypt checks at once
	queued   chan struct{}                     // bcrypt checks running or waiting
	compare  func(hash, password []byte) error // bcrypt.CompareHashAndPassword; tests count the calls
	failures *failures
}

func newChecks(hashers int, now func() time.Time) *checks {
	return &checks{
		running:  make(chan struct{}, hashers),
		queued:   make(chan struct{}, hashers*(1+hashWaiting)),
		compare:  bcrypt.CompareHashAndPassword,
		failures: &failures{byAddr: make(map[netip.Prefix]*failureBucket), max: maxFailureAddrs, now: now},
	}
}

// newAccounts digests the passwords of users; nil users means no auth.
// From old, the accounts of the previous settings (nil for none), it keeps
// the checks' queue and failure counts, and the verified password of each
// user whose hash is unchanged. now is the clock of failure counts.
func newAccounts(users map[string]User, old *accounts, now func() time.Time) *accounts {
	if len(users) == 0 {
		return nil
	}
	a := &accounts{byName: make(map[string]*account, len(users))}
	var oldDummy []byte
	var oldNames map[string]*account
	if old != nil {
		a.checks, oldDummy, oldNames = old.checks, old.dummy.hash, old.byName
	} else {
		a.checks = newChecks(max(1, runtime.GOMAXPROCS(0)/2), now)
	}
	a.dummy.digest = sha256.Sum256([]byte("switchyard: no such user"))
	for name, u := range users {
		acct := &account{labels: u.Labels}
		if u.Password == "" && u.PasswordHash != "" {
			acct.hash = []byte(u.PasswordHash)
			if prev := oldNames[name]; prev != nil && bytes.Equal(prev.hash, acct.hash) {
				acct.verified.Store(prev.verified.Load())
			}
			if a.dummy.hash == nil {
				if a.dummy.hash = oldDummy; a.dummy.hash == nil {
					a.dummy.hash = unguessableHash()
				}
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

// Why verify refused a client, besides a *throttled.
var (
	errDenied = errors.New("wrong or missing credentials")
	errBusy   = errors.New("too many password checks waiting")
)

// throttled refuses a client address over its failures.
type throttled struct {
	retryAfter time.Duration // until the address may be checked again
}

func (*throttled) Error() string { return "too many wrong passwords from this address" }

// Why authenticate refused a client, as Observer.ObserveAuthRefusal and
// the metrics name it.
const (
	authDenied    = "denied"    // 407: wrong or missing credentials
	authThrottled = "throttled" // 429: the address is over its failures
	authBusy      = "busy"      // 503: too many checks waiting, or the client left while it waited
)

// authenticate checks r's credentials; when they do not pass it answers
// the client itself and says why it refused (authDenied, authThrottled or
// authBusy), "" when they pass.
func (a *accounts) authenticate(w http.ResponseWriter, r *http.Request) (name string, labels engine.Labels, refused string) {
	name, labels, err := a.verify(r.Context(), r.Header, r.RemoteAddr)
	var th *throttled
	switch {
	case err == nil:
		return name, labels, ""
	case errors.Is(err, errDenied):
		challenge(w)
		return "", nil, authDenied
	case errors.As(err, &th):
		w.Header().Set("Retry-After", strconv.Itoa(engine.RetryAfterSeconds(th.retryAfter)))
		fail(w, http.StatusTooManyRequests, "auth_throttled", "switchyard: "+th.Error()+"; retry later")
		return "", nil, authThrottled
	}
	w.Header().Set("Retry-After", "1")
	fail(w, http.StatusServiceUnavailable, "auth_busy", "switchyard: "+errBusy.Error()+"; retry later")
	return "", nil, authBusy
}

// verify checks the Basic Proxy-Authorization in h, from the client at
// remote. The user name is the username's first "-"-separated token, the
// rest being the control parameters parseControl reads. Plain passwords
// are digested before the constant-time comparison, so neither their
// length nor a prefix leaks through timing; hashed ones go through
// bcrypt, which compares in constant time itself. ctx ending gives up a
// check still waiting.
func (a *accounts) verify(ctx context.Context, h http.Header, remote string) (name string, labels engine.Labels, err error) {
	scheme, encoded, _ := strings.Cut(h.Get("Proxy-Authorization"), " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if !strings.EqualFold(scheme, "Basic") || err != nil {
		return "", nil, errDenied
	}
	user, password, _ := strings.Cut(string(raw), ":")
	return a.login(ctx, user, password, remote)
}

// login checks the password of user, whose first "-"-separated token is
// the user name, from the client at remote.
func (a *accounts) login(ctx context.Context, user, password, remote string) (name string, labels engine.Labels, err error) {
	name, _, _ = strings.Cut(user, "-")
	acct, known := a.byName[name]
	if !known {
		acct = &a.dummy
	}
	if err := a.check(ctx, acct, password, remote); err != nil {
		return "", nil, err
	}
	return name, acct.labels, nil
}

// AuthError is why Authenticate refused a client: Reason is "denied"
// (wrong or missing credentials), "throttled" (the address is over its
// failures; RetryAfter says when to ask again) or "busy" (too many checks
// waiting).
type AuthError struct {
	Reason     string
	RetryAfter time.Duration
}

func (e *AuthError) Error() string {
	switch e.Reason {
	case authThrottled:
		return "too many wrong passwords from this address; retry later"
	case authBusy:
		return errBusy.Error() + "; retry later"
	}
	return errDenied.Error()
}

// Authenticate checks a client's credentials against Config.Users as the
// proxy checks its Proxy-Authorization, throttling and all, for the other
// front doors (the fetch API): the user name and its labels, or an
// *AuthError, counted by the Observer. Without users every client passes,
// as "". remote is the client's "host:port".
func (g *Gateway) Authenticate(ctx context.Context, user, password, remote string) (name string, labels engine.Labels, err error) {
	a := g.current.Load().users
	if a == nil {
		return "", nil, nil
	}
	name, labels, err = a.login(ctx, user, password, remote)
	if err == nil {
		return name, labels, nil
	}
	e := &AuthError{Reason: authBusy, RetryAfter: time.Second}
	var th *throttled
	switch {
	case errors.Is(err, errDenied):
		e.Reason, e.RetryAfter = authDenied, 0
	case errors.As(err, &th):
		e.Reason, e.RetryAfter = authThrottled, th.retryAfter
	}
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveAuthRefusal(e.Reason)
	}
	return "", nil, e
}

// RequiresAuth reports whether clients must authenticate (Config.Users).
func (g *Gateway) RequiresAuth() bool { return g.current.Load().users != nil }

// check reports, as nil, whether password is acct's (never the dummy's);
// every check but the cached one is within the client address's failures.
func (a *accounts) check(ctx context.Context, acct *account, password, remote string) error {
	got := sha256.Sum256([]byte(password))
	if v := acct.verified.Load(); v != nil && subtle.ConstantTimeCompare(got[:], v[:]) == 1 {
		return nil
	}
	done, err := a.checks.failures.admit(clientKey(remote))
	if err != nil {
		return err
	}
	var matched bool
	if acct.hash == nil {
		matched = subtle.ConstantTimeCompare(got[:], acct.digest[:]) == 1
	} else if matched, err = a.checks.bcrypt(ctx, acct.hash, password); err != nil {
		done(false) // not checked: not a failure
		return err
	}
	matched = matched && acct != &a.dummy
	done(!matched)
	if !matched {
		return errDenied
	}
	acct.verified.Store(&got) // a plain password's too: a right one skips the failure count
	return nil
}

// bcrypt runs one bcrypt comparison when a slot frees up, or refuses with
// errBusy when the queue is full, or gives up when ctx ends first.
func (c *checks) bcrypt(ctx context.Context, hash []byte, password string) (bool, error) {
	select {
	case c.queued <- struct{}{}:
	default:
		return false, errBusy
	}
	defer func() { <-c.queued }()
	select {
	case c.running <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-c.running }()
	if err := ctx.Err(); err != nil { // a slot and the end came together
		return false, err
	}
	return c.compare(hash, []byte(password)) == nil, nil
}

// failures counts the wrong passwords of each client address, in a token
// bucket of failureBurst refilled one per failureEvery.
type failures struct {
	mu     sync.Mutex
	byAddr map[netip.Prefix]*failureBucket // guarded by mu; at most max
	max    int
	now    func() time.Time
}

type failureBucket struct {
	lim     *rate.Limiter // guarded by failures.mu, so that pending and it agree
	pending int           // checks admitted and not done
}

// admit lets a check from the address key run if its bucket holds a token
// for it and for each check in flight, which may all fail; done, called
// once the check ran (or did not), takes a token for a failure.
func (f *failures) admit(key netip.Prefix) (done func(failed bool), err error) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.byAddr[key]
	if b == nil {
		f.makeRoom(now)
		b = &failureBucket{lim: rate.NewLimiter(rate.Every(failureEvery), failureBurst)}
		f.byAddr[key] = b
	}
	if short := float64(b.pending+1) - b.lim.TokensAt(now); short > 0 {
		return nil, &throttled{retryAfter: time.Duration(short * float64(failureEvery))}
	}
	b.pending++
	return func(failed bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		b.pending--
		if failed {
			b.lim.ReserveN(f.now(), 1) // may go below zero: a longer wait
		}
	}, nil
}

// makeRoom keeps the table under max: it forgets the addresses whose
// failures are all forgiven (a full bucket is as good as a new one), then,
// if that was not enough (a flood from many addresses), arbitrary ones
// down to 7/8 of max, so that the sweep does not run at every address.
// The caller holds f.mu.
func (f *failures) makeRoom(now time.Time) {
	if len(f.byAddr) < f.max {
		return
	}
	for k, b := range f.byAddr {
		if b.pending == 0 && b.lim.TokensAt(now) >= failureBurst {
			delete(f.byAddr, k)
		}
	}
	for k := range f.byAddr {
		if len(f.byAddr) < f.max-f.max/8 {
			return
		}
		delete(f.byAddr, k)
	}
}

// clientKey is where failures are counted for a client at remote
// ("host:port"): its address, or its /64 for IPv6, which one site usually
// holds whole. Addresses that are not IP share the zero key.
func clientKey(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
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

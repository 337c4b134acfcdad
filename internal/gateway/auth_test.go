package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// basic is a Proxy-Authorization value.
func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// Users are enforced on absolute-form requests and CONNECT alike; a
// refused client leases nothing, and a user's labels bind its requests.
func TestClientAuth(t *testing.T) {
	users := map[string]User{
		"alice": {Password: "alicePw1", Labels: engine.Labels{{Key: "region", Value: "us"}}},
		"bob":   {Password: "b:o:b"}, // ':' after the first belongs to the password
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc       string
			users      map[string]User
			auth       string // Proxy-Authorization; "" for none
			labels     string // X-Switchyard-Labels
			connect    bool
			wantStatus int
			wantRoute  int // -1: any
		}{
			{desc: "no users, no header", wantStatus: 200, wantRoute: -1},
			{desc: "no users, any password", auth: basic("acct-session-s1", "whatever"), wantStatus: 200, wantRoute: -1},
			{desc: "right password", users: users, auth: basic("bob", "b:o:b"), wantStatus: 200, wantRoute: -1},
			{desc: "wrong password", users: users, auth: basic("bob", "b:o"), wantStatus: 407},
			{desc: "unknown user", users: users, auth: basic("carol", "alicePw1"), wantStatus: 407},
			{desc: "missing header", users: users, wantStatus: 407},
			{desc: "not Basic", users: users, auth: "Bearer alicePw1", wantStatus: 407},
			{desc: "user labels bind", users: users, auth: basic("alice", "alicePw1"), wantStatus: 200, wantRoute: 0},
			{desc: "same label again", users: users, auth: basic("alice-region-us", "alicePw1"), wantStatus: 200, wantRoute: 0},
			{desc: "user labels with a session", users: users, auth: basic("alice-session-s9", "alicePw1"), wantStatus: 200, wantRoute: 0},
			{desc: "conflicting username label", users: users, auth: basic("alice-region-de", "alicePw1"), wantStatus: 403},
			{desc: "conflicting header label", users: users, auth: basic("alice", "alicePw1"), labels: "region=de", wantStatus: 403},
			{desc: "unconstrained user picks", users: users, auth: basic("bob-region-de", "b:o:b"), wantStatus: 200, wantRoute: 1},
			{desc: "CONNECT with session params", users: users, auth: basic("alice-session-abc-region-us", "alicePw1"), connect: true, wantStatus: 200, wantRoute: 0},
			{desc: "CONNECT wrong password", users: users, auth: basic("alice-session-abc", "nope"), connect: true, wantStatus: 407},
			{desc: "CONNECT missing header", users: users, connect: true, wantStatus: 407},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				us, de := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
				v := newEnv(t, Config{Users: tc.users}, proxyLine(us, "region=us"), proxyLine(de, "region=de"))
				for i := range 4 { // round-robin would alternate routes if labels did not bind
					head := ""
					if tc.auth != "" {
						head += "Proxy-Authorization: " + tc.auth + "\r\n"
					}
					if tc.labels != "" {
						head += headerLabels + ": " + tc.labels + "\r\n"
					}
					var resp *http.Response
					if tc.connect {
						resp = raw(t, v.url.Host, "CONNECT "+tg.Listener.Addr().String()+" HTTP/1.1\r\nHost: "+tg.Listener.Addr().String()+"\r\n"+head+"\r\n")
					} else {
						resp = raw(t, v.url.Host, "GET "+tg.URL+"/ HTTP/1.1\r\nHost: "+tg.Listener.Addr().String()+"\r\nConnection: close\r\n"+head+"\r\n")
					}
					var body []byte
					if !tc.connect || resp.StatusCode != 200 {
						body, _ = io.ReadAll(resp.Body)
					}
					resp.Body.Close()
					if resp.StatusCode != tc.wantStatus {
						t.Fatalf("request %d: %d (%s), want %d", i, resp.StatusCode, body, tc.wantStatus)
					}
					switch tc.wantStatus {
					case 407:
						if got := resp.Header.Get("Proxy-Authenticate"); got != `Basic realm="switchyard"` {
							t.Errorf("Proxy-Authenticate %q", got)
						}
					case 200:
						if got := resp.Header.Get(headerRoute); tc.wantRoute >= 0 && got != v.id(tc.wantRoute) {
							t.Fatalf("request %d went through %q, want %s", i, got, v.id(tc.wantRoute))
						}
						continue
					}
					if strings.Count(string(body), "\n") != 1 {
						t.Errorf("body %q is not one line", body)
					}
					if n := us.Requests() + de.Requests() + tg.Hits(); n != 0 {
						t.Fatalf("a refused request went out (%d)", n)
					}
					if st, _ := v.e.Route(v.id(0)); len(st.Targets) != 0 {
						t.Fatalf("a refused request was counted: %+v", st.Targets)
					}
					return
				}
			})
		}
	})
}

// TestConstrain covers the label merge on its own, conflicts included.
func TestConstrain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, user, request, want string
		wantErr                   bool
	}{
		{desc: "no user labels", request: "region=de", want: "region=de"},
		{desc: "no request labels", user: "region=us", want: "region=us"},
		{desc: "merged and sorted", user: "region=us", request: "provider=acme", want: "provider=acme region=us"},
		{desc: "repeated", user: "region=us", request: "region=us", want: "region=us"},
		{desc: "conflict", user: "region=us", request: "region=de", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			u, _ := engine.ParseLabels(tc.user)
			r, _ := engine.ParseLabels(tc.request)
			got, err := constrain("alice", u, r)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "region=de") {
					t.Fatalf("err %v, want a conflict naming region=de", err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Request logs name the route, class and status of every request, and
// never a credential (the client's or the route's, plain or base64) nor a
// query string; nor does the X-Switchyard-Route of the answers.
func TestRequestLogHasNoSecrets(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc      string
			handler   func(io.Writer) slog.Handler
			wantClass string
		}{
			{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }, "class=ok"},
			{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) }, `"class":"ok"`},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(int, http.ResponseWriter, *http.Request) {})
				p := routetest.NewProxy(t, routetest.Behavior{User: "R0uteUser", Password: "R0utePw"})
				out := &logtest.Buffer{}
				v := newEnv(t, Config{Users: map[string]User{"alice": {Password: "alicePw1"}}, Log: slog.New(tc.handler(out))}, proxyLine(p, ""))
				addr := tg.Listener.Addr().String()
				var routes strings.Builder // X-Switchyard-Route of every answer
				for _, req := range []string{
					"GET " + tg.URL + "/search?q=x&token=T0kenSecret HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\nProxy-Authorization: " + basic("alice-session-s1", "alicePw1") + "\r\n\r\n",
					"GET " + tg.URL + "/ HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\nProxy-Authorization: " + basic("alice", "Wr0ngPw") + "\r\n\r\n",
					"CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\nProxy-Authorization: " + basic("alice-session-s2", "alicePw1") + "\r\n\r\n",
				} {
					resp := raw(t, v.url.Host, req)
					if resp.StatusCode != 200 && resp.StatusCode != 407 {
						t.Fatalf("status %d", resp.StatusCode)
					}
					routes.WriteString(resp.Header.Get(headerRoute) + "\n")
				}
				// Lines are written once the answer is out: wait, bounded.
				for deadline := time.Now().Add(5 * time.Second); strings.Count(out.String(), "\n") < 3; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("want 3 lines, got:\n%s", out)
					}
				}
				log := out.String()
				for _, secret := range []string{
					"alicePw1", "Wr0ngPw", "R0uteUser", "R0utePw", "T0kenSecret", "token=",
					base64.StdEncoding.EncodeToString([]byte("alice-session-s1:alicePw1")),
					base64.StdEncoding.EncodeToString([]byte("alice:Wr0ngPw")),
					base64.StdEncoding.EncodeToString([]byte("R0uteUser:R0utePw")),
				} {
					if strings.Contains(log, secret) {
						t.Errorf("the log holds %q:\n%s", secret, log)
					}
					if strings.Contains(routes.String(), secret) {
						t.Errorf("X-Switchyard-Route holds %q:\n%s", secret, routes.String())
					}
				}
				for _, want := range []string{v.id(0), tc.wantClass, "200", "407", "s1", "s2", "CONNECT", "/search", "alice"} {
					if !strings.Contains(log, want) {
						t.Errorf("the log lacks %q:\n%s", want, log)
					}
				}
				if !strings.Contains(routes.String(), v.id(0)) {
					t.Errorf("no answer names the route:\n%s", routes.String())
				}
			})
		}
	})
}

// Hashed passwords go through bcrypt once per password, then the digest
// cache; unknown users and wrong passwords are refused alike.
func TestHashedPasswords(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := newAccounts(map[string]User{
		"alice": {PasswordHash: string(hash), Labels: engine.Labels{{Key: "provider", Value: "acme"}}},
		"bob":   {Password: "plain"},
	}, nil, time.Now)
	tests := []struct {
		desc, user, password string
		want                 bool
	}{
		{"right hashed password", "alice-session-1", "correct horse", true},
		{"again, from the cache", "alice", "correct horse", true},
		{"wrong hashed password", "alice", "correct horse!", false},
		{"the hash itself", "alice", string(hash), false},
		{"plain user beside hashed ones", "bob", "plain", true},
		{"unknown user", "carol", "correct horse", false},
	}
	for _, tc := range tests {
		h := http.Header{"Proxy-Authorization": {basic(tc.user, tc.password)}}
		name, labels, err := a.verify(context.Background(), h, "192.0.2.1:1234")
		if ok := err == nil; ok != tc.want {
			t.Errorf("%s: %v, want ok %v", tc.desc, err, tc.want)
		}
		if err == nil && name == "alice" && labels.String() != "provider=acme" {
			t.Errorf("%s: labels %v", tc.desc, labels)
		}
	}
	if a.byName["alice"].verified.Load() == nil {
		t.Error("a verified password was not cached")
	}
	if a.dummy.hash == nil {
		t.Error("unknown users skip bcrypt while some users have hashes: their timing tells them apart")
	}
}

// clock is a settable clock for failure counts.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeBcrypt stands in for bcrypt: it records the passwords compared, in
// order, and holds each comparison until open is closed. right is alice's
// password.
type fakeBcrypt struct {
	mu       sync.Mutex
	compared []string
	entered  chan struct{} // a token per comparison started
	open     chan struct{}
}

const right = "correct horse"

func (f *fakeBcrypt) compare(_, password []byte) error {
	f.mu.Lock()
	f.compared = append(f.compared, string(password))
	f.mu.Unlock()
	f.entered <- struct{}{}
	<-f.open
	if string(password) != right {
		return bcrypt.ErrMismatchedHashAndPassword
	}
	return nil
}

func (f *fakeBcrypt) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.compared)
}

// testAccounts are alice (hashed, right is her password) and bob (plain
// "plain"), checked one bcrypt at a time by a fakeBcrypt, held until the
// caller closes its open unless open is true. They follow accounts whose
// checks and dummy hash they keep, as after a reload: no bcrypt runs.
func testAccounts(t *testing.T, c *clock, open bool) (*accounts, *fakeBcrypt) {
	t.Helper()
	fb := &fakeBcrypt{entered: make(chan struct{}, 1000), open: make(chan struct{})}
	if open {
		close(fb.open)
	}
	old := &accounts{checks: newChecks(1, c.now), dummy: account{hash: []byte("$2a$04$unused")}}
	old.checks.compare = fb.compare
	return newAccounts(map[string]User{"alice": {PasswordHash: "$2a$04$unused"}, "bob": {Password: "plain"}}, old, c.now), fb
}

// verifyAs checks user:password as sent from remote.
func verifyAs(a *accounts, ctx context.Context, user, password, remote string) error {
	_, _, err := a.verify(ctx, http.Header{"Proxy-Authorization": {basic(user, password)}}, remote)
	return err
}

// within waits for one error from errs, failing the test rather than
// hanging when none comes (as when a check that should be refused at once
// waits for a slot instead).
func within(t *testing.T, errs <-chan error) error {
	t.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a check neither ran nor was refused")
		return nil
	}
}

// A flood of wrong passwords from one address runs failureBurst bcrypt
// checks, the rest refused unchecked: a user from elsewhere waits behind
// at most those, whatever the flood's size (counted in bcrypt checks, not
// timed).
func TestFloodDoesNotDelayOtherUsers(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	a, fb := testAccounts(t, c, false)
	const flood = 500
	errs := make(chan error, flood)
	for range flood {
		go func() { errs <- verifyAs(a, context.Background(), "alice", "guess", "198.51.100.7:40000") }()
	}
	for range flood - failureBurst {
		if err := within(t, errs); !errors.As(err, new(*throttled)) {
			t.Fatalf("a wrong password beyond the address's failures: %v, want throttled", err)
		}
	}
	user := make(chan error, 1)
	go func() { user <- verifyAs(a, context.Background(), "alice", right, "203.0.113.9:50000") }()
	close(fb.open)
	if err := within(t, user); err != nil {
		t.Fatalf("the user: %v", err)
	}
	for range failureBurst {
		if err := within(t, errs); !errors.Is(err, errDenied) {
			t.Fatalf("a wrong password checked: %v, want denied", err)
		}
	}
	calls := fb.calls()
	if len(calls) != failureBurst+1 || slices.Index(calls, right) < 0 {
		t.Errorf("bcrypt ran %d times (%q), want the flood's %d and the user's", len(calls), calls, failureBurst)
	}
}

// Beyond the checks that may wait, a client is refused at once, not
// queued.
func TestCheckQueueIsBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	a, fb := testAccounts(t, c, false)
	places, extra := cap(a.checks.queued), 10
	errs := make(chan error, places+extra)
	for i := range places + extra {
		go func() { errs <- verifyAs(a, context.Background(), "alice", "guess", fmt.Sprintf("198.51.100.%d:1", i)) }()
	}
	for range extra {
		if err := within(t, errs); !errors.Is(err, errBusy) {
			t.Fatalf("with the queue full: %v, want busy", err)
		}
	}
	close(fb.open)
	for range places {
		if err := within(t, errs); !errors.Is(err, errDenied) {
			t.Fatalf("a queued check: %v, want denied", err)
		}
	}
	if n := len(fb.calls()); n != places {
		t.Errorf("bcrypt ran %d times, want %d", n, places)
	}
}

// A check whose client left gives up its place: it is neither run nor
// counted as a failure.
func TestDepartedClientsGiveUp(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	a, fb := testAccounts(t, c, false)
	first := make(chan error, 1)
	go func() { first <- verifyAs(a, context.Background(), "alice", "guess", "198.51.100.1:1") }()
	<-fb.entered // holds the only slot
	const waiters = 5
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() { errs <- verifyAs(a, ctx, "alice", "guess", fmt.Sprintf("198.51.100.%d:1", 2+i)) }()
	}
	cancel()
	for range waiters {
		if err := within(t, errs); !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter whose client left: %v, want canceled", err)
		}
	}
	close(fb.open)
	if err := within(t, first); !errors.Is(err, errDenied) {
		t.Fatalf("the check running: %v", err)
	}
	if n := len(fb.calls()); n != 1 {
		t.Errorf("bcrypt ran %d times, want once", n)
	}
	for i := range waiters {
		b := a.checks.failures.byAddr[clientKey(fmt.Sprintf("198.51.100.%d:1", 2+i))]
		if b == nil || b.pending != 0 || b.lim.TokensAt(c.now()) != failureBurst {
			t.Errorf("a departed client's address: %+v, want no failure and nothing pending", b)
		}
	}
}

// Each address gets failureBurst wrong passwords, then one per
// failureEvery; over them even its right password is not checked, unless
// it is the one cached. IPv6 addresses count by /64.
func TestFailuresPerAddress(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	a, fb := testAccounts(t, c, true)
	const (
		addrA  = "198.51.100.7:1000"
		addrA2 = "198.51.100.7:2000" // same host, another port
		addrB  = "203.0.113.9:1000"
		v6     = "[2001:db8:0:1::1]:1000"
		v6peer = "[2001:db8:0:1:ffff::2]:1000" // same /64
		v6far  = "[2001:db8:0:2::1]:1000"
	)
	steps := []struct {
		desc           string
		remote         string
		user, password string
		times          int
		advance        time.Duration // before the step
		want           string        // ok, denied or throttled
		wantCalls      int           // bcrypt comparisons so far
	}{
		{"wrong passwords up to the burst", addrA, "alice", "guess", failureBurst, 0, "denied", failureBurst},
		{"one more", addrA2, "alice", "guess", 1, 0, "throttled", failureBurst},
		{"the right one, unchecked", addrA, "alice", right, 1, 0, "throttled", failureBurst},
		{"a plain user, unchecked", addrA, "bob", "plain", 1, 0, "throttled", failureBurst},
		{"an unknown user", addrA, "carol", "guess", 1, 0, "throttled", failureBurst},
		{"the right one from elsewhere", addrB, "alice", right, 1, 0, "ok", failureBurst + 1},
		{"the right one, cached", addrA, "alice", right, 1, 0, "ok", failureBurst + 1},
		{"a failure forgiven", addrA, "alice", "guess", 1, failureEvery, "denied", failureBurst + 2},
		{"and only one", addrA, "alice", "guess", 1, 0, "throttled", failureBurst + 2},
		{"unknown users count", v6, "carol", "guess", failureBurst, 0, "denied", 2*failureBurst + 2},
		{"the same /64", v6peer, "bob", "plain", 1, 0, "throttled", 2*failureBurst + 2},
		{"another /64", v6far, "bob", "plain", 1, 0, "ok", 2*failureBurst + 2},
		{"a plain password once right, cached", v6peer, "bob", "plain", 1, 0, "ok", 2*failureBurst + 2},
	}
	for _, st := range steps {
		c.advance(st.advance)
		for i := range st.times {
			got := "ok"
			switch err := verifyAs(a, context.Background(), st.user, st.password, st.remote); {
			case errors.As(err, new(*throttled)):
				got = "throttled"
			case errors.Is(err, errDenied):
				got = "denied"
			case err != nil:
				got = err.Error()
			}
			if got != st.want {
				t.Fatalf("%s, #%d: %s, want %s", st.desc, i+1, got, st.want)
			}
		}
		if n := len(fb.calls()); n != st.wantCalls {
			t.Fatalf("%s: %d bcrypt comparisons, want %d", st.desc, n, st.wantCalls)
		}
	}
}

// The failure table stays within its bound under addresses without end,
// forgetting forgiven addresses before one still over its failures.
func TestFailureTableIsBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	f := &failures{byAddr: make(map[netip.Prefix]*failureBucket), max: 4, now: c.now}
	fail := func(i int) error {
		done, err := f.admit(clientKey(fmt.Sprintf("10.0.%d.%d:1", i/256, i%256)))
		if err == nil {
			done(true)
		}
		return err
	}
	fail(1)
	fail(2)
	c.advance(failureEvery) // 1 and 2 forgiven
	for range failureBurst {
		fail(0)
	}
	fail(3)
	fail(4) // the table is full: 1 and 2 go
	if len(f.byAddr) > f.max {
		t.Fatalf("%d addresses remembered, bound %d", len(f.byAddr), f.max)
	}
	if err := fail(0); !errors.As(err, new(*throttled)) {
		t.Fatalf("an address over its failures was forgotten: %v", err)
	}
	for i := range 10000 {
		fail(5 + i)
		if len(f.byAddr) > f.max {
			t.Fatalf("%d addresses remembered, bound %d", len(f.byAddr), f.max)
		}
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ remote, want string }{
		{"198.51.100.7:1234", "198.51.100.7/32"},
		{"[::ffff:198.51.100.7]:1234", "198.51.100.7/32"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:443", "fe80::/64"},
		{"@", "invalid Prefix"},
	}
	for _, tc := range tests {
		if got := clientKey(tc.remote).String(); got != tc.want {
			t.Errorf("clientKey(%q) = %s, want %s", tc.remote, got, tc.want)
		}
	}
}

// A client refused is told why: 407 for wrong or missing credentials, 429
// for an address over its failures, 503 when the checks' queue is full;
// each answer one line, naming no credential.
func TestAuthAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc       string
		setup      func(a *accounts)
		auth       string
		wantStatus int
		wantCode   string // X-Switchyard-Error
		wantHeader string // "Name: value" the answer carries
	}{
		{"missing", nil, "", 407, "proxy_auth_required", `Proxy-Authenticate: Basic realm="switchyard"`},
		{"wrong", nil, basic("bob", "Wr0ngPw"), 407, "proxy_auth_required", `Proxy-Authenticate: Basic realm="switchyard"`},
		{"over the address's failures", func(a *accounts) {
			for range failureBurst {
				verifyAs(a, context.Background(), "bob", "Wr0ngPw", "192.0.2.1:1")
			}
		}, basic("bob", "Wr0ngPw"), 429, "auth_throttled", "Retry-After: 1"},
		{"queue full", func(a *accounts) {
			for range cap(a.checks.queued) {
				a.checks.queued <- struct{}{}
			}
		}, basic("alice", "Wr0ngPw"), 503, "auth_busy", "Retry-After: 1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			a, _ := testAccounts(t, &clock{t: time.Unix(1e9, 0)}, true)
			if tc.setup != nil {
				tc.setup(a)
			}
			r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
			r.RemoteAddr = "192.0.2.1:2"
			if tc.auth != "" {
				r.Header.Set("Proxy-Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			if _, _, refused := a.authenticate(w, r); refused == "" {
				t.Fatal("let through")
			}
			name, value, _ := strings.Cut(tc.wantHeader, ": ")
			body := w.Body.String()
			if w.Code != tc.wantStatus || w.Header().Get(headerError) != tc.wantCode || w.Header().Get(name) != value {
				t.Errorf("%d %s %q, want %d %s %s", w.Code, w.Header().Get(headerError), w.Header(), tc.wantStatus, tc.wantCode, tc.wantHeader)
			}
			if strings.Count(body, "\n") != 1 || strings.Contains(body, "Wr0ngPw") {
				t.Errorf("body %q", body)
			}
		})
	}
}

// A reload keeps the cached password of each user whose hash is unchanged,
// and the checks' queue; a changed hash is checked afresh, so the old
// password no longer passes.
func TestReloadKeepsVerifiedPasswords(t *testing.T) {
	t.Parallel()
	hash := func(pw string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	h1, h2 := hash("pw1"), hash("pw2")
	v := newEnv(t, Config{Users: map[string]User{"alice": {PasswordHash: h1}, "bob": {PasswordHash: h1}}})
	checks := v.g.current.Load().users.checks
	var compares atomic.Int64
	checks.compare = func(hash, pw []byte) error {
		compares.Add(1)
		return bcrypt.CompareHashAndPassword(hash, pw)
	}
	steps := []struct {
		desc, user, password string
		reload               map[string]User // applied before the step, if set
		wantOK               bool
		wantCompares         int64
	}{
		{"alice's first request", "alice", "pw1", nil, true, 1},
		{"bob's first request", "bob", "pw1", nil, true, 2},
		{"alice after a reload keeping her hash", "alice", "pw1", map[string]User{"alice": {PasswordHash: h1}, "bob": {PasswordHash: h2}}, true, 2},
		{"bob's old password after his hash changed", "bob", "pw1", nil, false, 3},
		{"bob's new password", "bob", "pw2", nil, true, 4},
	}
	for _, st := range steps {
		if st.reload != nil {
			if err := v.g.Update(v.g.Routes(), st.reload, nil); err != nil {
				t.Fatal(err)
			}
		}
		users := v.g.current.Load().users
		if users.checks != checks {
			t.Fatalf("%s: the checks' queue was not kept", st.desc)
		}
		err := verifyAs(users, context.Background(), st.user, st.password, "192.0.2.1:1")
		if (err == nil) != st.wantOK || compares.Load() != st.wantCompares {
			t.Errorf("%s: %v after %d bcrypt comparisons, want ok %v after %d", st.desc, err, compares.Load(), st.wantOK, st.wantCompares)
		}
	}
}

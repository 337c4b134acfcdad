package gateway

import (
	"bytes"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard/switchyard/engine"
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

// lockedBuffer collects log output written by handler goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
				out := &lockedBuffer{}
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
	})
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
		name, labels, ok := a.authenticate(h)
		if ok != tc.want {
			t.Errorf("%s: ok = %v, want %v", tc.desc, ok, tc.want)
		}
		if ok && name == "alice" && labels.String() != "provider=acme" {
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

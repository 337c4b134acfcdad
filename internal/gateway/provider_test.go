package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// providerEnv is a gateway over one gateway route to a fake provider
// gateway, the route line's options given, its log kept.
type providerEnv struct {
	*env
	pg   *routetest.ProviderGateway
	site *site
	log  *logtest.Buffer
	rec  *recorder
}

const providerPassword = "Pw9secretProvider"

func newProviderEnv(t *testing.T, options string) *providerEnv {
	t.Helper()
	pg := routetest.NewProviderGateway(t, "acct", providerPassword)
	site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get(routetest.HeaderProviderIP)+" "+r.Header.Get(routetest.HeaderProviderCountry))
	})
	log := &logtest.Buffer{}
	line := fmt.Sprintf("gateway://acct:%s@%s %s", providerPassword, pg.URL.Host, options)
	rec := &recorder{}
	// Every answer in these tests comes: a deadline floor of its own keeps
	// a loaded machine's slow answer from passing for a silent sub-exit,
	// which retires it as a ban would.
	ecfg := engine.Config{Picker: &engine.RoundRobin{}, Seed: 1, MaxRemovedShare: -1, DeadlineFloor: 30 * time.Second}
	v := newEnvEngine(t, ecfg, Config{Log: slog.New(slog.NewTextHandler(log, nil)), Observer: rec}, line)
	t.Cleanup(func() {
		// No credential, username or provider session id is logged.
		out := log.String()
		secrets := append([]string{providerPassword}, pg.Users()...)
		for _, s := range secrets {
			if s != "acct" && strings.Contains(out, s) {
				t.Errorf("the log shows %q:\n%s", s, out)
			}
		}
	})
	return &providerEnv{env: v, pg: pg, site: site, log: log, rec: rec}
}

// answer is what a request through the gateway got.
type answer struct {
	status        int
	exit, country string // the fake IP and country the site saw
	sub, err      string // X-Switchyard-Sub-Exit, X-Switchyard-Error
	attempts      string // X-Switchyard-Attempts
	token         string // X-Switchyard-Attempt
	feedback      string // X-Switchyard-Feedback: what became of the verdicts sent
}

// get requests the site with the control headers h.
func (v *providerEnv) get(t *testing.T, h http.Header) answer {
	t.Helper()
	return v.getURL(t, v.site.URL, h)
}

// getURL requests u, the site by another name, with the control headers h.
func (v *providerEnv) getURL(t *testing.T, u string, h http.Header) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := v.client(t, "").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, sub: resp.Header.Get(headerSubExit), err: resp.Header.Get(headerError), attempts: resp.Header.Get(headerAttempts),
		token: resp.Header.Get(headerAttempt), feedback: resp.Header.Get(headerFeedback)}
	if resp.StatusCode == http.StatusOK {
		a.exit, a.country, _ = strings.Cut(string(body), " ")
	}
	return a
}

func session(id string) http.Header { return http.Header{headerSession: {id}} }

// TestProviderSessions: each Switchyard session is one provider session,
// its fake IP kept across requests; requests without one rotate.
func TestProviderSessions(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata")
		ips := map[string]string{}
		for range 3 {
			for _, s := range []string{"a-country-fr", "b"} {
				a := v.get(t, session(s))
				if a.status != http.StatusOK || a.sub != "1" {
					t.Fatalf("session %s: %+v", s, a)
				}
				if ips[s] == "" {
					ips[s] = a.exit
				} else if ips[s] != a.exit {
					t.Fatalf("session %s moved from %s to %s", s, ips[s], a.exit)
				}
			}
		}
		if ips["a-country-fr"] == ips["b"] || v.pg.Sessions() != 2 {
			t.Fatalf("sessions %v over %d provider sessions, want 2 apart", ips, v.pg.Sessions())
		}
		// A request without a session: the provider's rotation, the
		// username without a session.
		one, two := v.get(t, nil), v.get(t, nil)
		if one.status != http.StatusOK || one.exit == two.exit || one.sub != "" {
			t.Fatalf("without a session: %+v then %+v", one, two)
		}
		for _, u := range v.pg.Users() {
			// Minted ids: a client's id never reaches the username, so
			// "a-country-fr" adds no country.
			if strings.Contains(u, "country") || u != "acct" && !strings.HasPrefix(u, "acct-session-") {
				t.Fatalf("username %q", u)
			}
		}
	})
}

// TestProviderSubExitRetired: a ban or captcha through a session's
// provider session retires it. The request goes on through a new one (a
// re-pin), which X-Switchyard-Sub-Exit tells; a strict one is answered
// the failure and then session_restart_required. The first ban spares the
// gateway's standing with the site; a second, through another sub-exit,
// does not, and the session's exit is then gone for the site.
func TestProviderSubExitRetired(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		strict bool
		mark   func(pg *routetest.ProviderGateway, ip string)
		class  engine.Class
	}{
		{"banned", false, func(pg *routetest.ProviderGateway, ip string) { pg.Ban("127.0.0.1", ip) }, engine.Blocked},
		{"captcha", false, func(pg *routetest.ProviderGateway, ip string) { pg.Captcha("127.0.0.1", ip) }, engine.ContentInvalid},
		{"banned, strict", true, func(pg *routetest.ProviderGateway, ip string) { pg.Ban("127.0.0.1", ip) }, engine.Blocked},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			routetest.NoLeaks(t, func(t *testing.T) {
				v := newProviderEnv(t, "preset=brightdata")
				h := session("s1")
				if tc.strict {
					h.Set(headerStrict, "1")
				}
				first := v.get(t, h)
				if first.status != http.StatusOK || first.sub != "1" {
					t.Fatalf("first: %+v", first)
				}
				tc.mark(v.pg, first.exit)
				second := v.get(t, h)
				if p, ok := v.pair(t, 0, "127.0.0.1"); ok && !p.Health.State.Usable() {
					t.Fatalf("one sub-exit's ban cooled the gateway for the site: %v", p.Health.State)
				}
				if tc.strict {
					if second.status != http.StatusForbidden || second.sub != "1; retired" {
						t.Fatalf("strict, through the marked IP: %+v", second)
					}
					if next := v.get(t, h); next.status != http.StatusServiceUnavailable || next.err != "session_restart_required" {
						t.Fatalf("strict, after the retirement: %+v", next)
					}
					return
				}
				if second.status != http.StatusOK || second.sub != "2" || second.exit == first.exit || second.attempts != "2" {
					t.Fatalf("through the marked IP: %+v, first %+v", second, first)
				}
				if again := v.get(t, h); again.sub != "2" || again.exit != second.exit || again.attempts != "1" {
					t.Fatalf("the session after its re-pin: %+v, want it on %s", again, second.exit)
				}
				if !strings.Contains(v.log.String(), "sub-exit failed") {
					t.Fatalf("the retirement is not in the log:\n%s", v.log.String())
				}
				if st, ok := v.g.SubExits(v.id(0)); !ok || st.Minted != 2 || st.Retired != 1 || st.Live != 1 {
					t.Fatalf("SubExits = %+v, %v; want 2 minted, 1 retired, 1 live", st, ok)
				}
				// A second sub-exit marked by the site within the window is
				// evidence against the gateway there: the pair cools and the
				// session's exit is gone for the site. The three answers so
				// far are reported first (a winner is, once its body is
				// relayed): the third promotes the pair from candidate, a
				// new generation, under which a ban leased before would be
				// late news that moves no state (docs/design/001-generations.md).
				v.waitPairState(t, 0, "127.0.0.1", engine.Healthy)
				tc.mark(v.pg, second.exit)
				if third := v.get(t, h); third.sub != "2; retired" {
					t.Fatalf("through the second marked IP: %+v", third)
				}
				v.waitOutcome(t, 0, tc.class)
				v.rec.mu.Lock()
				got := strings.Join(v.rec.subExits, ", ")
				v.rec.mu.Unlock()
				if want := fmt.Sprintf("%v true true, %v true false", tc.class, tc.class); got != want {
					t.Fatalf("sub-exit failures observed: %s, want %s", got, want)
				}
			})
		})
	}
}

// TestProviderLateVerdict: a client's late verdict on an answer through a
// session's sub-exit retires that sub-exit as the ban seen in-line would,
// so the session's next request goes out through a new one; a verdict
// naming a sub-exit already replaced retires nothing, its successor least
// of all; and late bans keep to the first-ban rule (settle).
func TestProviderLateVerdict(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata")
		site, other := v.site.URL, strings.Replace(v.site.URL, "127.0.0.1", "localhost", 1)
		// Sub-exit 1 answers at the site and at another target.
		atSite, atOther := v.get(t, session("s1")), v.getURL(t, other, session("s1"))
		if atSite.sub != "1" || atOther.sub != "1" || atOther.exit != atSite.exit || atSite.token == "" || atOther.token == "" {
			t.Fatalf("sub-exit 1's answers: %+v, %+v", atSite, atOther)
		}
		for _, tok := range []string{atSite.token, atOther.token} {
			b, err := base64.RawURLEncoding.DecodeString(tok)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range append([]string{providerPassword}, v.pg.Users()...) {
				if strings.Contains(string(b), secret) {
					t.Fatalf("a token carries %q", secret)
				}
			}
		}
		exit := atSite.exit
		for _, step := range []struct {
			desc     string
			token, u string // the verdict's token, and where the request carrying it goes
			moved    bool   // the session goes out through a new sub-exit
			observed string // the sub-exit failures observed so far
			banned   bool   // the engine took a ban of the gateway route at the site
		}{
			{"a ban of sub-exit 1's answer", atSite.token, site, true, "blocked true true", false},
			{"a ban of its answer elsewhere, sub-exit 2 live", atOther.token, site, false, "blocked true true, blocked false true", false},
			{"the first verdict again: a second ban at the site within the minute", atSite.token, other, false, "blocked true true, blocked false true", true},
		} {
			h := session("s1")
			h.Set(headerFeedback, step.token+"; class=blocked")
			a := v.getURL(t, step.u, h)
			if a.status != http.StatusOK || a.feedback != "applied" || a.sub != "2" || a.attempts != "1" || (a.exit != exit) != step.moved {
				t.Fatalf("%s: %+v, the session was on %s", step.desc, a, exit)
			}
			exit = a.exit
			v.rec.mu.Lock()
			got := strings.Join(v.rec.subExits, ", ")
			v.rec.mu.Unlock()
			if got != step.observed {
				t.Fatalf("%s: sub-exit failures observed: %s, want %s", step.desc, got, step.observed)
			}
			// Its last failure, which no success reported meanwhile undoes.
			if p, _ := v.pair(t, 0, "127.0.0.1"); (p.Health.Evidence.LastFailure != 0) != step.banned {
				t.Fatalf("%s: the gateway's pair with the site is %+v", step.desc, p.Health)
			}
		}
		if v.pg.Sessions() != 2 || !strings.Contains(v.log.String(), "late=true") {
			t.Fatalf("%d provider sessions; the log:\n%s", v.pg.Sessions(), v.log.String())
		}
	})
}

// TestProviderLabels: a request's labels fill the template; a label it
// cannot express, or a value that is not safe to send, is a hard
// constraint no route meets.
func TestProviderLabels(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata")
		labels := func(l string) http.Header { return http.Header{headerLabels: {l}} }
		if a := v.get(t, labels("region=us")); a.status != http.StatusOK || a.country != "us" {
			t.Fatalf("region=us: %+v", a)
		}
		// A session per region: the same session asking for another
		// country gets a provider session there.
		us, de := v.get(t, http.Header{headerSession: {"s"}, headerLabels: {"region=us"}}), v.get(t, http.Header{headerSession: {"s"}, headerLabels: {"region=de"}})
		if us.country != "us" || de.country != "de" || us.exit == de.exit {
			t.Fatalf("session s in us then de: %+v, %+v", us, de)
		}
		for _, l := range []string{"asn=7922", "region=us-zone-x", "region=u.s"} {
			if a := v.get(t, labels(l)); a.status != http.StatusServiceUnavailable || a.err != "no_matching_route" {
				t.Fatalf("%s: %+v, want no_matching_route", l, a)
			}
		}
		for _, u := range v.pg.Users() {
			if strings.Contains(u, "zone") || strings.Contains(u, "asn") {
				t.Fatalf("username %q carries a parameter the client injected", u)
			}
		}
	})
}

// TestProviderPassedSessions: session_ids=pass sends the client's id, or
// a digest of one that is not safe to send.
func TestProviderPassedSessions(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata session_ids=pass")
		for _, s := range []string{"abc123", "x-country-fr"} {
			if a := v.get(t, session(s)); a.status != http.StatusOK {
				t.Fatalf("session %s: %+v", s, a)
			}
		}
		users := v.pg.Users()
		if users[0] != "acct-session-abc123" || strings.Contains(users[1], "country") || !strings.HasPrefix(users[1], "acct-session-") {
			t.Fatalf("usernames %v", users)
		}
	})
}

// TestSubExitMemory measures what one provider session costs the gateway
// (its table entry and its exit), without the client's session id: go test
// -run SubExitMemory -v ./internal/gateway/.
func TestSubExitMemory(t *testing.T) {
	v := newEnv(t, Config{}, "gateway://acct:pw@127.0.0.1:9 preset=oxylabs sessions=20000")
	s := v.g.current.Load()
	x := s.routes.Exit(v.id(0))
	const n = 10_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-session-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		if _, err := v.g.subExit(x, s, engine.Lease{Route: v.id(0), Session: k}, control{session: k}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per sub-exit (%d kept)", per, n)
	if per > 2048 {
		t.Fatalf("%.0f bytes per sub-exit, want at most 2 KiB", per)
	}
	runtime.KeepAlive(keys)
}

// TestProviderReload: a reload that leaves a gateway route's line alone
// keeps its sub-exits; one that changes its options starts them afresh.
func TestProviderReload(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata")
		reload := func(options string) {
			t.Helper()
			list, err := route.ParseList("test", []byte(fmt.Sprintf("gateway://acct:%s@%s %s", providerPassword, v.pg.URL.Host, options)))
			if err != nil {
				t.Fatal(err)
			}
			routes, _, err := v.g.Routes().Next([]*route.Route{&list[0]})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.g.Update(routes, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		first := v.get(t, session("s1"))
		reload("preset=brightdata")
		if same := v.get(t, session("s1")); same.exit != first.exit {
			t.Fatalf("an unchanged line moved the session from %s to %s", first.exit, same.exit)
		}
		reload("preset=brightdata sessions=5")
		if moved := v.get(t, session("s1")); moved.exit == first.exit || v.pg.Sessions() != 2 {
			t.Fatalf("after new options: %s, first %s, %d provider sessions", moved.exit, first.exit, v.pg.Sessions())
		}
	})
}

// TestProviderTunnels: CONNECT tunnels of one session go through its one
// provider session, and say which.
func TestProviderTunnels(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		v := newProviderEnv(t, "preset=brightdata")
		addr := v.site.Listener.Addr().String()
		for range 2 {
			c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n"+headerSession+": s1\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get(headerSubExit) != "1" {
				t.Fatalf("CONNECT: %v, %v", resp, err)
			}
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
			inside, err := http.ReadResponse(br, nil)
			if err != nil || inside.StatusCode != http.StatusOK {
				t.Fatalf("inside the tunnel: %v, %v", inside, err)
			}
			inside.Body.Close()
			c.Close()
		}
		users := v.pg.Users()
		if len(users) != 2 || users[0] != users[1] || !strings.HasPrefix(users[0], "acct-session-") {
			t.Fatalf("usernames of the tunnels: %v", users)
		}
	})
}

// TestProviderSilenceRetires: a provider session whose IP goes silent at
// the site is retired as a banned one is; the request goes on through a
// new one.
func TestProviderSilenceRetires(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		pg := routetest.NewProviderGateway(t, "acct", providerPassword)
		var stalled atomic.Value // the fake IP the site never answers
		stalled.Store("")
		site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			ip := r.Header.Get(routetest.HeaderProviderIP)
			if ip == stalled.Load() {
				<-r.Context().Done() // until the gateway gives up on the attempt
				return
			}
			io.WriteString(w, ip+" ")
		})
		line := fmt.Sprintf("gateway://acct:%s@%s preset=brightdata", providerPassword, pg.URL.Host)
		// Long enough for the answers that come on a loaded machine; the
		// silent one runs to it: a session's bound route has no other
		// route to take its place.
		v := &providerEnv{env: newEnv(t, Config{AttemptTimeout: 3 * time.Second}, line), pg: pg, site: site}
		first := v.get(t, session("s1"))
		stalled.Store(first.exit)
		if next := v.get(t, session("s1")); next.status != http.StatusOK || next.sub != "2" || next.exit == first.exit || next.attempts != "2" {
			t.Fatalf("through the silent IP: %+v, first %+v", next, first)
		}
	})
}

package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A target host refused by admission, however spelled, gets a 403 before
// any route is leased: the target sees nothing and no evidence is counted.
func TestAdmissionRefusesHost(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			connect bool
			host    string // the target's 127.0.0.1, spelled otherwise
		}{
			{desc: "octal", host: "0177.0.0.1"},
			{desc: "decimal", host: "2130706433"},
			{desc: "IPv4-mapped", host: "[::ffff:127.0.0.1]"},
			{desc: "CONNECT hex", connect: true, host: "0x7f000001"},
			{desc: "CONNECT localhost", connect: true, host: "localhost"},
			{desc: "CONNECT short", connect: true, host: "127.1"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })
				v := newEnv(t, Config{Admission: admit.New(nil, nil)}, "direct")
				_, port, _ := net.SplitHostPort(tg.Listener.Addr().String())
				authority := tc.host + ":" + port
				req := "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
				if tc.connect {
					req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
				}
				resp := raw(t, v.url.Host, req)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || resp.Header.Get(headerError) != "blocked_destination" {
					t.Fatalf("got %d %q, want 403 blocked_destination", resp.StatusCode, resp.Header.Get(headerError))
				}
				if !strings.HasPrefix(string(body), "switchyard: blocked: ") || strings.Count(string(body), "\n") != 1 {
					t.Errorf("body %q, want one line naming the reason", body)
				}
				if tg.Hits() != 0 {
					t.Errorf("target reached %d times", tg.Hits())
				}
				st, _ := v.e.Route(v.id(0))
				if st.Inflight != 0 || len(st.Targets) != 0 {
					t.Errorf("route status %+v: want no lease and no route×target record", st)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				for {
					ev, err := v.events.Next(ctx)
					if err != nil {
						break
					}
					if ev.Kind == engine.EventOutcome {
						t.Fatalf("outcome %v reported for a refused host", ev.Class)
					}
				}
			})
		}
	})
}

// With 127.0.0.0/8 allow-listed, the same targets are carried.
func TestAdmissionAllowList(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc  string
			route string
		}{
			{desc: "direct route", route: "direct"},
			{desc: "proxy route"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })
				line := tc.route
				if line == "" {
					line = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
				}
				adm := admit.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil)
				v := newEnv(t, Config{Admission: adm}, line)
				resp, err := v.client(t, "").Get(tg.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "reached" {
					t.Fatalf("got %d %q, want the target's answer", resp.StatusCode, body)
				}
			})
		}
	})
}

// A Direct route checks the address it connects to, after DNS: a target
// that passed the host check but resolves to a blocked address is refused
// at connect time, reported Canceled (no evidence), answered 403, and never
// connected to. The host check is skipped here by dialling through the
// leased route directly, as a name that rebinds to 127.0.0.1 would.
func TestAdmissionAtConnect(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			connect bool
		}{
			{desc: "absolute-form"},
			{desc: "CONNECT", connect: true},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				var reached atomic.Bool
				addr := routetest.ServeTCP(t, func(c net.Conn) { reached.Store(true); c.Close() })
				v := newEnv(t, Config{Admission: admit.New(nil, nil)}, "direct")
				target := "127.0.0.1"
				l, x, err := v.g.acquire(v.g.current.Load(), control{}, target, nil, false)
				if err != nil {
					t.Fatal(err)
				}
				var o *outcome
				if tc.connect {
					o = v.g.dialTunnel(context.Background(), l, x, addr)
				} else {
					req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
					j := &job{req: req, body: noBody, url: *req.URL, header: outboundHeader(req.Header)}
					o = v.g.forward(context.Background(), j, l, x)
				}
				var ge *admit.Error
				if o.blocked == nil || !errors.As(o.blocked, &ge) || o.class != engine.Canceled || o.conn != nil || o.resp != nil {
					t.Fatalf("blocked %v, class %v: want a refusal, canceled, and nothing to pass on", o.blocked, o.class)
				}
				v.g.report(l, o.evidence())
				v.waitOutcome(t, 0, engine.Canceled)
				if reached.Load() {
					t.Error("the target was connected to")
				}
				rec := httptest.NewRecorder()
				v.g.answer(rec, "GET", time.Now(), o, 1, 0)
				if rec.Code != http.StatusForbidden || rec.Header().Get(headerError) != "blocked_destination" {
					t.Errorf("answered %d %q, want 403 blocked_destination", rec.Code, rec.Header().Get(headerError))
				}
			})
		}
	})
}

// With ResolveProxyTargets, a name is refused at admission when it
// resolves to a blocked address, whatever route would carry it.
func TestResolveProxyTargets(t *testing.T) {
	t.Parallel()
	public := netip.MustParseAddr("93.184.215.14") // looked up, never dialled
	resolver := routetest.NewDNS(t, map[string][]netip.Addr{
		"rebind.test": {netip.MustParseAddr("127.0.0.1")},
		"mixed.test":  {public, netip.MustParseAddr("10.0.0.1")},
		"public.test": {public},
	}).Resolver()
	tests := []struct {
		host    string
		resolve bool
		want    bool
	}{
		{"rebind.test", true, false},
		{"mixed.test", true, false},
		{"public.test", true, true},
		{"unknown.test", true, false}, // fails closed: the proxy's resolver is unknown
		{"rebind.test", false, true},  // without resolution only the name is checked
		{"127.0.0.1", false, false},
	}
	for _, tc := range tests {
		g := &Gateway{cfg: Config{Admission: admit.New(nil, nil), ResolveProxyTargets: tc.resolve, Resolver: resolver}}
		w := httptest.NewRecorder()
		if _, _, got := g.admit(context.Background(), w, tc.host+":80", true); got != tc.want {
			t.Errorf("%s (resolve %v): admitted %v, want %v", tc.host, tc.resolve, got, tc.want)
		}
		if !tc.want && (w.Code != http.StatusForbidden || w.Header().Get(headerError) != "blocked_destination") {
			t.Errorf("%s: answered %d %q", tc.host, w.Code, w.Header().Get(headerError))
		}
	}
}

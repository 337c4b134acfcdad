package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A client speaks TLS to an HTTPS site through a CONNECT tunnel; the first
// route is dead, so the tunnel is built on the second.
func TestConnect(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc  string
			proxy routetest.Behavior
		}{
			{"http proxy", routetest.Behavior{}},
			{"https proxy", routetest.Behavior{TLS: true}},
			{"socks5 proxy", routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: "u", Password: "s3cret"}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					io.WriteString(w, "hello over tls")
				}))
				t.Cleanup(site.Close)
				dead := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
				p := routetest.NewProxy(t, tc.proxy)
				v := newEnv(t, Config{ProxyTLS: &tls.Config{RootCAs: p.CertPool()}}, proxyLine(dead, ""), proxyLine(p, ""))

				tr := site.Client().Transport.(*http.Transport).Clone()
				tr.Proxy = http.ProxyURL(v.url)
				var connectAnswer http.Header
				tr.OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
					connectAnswer = resp.Header.Clone()
					return nil
				}
				t.Cleanup(tr.CloseIdleConnections)
				resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(site.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) != "hello over tls" {
					t.Errorf("body %q", body)
				}
				if connectAnswer.Get(headerRoute) != v.id(1) || connectAnswer.Get(headerAttempts) != "2" {
					t.Errorf("CONNECT answer headers %v, want route %s after 2 attempts", connectAnswer, v.id(1))
				}
				v.waitOutcome(t, 0, engine.ProxyConnectFailed)
				v.waitOutcome(t, 1, engine.OK)
				if st, _ := v.e.Route(v.id(1)); st.Inflight != 0 {
					t.Errorf("%d leases in flight once the tunnel carried bytes", st.Inflight)
				}
			})
		}
	})
}

// Tunnels that fail: in the connect phase (the client gets a 502 naming the
// class) or after it, when the server hangs up without a byte.
func TestConnectFailures(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		silent := routetest.ServeTCP(t, func(c net.Conn) { c.Close() })
		tests := []struct {
			desc       string
			proxy      routetest.Behavior
			wantStatus int
			wantClass  engine.Class
		}{
			{"dead route", routetest.Behavior{Refuse: true}, 502, engine.ProxyConnectFailed},
			{"407 route", routetest.Behavior{Answer407: true, User: "u", Password: "s3cret"}, 502, engine.ProxyAuth},
			{"proxy refuses the host", routetest.Behavior{BlockHosts: []string{"127.0.0.1"}}, 502, engine.Blocked},
			{"proxy cannot reach the host", routetest.Behavior{HostStatus: map[string]int{"127.0.0.1": 504}}, 502, engine.TunnelFailed},
			{"server hangs up silently", routetest.Behavior{}, 200, engine.TargetReset},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				p := routetest.NewProxy(t, tc.proxy)
				v := newEnv(t, Config{MaxAttempts: 1}, proxyLine(p, ""))
				c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, "CONNECT "+silent+" HTTP/1.1\r\nHost: "+silent+"\r\n\r\n")
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
				}
				if tc.wantStatus == 200 {
					if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
						t.Fatalf("read %d bytes, %v: want the end of the tunnel", n, err)
					}
				} else {
					body, _ := io.ReadAll(resp.Body)
					if resp.Header.Get(headerError) != tc.wantClass.String() {
						t.Errorf("error %q (%s), want %v", resp.Header.Get(headerError), body, tc.wantClass)
					}
				}
				v.waitOutcome(t, 0, tc.wantClass)
			})
		}
	})
}

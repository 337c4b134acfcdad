package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// mitmEnv is a gateway intercepting TLS, over three healthy proxies, and
// an HTTPS site it trusts.
type mitmEnv struct {
	*env
	ca        *mitm.Authority
	site      *httptest.Server
	hits      atomic.Int64
	siteConns atomic.Int64 // connections the site accepted
}

// newMITMEnv makes it; tune, when set, adjusts the gateway's config.
func newMITMEnv(t testing.TB, tune func(*Config), h func(n int, w http.ResponseWriter, r *http.Request)) *mitmEnv {
	t.Helper()
	ca, _, err := mitm.LoadOrCreate(t.TempDir(), mitm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &mitmEnv{ca: ca}
	m.site = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(int(m.hits.Add(1)), w, r)
	}))
	m.site.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.siteConns.Add(1)
		}
	}
	m.site.StartTLS()
	t.Cleanup(m.site.Close)
	roots := x509.NewCertPool()
	roots.AddCert(m.site.Certificate())
	var lines []string
	for range 3 {
		lines = append(lines, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
	}
	cfg := Config{
		TargetTLS: &tls.Config{RootCAs: roots},
		MITM:      &MITM{Authority: ca, HandshakeTimeout: 5 * time.Second, IdleTimeout: time.Minute},
	}
	if tune != nil {
		tune(&cfg)
	}
	m.env = newEnv(t, cfg, lines...)
	return m
}

// mitmClient is a client of the gateway that trusts the CA alone, over
// HTTP/2 when h2.
func (m *mitmEnv) mitmClient(t testing.TB, user string, h2 bool) *http.Client {
	t.Helper()
	c := m.client(t, user)
	tr := c.Transport.(*http.Transport)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.ca.CertPEM())
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	tr.Protocols.SetHTTP2(h2)
	return c
}

// TestMITM serves requests inside intercepted TLS through the attempt loop,
// over HTTP/1.1 and HTTP/2: a 403 through one route is retried on another
// and the client sees the 200 with the route headers; a 429's Retry-After
// cools that route×target only.
func TestMITM(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			routetest.NoLeaks(t, func(t *testing.T) {
				m := newMITMEnv(t, nil, func(n int, w http.ResponseWriter, r *http.Request) {
					switch n {
					case 1:
						w.WriteHeader(http.StatusForbidden)
					case 3:
						w.Header().Set("Retry-After", "120")
						w.WriteHeader(http.StatusTooManyRequests)
					default:
						fmt.Fprintf(w, "page %s %s", r.URL.Path, r.Header.Get("X-Who"))
					}
				})
				c := m.mitmClient(t, "", h2)
				get := func(path string) *http.Response {
					t.Helper()
					req, _ := http.NewRequest(http.MethodGet, m.site.URL+path, nil)
					req.Header.Set("X-Who", "me")
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					return resp
				}
				resp := get("/a") // route 0: 403, then route 1: 200
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantProto := map[bool]int{false: 1, true: 2}[h2]
				if resp.StatusCode != http.StatusOK || string(body) != "page /a me" || resp.ProtoMajor != wantProto {
					t.Fatalf("got %s %d %q, want HTTP/%d 200", resp.Proto, resp.StatusCode, body, wantProto)
				}
				if resp.Header.Get(headerRoute) != m.id(1) || resp.Header.Get(headerAttempts) != "2" || resp.Header.Get(headerClass) != "ok" {
					t.Errorf("headers %v: want route %s after 2 attempts", resp.Header, m.id(1))
				}
				if p, ok := m.pair(t, 0, "127.0.0.1"); !ok || p.Health.ConsecFail != 1 {
					t.Errorf("route 0 × site: %+v, want its 403 as evidence", p.Health)
				}

				resp = get("/b") // route 2: 429, then another
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("second request: %d", resp.StatusCode)
				}
				p, ok := m.pair(t, 2, "127.0.0.1")
				if !ok || p.Health.State != engine.Cooling || p.Health.Cause != engine.RateLimited || time.Unix(0, p.Health.Until).Before(time.Now().Add(time.Minute)) {
					t.Errorf("route 2 × site: %+v, want cooling for the Retry-After", p.Health)
				}
				if st, _ := m.e.Route(m.id(2)); !st.Health.State.Usable() {
					t.Errorf("route 2 is %v: a site's 429 is not the route's fault", st.Health.State)
				}
			})
		})
	}
}

// connectTo opens a CONNECT tunnel to addr through the gateway, as user
// when set, and returns the connection after the gateway's 200.
func (m *mitmEnv) connectTo(t testing.TB, addr, user string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", m.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if user != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+basic(user, "pw"))
	}
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
		t.Fatalf("CONNECT %s: %v %v", addr, resp, err)
	}
	return c
}

// TestMITMOnly: with mitm.only, the hosts it names are intercepted and
// every other tunnel stays plain, the site's own certificate reaching the
// client; a bypassed host stays plain even when named.
func TestMITMOnly(t *testing.T) {
	tests := []struct {
		desc         string
		only, bypass []string
		intercepted  bool
	}{
		{"named", []string{"localhost"}, nil, true},
		{"named by a wildcard", []string{"*"}, nil, true},
		{"not named", []string{"shop.example", "*.shop.example"}, nil, false},
		{"named and bypassed", []string{"localhost"}, []string{"localhost"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			routetest.NoLeaks(t, func(t *testing.T) {
				m := newMITMEnv(t, func(c *Config) { c.MITM.Only, c.MITM.Bypass = tt.only, tt.bypass }, func(_ int, w http.ResponseWriter, _ *http.Request) {
					io.WriteString(w, "site")
				})
				_, port, _ := net.SplitHostPort(m.site.Listener.Addr().String())
				c := m.connectTo(t, "localhost:"+port, "")
				// The gateway's CA and the site's both trusted: the
				// certificate's issuer tells who answered the handshake.
				roots := x509.NewCertPool()
				roots.AddCert(m.site.Certificate())
				roots.AppendCertsFromPEM(m.ca.CertPEM())
				name := "localhost"
				if !tt.intercepted {
					name = "example.com" // httptest's certificate names example.com
				}
				tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: roots})
				if err := tc.Handshake(); err != nil {
					t.Fatalf("handshake as %s: %v", name, err)
				}
				leaf := tc.ConnectionState().PeerCertificates[0]
				if minted := leaf.Issuer.String() != m.site.Certificate().Issuer.String(); minted != tt.intercepted {
					t.Errorf("certificate issued by %q: intercepted %v, want %v", leaf.Issuer, minted, tt.intercepted)
				}
				tc.Close()
			})
		})
	}
}

// TestMITMTunnels checks what is not intercepted, and how: a bypassed host
// and a client that does not speak TLS get a plain tunnel through a route;
// a client naming another host in its SNI is refused the handshake; a site
// whose certificate does not verify is tls_failed, a 502 saying so.
func TestMITMTunnels(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		m := newMITMEnv(t, func(c *Config) { c.MITM.Bypass = []string{"localhost"} }, func(_ int, w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "site")
		})
		siteAddr := m.site.Listener.Addr().String()
		_, port, _ := net.SplitHostPort(siteAddr)

		t.Run("bypass", func(t *testing.T) {
			c := m.connectTo(t, "localhost:"+port, "")
			roots := x509.NewCertPool()
			roots.AddCert(m.site.Certificate())
			tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: roots}) // httptest's certificate names example.com
			if err := tc.Handshake(); err != nil {
				t.Fatalf("the site's own certificate through a bypassed tunnel: %v", err)
			}
		})

		t.Run("not TLS", func(t *testing.T) {
			plain := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "plain") })
			c := m.connectTo(t, plain.Listener.Addr().String(), "")
			fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", plain.Listener.Addr())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != "plain" {
				t.Errorf("through the plain tunnel: %d %q", resp.StatusCode, body)
			}
		})

		t.Run("SNI of another host", func(t *testing.T) {
			c := m.connectTo(t, siteAddr, "")
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(m.ca.CertPEM())
			tc := tls.Client(c, &tls.Config{ServerName: "elsewhere.example", RootCAs: pool})
			if err := tc.Handshake(); err == nil {
				t.Error("a handshake naming another host than the CONNECT's succeeded")
			}
		})

		t.Run("untrusted site", func(t *testing.T) {
			m := newMITMEnv(t, func(c *Config) { c.TargetTLS = &tls.Config{RootCAs: x509.NewCertPool()} }, func(int, http.ResponseWriter, *http.Request) {})
			resp, err := m.mitmClient(t, "", false).Get(m.site.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "tls_failed") {
				t.Errorf("got %d %q, want 502 tls_failed", resp.StatusCode, body)
			}
		})
	})
}

// TestMITMSession steers every request inside an intercepted tunnel by
// the CONNECT's proxy username, as it would the tunnel: one session, one
// route.
func TestMITMSession(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		m := newMITMEnv(t, nil, func(int, http.ResponseWriter, *http.Request) {})
		c := m.mitmClient(t, "crawler-session-s1", false)
		var routes []string
		for range 4 {
			resp, err := c.Get(m.site.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			routes = append(routes, resp.Header.Get(headerRoute))
		}
		for _, r := range routes {
			if r != routes[0] {
				t.Fatalf("routes %v: a session changed exit", routes)
			}
		}
	})
}

// TestMITMStreams relays an intercepted answer as it comes: the site sends
// its second part only once the client has read the first, which a
// gateway holding the body back would never let happen.
func TestMITMStreams(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		more := make(chan struct{})
		m := newMITMEnv(t, nil, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-more:
				io.WriteString(w, "data: second\n\n")
			case <-time.After(5 * time.Second):
			}
		})
		resp, err := m.mitmClient(t, "", true).Get(m.site.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
			t.Fatalf("first event: %q, %v", line, err)
		}
		close(more)
		rest, _ := io.ReadAll(br)
		if string(rest) != "\ndata: second\n\n" {
			t.Errorf("rest %q", rest)
		}
	})
}

// TestMITMKeepsSiteConnections serves a keep-alive client's requests inside
// one intercepted connection on one connection to the site through the
// route, as the client's own would be through a plain tunnel: one CONNECT
// at the proxy, not one per request. A connection the site closed while it
// was kept idle costs a request nothing: it goes on a fresh one.
func TestMITMKeepsSiteConnections(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		m := newMITMEnv(t, nil, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "kept") })
		c := m.mitmClient(t, "crawler-session-one", false) // one route for all
		get := func() {
			t.Helper()
			resp, err := c.Get(m.site.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "kept" {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
		}
		for range 5 {
			get()
		}
		if n := m.siteConns.Load(); n != 1 {
			t.Errorf("5 requests took %d connections to the site, want 1", n)
		}
		m.site.CloseClientConnections() // the site drops the kept one
		get()
		if n := m.siteConns.Load(); n != 2 {
			t.Errorf("after the site closed the kept connection: %d connections, want 2", n)
		}
	})
}

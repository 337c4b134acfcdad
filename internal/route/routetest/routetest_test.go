package routetest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// target is a site behind the proxies: it echoes the path it was asked for.
func target(t *testing.T, useTLS bool) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	})
	s := httptest.NewUnstartedServer(h)
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// TestProxyServesClients drives each kind of proxy with net/http's own
// client, which knows HTTP, HTTPS and SOCKS5 proxies: what it accepts, real
// clients accept.
func TestProxyServesClients(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc      string
			b         Behavior
			tlsTarget bool   // https target: the client tunnels with CONNECT
			proxyUser string // overrides the credentials the client sends
			wantCode  int    // 0: the client must fail
		}{
			{desc: "absolute-form", b: Behavior{}, wantCode: 200},
			{desc: "absolute-form with auth", b: Behavior{User: "u", Password: "p"}, wantCode: 200},
			{desc: "CONNECT", b: Behavior{}, tlsTarget: true, wantCode: 200},
			{desc: "CONNECT with auth", b: Behavior{User: "u", Password: "p"}, tlsTarget: true, wantCode: 200},
			{desc: "https proxy, absolute-form", b: Behavior{TLS: true, User: "u", Password: "p"}, wantCode: 200},
			{desc: "https proxy, CONNECT", b: Behavior{TLS: true}, tlsTarget: true, wantCode: 200},
			{desc: "socks5", b: Behavior{Kind: SOCKS5Proxy}, wantCode: 200},
			{desc: "socks5 with auth", b: Behavior{Kind: SOCKS5Proxy, User: "u", Password: "p"}, tlsTarget: true, wantCode: 200},
			{desc: "407 always", b: Behavior{Answer407: true}, wantCode: 407},
			{desc: "wrong password", b: Behavior{User: "u", Password: "p"}, proxyUser: "u:wrong", wantCode: 407},
			{desc: "no credentials", b: Behavior{User: "u", Password: "p"}, proxyUser: "-", wantCode: 407},
			{desc: "blocked host", b: Behavior{BlockHosts: []string{"127.0.0.1"}}, wantCode: 403},
			{desc: "socks5 blocked host", b: Behavior{Kind: SOCKS5Proxy, BlockHosts: []string{"127.0.0.1"}}},
			{desc: "socks5 wrong password", b: Behavior{Kind: SOCKS5Proxy, User: "u", Password: "p"}, proxyUser: "u:wrong"},
			{desc: "socks5 407 always", b: Behavior{Kind: SOCKS5Proxy, Answer407: true}},
			{desc: "status for the host", b: Behavior{HostStatus: map[string]int{"127.0.0.1": 503}}, wantCode: 503},
			{desc: "CONNECT status for the host", b: Behavior{HostStatus: map[string]int{"127.0.0.1": 504}}, tlsTarget: true},
			{desc: "socks5 reply for the host", b: Behavior{Kind: SOCKS5Proxy, HostReply: map[string]byte{"127.0.0.1": 1}}},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				ts := target(t, tc.tlsTarget)
				p := NewProxy(t, tc.b)
				proxyURL := *p.URL
				switch {
				case tc.proxyUser == "-":
					proxyURL.User = nil
				case tc.proxyUser != "":
					user, pass, _ := strings.Cut(tc.proxyUser, ":")
					proxyURL.User = url.UserPassword(user, pass)
				}
				// One config serves TLS to the proxy and to the target.
				roots := x509.NewCertPool()
				if p.CertPool() != nil {
					roots = p.CertPool().Clone()
				}
				if tc.tlsTarget {
					roots.AddCert(ts.Certificate())
				}
				client := &http.Client{
					Timeout: 5 * time.Second,
					Transport: &http.Transport{
						Proxy:             http.ProxyURL(&proxyURL),
						TLSClientConfig:   &tls.Config{RootCAs: roots},
						DisableKeepAlives: true,
					},
				}
				resp, err := client.Get(ts.URL + "/page")
				if tc.wantCode == 0 {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("got %s, want the client to fail", resp.Status)
					}
				} else {
					if err != nil {
						t.Fatal(err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatal(err)
					}
					if resp.StatusCode != tc.wantCode {
						t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantCode)
					}
					if tc.wantCode == 200 && string(body) != "hello /page" {
						t.Fatalf("body %q, want %q", body, "hello /page")
					}
				}
				if got := p.Requests(); got != 1 {
					t.Errorf("Requests() = %d, want 1", got)
				}
			})
		}
	})
}

// TestProxyFaults checks the faults that are not answers: a refused
// connection and a proxy that never answers.
func TestProxyFaults(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		t.Run("refuse", func(t *testing.T) {
			t.Parallel()
			p := NewProxy(t, Behavior{Refuse: true})
			c, err := net.Dial("tcp", p.URL.Host)
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded, want connection refused")
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial: %v, want connection refused", err)
			}
		})
		blackholes := []struct {
			desc string
			b    Behavior
		}{
			{"blackhole http", Behavior{Blackhole: true}},
			{"blackhole https", Behavior{Blackhole: true, TLS: true}},
			{"blackhole socks5", Behavior{Blackhole: true, Kind: SOCKS5Proxy}},
		}
		for _, tc := range blackholes {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				p := NewProxy(t, tc.b)
				c, err := net.Dial("tcp", p.URL.Host)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Any client's opening bytes: the proxy reads and ignores them.
				io.WriteString(c, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n\x05\x01\x00")
				c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				n, err := c.Read(make([]byte, 1))
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("read %d bytes, %v; want a timeout", n, err)
				}
				if got := p.Requests(); got != 1 {
					t.Errorf("Requests() = %d, want 1", got)
				}
			})
		}
	})
}

// TestProxyProtocolFaults checks the faults in the protocol: a proxy that
// hangs up, answers garbage, or goes silent once it has the request.
func TestProxyProtocolFaults(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		const (
			request = "GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"
			greet   = "\x05\x01\x00"                             // SOCKS5, one method: no auth
			connect = "\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50" // CONNECT 127.0.0.1:80
		)
		tests := []struct {
			desc  string
			b     Behavior
			send  string
			reply string // what the proxy says first
			ends  bool   // then it closes; otherwise it stays silent
		}{
			{desc: "http hangup", b: Behavior{Hangup: true}, send: request, ends: true},
			{desc: "http garbage", b: Behavior{Garbage: true}, send: request, reply: garbage},
			{desc: "http silent", b: Behavior{Silent: true}, send: request},
			{desc: "socks5 hangup", b: Behavior{Kind: SOCKS5Proxy, Hangup: true}, send: greet, ends: true},
			{desc: "socks5 garbage", b: Behavior{Kind: SOCKS5Proxy, Garbage: true}, send: greet, reply: garbage},
			{desc: "socks5 silent", b: Behavior{Kind: SOCKS5Proxy, Silent: true}, send: greet + connect, reply: "\x05\x00"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				p := NewProxy(t, tc.b)
				c, err := net.Dial("tcp", p.URL.Host)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, tc.send)
				got := make([]byte, len(tc.reply))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != tc.reply {
					t.Fatalf("read %q, %v; want %q", got, err, tc.reply)
				}
				if !tc.ends {
					c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				}
				n, err := c.Read(make([]byte, 1))
				var ne net.Error
				switch {
				case tc.ends && err != io.EOF:
					t.Errorf("then read %d bytes, %v; want the end", n, err)
				case !tc.ends && !(errors.As(err, &ne) && ne.Timeout()):
					t.Errorf("then read %d bytes, %v; want silence", n, err)
				}
				if got := p.Requests(); got != 1 {
					t.Errorf("Requests() = %d, want 1", got)
				}
			})
		}
	})
}

// Proxies reach loopback targets only: anything else is refused as
// unreachable, and nothing is dialled. Asked still records the target.
func TestProxyStaysOnLoopback(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc  string
			b     Behavior
			url   string
			asked string
		}{
			{desc: "absolute-form", url: "http://192.0.2.1/", asked: "192.0.2.1"},
			{desc: "CONNECT", url: "https://192.0.2.1/", asked: "192.0.2.1:443"},
			{desc: "a name", url: "http://example.com:8080/", asked: "example.com:8080"},
			{desc: "socks5", b: Behavior{Kind: SOCKS5Proxy}, url: "http://192.0.2.1/", asked: "192.0.2.1:80"},
			{desc: "socks5 IPv6", b: Behavior{Kind: SOCKS5Proxy}, url: "http://[2001:db8::1]/", asked: "[2001:db8::1]:80"},
			{desc: "socks5 name", b: Behavior{Kind: SOCKS5Proxy}, url: "http://example.com:8080/", asked: "example.com:8080"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				p := NewProxy(t, tc.b)
				tr := &http.Transport{Proxy: http.ProxyURL(p.URL), DisableKeepAlives: true}
				resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(tc.url)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway {
						t.Fatalf("got %s, want 502 or a failed tunnel", resp.Status)
					}
				}
				if got := p.Requests(); got != 1 {
					t.Errorf("Requests() = %d, want 1", got)
				}
				if got := p.Asked(); len(got) != 1 || got[0] != tc.asked {
					t.Errorf("Asked() = %q, want [%q]", got, tc.asked)
				}
			})
		}
	})
}

// A stalled port neither accepts nor refuses: connecting times out.
func TestStalledPort(t *testing.T) {
	t.Parallel()
	c, err := net.DialTimeout("tcp", StalledPort(t), 50*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial: %v, want a timeout", err)
	}
}

// TestCloseCutsTunnels checks that closing a proxy ends tunnels still in
// use, and that a tunnel passes a half-close on (request, then read).
func TestCloseCutsTunnels(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		kinds := []struct {
			desc string
			kind Kind
		}{{"http", HTTPProxy}, {"socks5", SOCKS5Proxy}}
		for _, tc := range kinds {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				echo := ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
				p := NewProxy(t, Behavior{Kind: tc.kind})
				c := openTunnel(t, p, echo)
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))

				io.WriteString(c, "ping")
				buf := make([]byte, 4)
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
					t.Fatalf("echo: %q, %v", buf, err)
				}
				p.srv.close()
				if n, err := c.Read(buf); err == nil {
					t.Fatalf("read %d bytes after close, want the tunnel cut", n)
				}
			})
		}
		t.Run("half-close", func(t *testing.T) {
			t.Parallel()
			echo := ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
			p := NewProxy(t, Behavior{})
			c := openTunnel(t, p, echo)
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "ping")
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != "ping" {
				t.Fatalf("after half-close read %q, %v; want %q", got, err, "ping")
			}
		})
	})
}

// openTunnel opens a tunnel to addr through p by hand, so the test holds
// the raw connection.
func openTunnel(t *testing.T, p *Proxy, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if p.b.Kind == SOCKS5Proxy {
		ap := netip.MustParseAddrPort(addr)
		ip, port := ap.Addr().As4(), ap.Port()
		// Greeting offering no auth, then CONNECT to an IPv4 address.
		req := append([]byte{5, 1, 0, 5, 1, 0, 1}, ip[:]...)
		c.Write(append(req, byte(port>>8), byte(port)))
		reply := make([]byte, 2+10)
		if _, err := io.ReadFull(c, reply); err != nil || reply[1] != 0 || reply[3] != 0 {
			t.Fatalf("socks5 handshake: % x, %v", reply, err)
		}
	} else {
		io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
			t.Fatalf("CONNECT: %v, %v", resp, err)
		}
	}
	c.SetDeadline(time.Time{})
	return c
}

// TestStartWithoutTest runs proxies the way a demo does: Start, use,
// Close (twice is harmless), nothing left running.
func TestStartWithoutTest(t *testing.T) {
	if _, err := Start(Behavior{TLS: true, Kind: SOCKS5Proxy}); err == nil {
		t.Fatal("Start accepted TLS for a SOCKS5 proxy")
	}
	NoLeaks(t, func(t *testing.T) {
		site := target(t, false)
		p, err := Start(Behavior{BlockHosts: []string{"localhost"}})
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{Proxy: http.ProxyURL(p.URL), DisableKeepAlives: true}
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := client.Get(site.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello /x" {
			t.Fatalf("through the proxy: %q", body)
		}
		_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
		resp, err = client.Get("http://localhost:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("blocked host: status %d, want 403", resp.StatusCode)
		}
		p.Close()
		p.Close()
		if _, err := client.Get(site.URL); err == nil {
			t.Fatal("request through a closed proxy succeeded")
		}

		refused, err := Start(Behavior{Refuse: true})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := net.Dial("tcp", refused.URL.Host); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("dial a Refuse proxy: %v, want connection refused", err)
		}
		refused.Close()
	})
}

// A KeepAlive proxy serves the absolute-form requests of one connection
// one after another; without it, the connection ends after the first.
func TestProxyKeepAlive(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		for _, keep := range []bool{false, true} {
			site := target(t, false)
			p := NewProxy(t, Behavior{KeepAlive: keep})
			c, err := net.DialTimeout("tcp", p.URL.Host, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for i, path := range []string{"/one", "/two"} {
				io.WriteString(c, "GET "+site.URL+path+" HTTP/1.1\r\nHost: "+site.Listener.Addr().String()+"\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if i == 1 && !keep {
					if err == nil {
						t.Errorf("a second answer on a connection without KeepAlive: %d", resp.StatusCode)
					}
					break
				}
				if err != nil {
					t.Fatalf("KeepAlive %v, request %d: %v", keep, i, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if string(body) != "hello "+path || resp.Close == keep {
					t.Errorf("KeepAlive %v, request %d: %q, Connection: close %v", keep, i, body, resp.Close)
				}
			}
			c.Close()
		}
	})
}

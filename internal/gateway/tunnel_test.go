package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
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

// A tunnel carries both ways, whole and in order, through a proxy whose
// answer to CONNECT comes with the target's first words (route reads them
// with the answer and yields them first) and with bytes the client sent
// right behind its CONNECT (the server read them with the request): those
// go first, then the rest. The client's half-close reaches the target as
// one, and the target's answer after it still reaches the client.
func TestTunnelCarriesBothWays(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const banner = "220 target speaks first\r\n"
		// The proxy is the target: its answer and the banner in one write.
		proxy := routetest.ServeTCP(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"+banner)
			h := sha256.New()
			n, _ := io.Copy(h, br)
			fmt.Fprintf(c, "got %d bytes %x\n", n, h.Sum(nil))
		})
		v := newEnv(t, Config{}, "http://"+proxy)
		c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		sent := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		// The first 100 bytes in the CONNECT's own write.
		if _, err := io.WriteString(c, "CONNECT example.test:25 HTTP/1.1\r\nHost: example.test:25\r\n\r\n"+string(sent[:100])); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v, %v", resp, err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(sent[100:])
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			errc <- err
		}()
		got, err := io.ReadAll(br)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%sgot %d bytes %x\n", banner, len(sent), sha256.Sum256(sent))
		if string(got) != want {
			t.Errorf("the client read %q, want %q", got, want)
		}
		v.waitOutcome(t, 0, engine.OK)
	})
}

// pipe copies everything, what its reader held buffered first, and hands
// the rest to the kernel (spliced) when both ends are TCP connections or
// wrappers that hand theirs over; through TLS it copies by itself. spoke
// is called once, before the first bytes go out.
func TestPipe(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		payload := bytes.Repeat([]byte("switchyard "), 100_000)
		tests := []struct {
			desc    string
			wrap    func(net.Conn) net.Conn // the source connection as pipe gets it
			pending int                     // bytes read ahead into a bufio.Reader
			spliced bool
		}{
			{desc: "tcp to tcp", wrap: func(c net.Conn) net.Conn { return c }, spliced: true},
			{desc: "a wrapper handing over its tcp connection", wrap: func(c net.Conn) net.Conn { return handsOver{c} }, spliced: true},
			{desc: "buffered start, then tcp", wrap: func(c net.Conn) net.Conn { return c }, pending: 1000, spliced: true},
			{desc: "a wrapper that hides it", wrap: func(c net.Conn) net.Conn { return hides{c} }},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				srcFar, srcNear := tcpPair(t)
				dstNear, dstFar := tcpPair(t)
				go func() {
					srcFar.Write(payload)
					srcFar.Close()
				}()
				from := tc.wrap(srcNear)
				var src io.Reader = from
				if tc.pending > 0 {
					br := bufio.NewReader(from)
					if _, err := br.Peek(tc.pending); err != nil {
						t.Fatal(err)
					}
					src = br
				}
				got := make(chan []byte, 1)
				go func() {
					b, _ := io.ReadAll(dstFar)
					got <- b
				}()
				calls := 0
				_, spliced, err := pipe(dstNear, src, from, func() { calls++ })
				dstNear.Close()
				if err != nil || spliced != tc.spliced || calls != 1 {
					t.Errorf("pipe: spliced %v, %v, spoke called %d times; want spliced %v, no error, once", spliced, err, calls, tc.spliced)
				}
				if b := <-got; !bytes.Equal(b, payload) {
					t.Errorf("%d bytes arrived, want the %d sent", len(b), len(payload))
				}
			})
		}
		t.Run("tls", func(t *testing.T) {
			t.Parallel()
			site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
				w.Write(payload)
			}))
			t.Cleanup(site.Close)
			tc, err := tls.Dial("tcp", site.Listener.Addr().String(), site.Client().Transport.(*http.Transport).TLSClientConfig)
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			dstNear, dstFar := tcpPair(t)
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(dstFar)
				got <- b
			}()
			_, spliced, err := pipe(dstNear, tc, tc, func() {})
			dstNear.Close()
			if spliced || err != nil {
				t.Errorf("pipe from TLS: spliced %v, %v; want a copy, no error", spliced, err)
			}
			if b := <-got; !bytes.HasSuffix(b, payload) {
				t.Errorf("%d bytes arrived, not ending with the %d-byte body", len(b), len(payload))
			}
		})
	})
}

// handsOver wraps a TCP connection as the server's client connections do.
type handsOver struct{ net.Conn }

func (h handsOver) TCPConn() *net.TCPConn { return h.Conn.(*net.TCPConn) }

// hides wraps a connection and says nothing of what is beneath.
type hides struct{ net.Conn }

// tcpPair is the two ends of a TCP connection on 127.0.0.1.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	return a, b
}

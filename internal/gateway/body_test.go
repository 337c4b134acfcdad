package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// An answer whose body ends early is the attempt's failure, target_reset
// against the route×target, and the client sees the truncation (its
// connection is cut, never a clean end); a whole body is a success. Each
// break is tried direct and through an HTTP proxy.
func TestTruncatedBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	tests := []struct {
		desc   string
		answer string // what the site writes after reading the request
		reset  bool   // then resets the connection instead of closing it
		want   engine.Class
	}{
		{desc: "whole body", answer: head + "Content-Length: 5\r\n\r\nhello", want: engine.OK},
		{desc: "whole chunked body", answer: head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", want: engine.OK},
		{desc: "short of Content-Length", answer: head + "Content-Length: 100000\r\n\r\n" + strings.Repeat("x", 3000), want: engine.TargetReset},
		{desc: "chunk cut short", answer: head + "Transfer-Encoding: chunked\r\n\r\n64\r\nonly ten b", want: engine.TargetReset},
		{desc: "malformed chunk size", answer: head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n", want: engine.TargetReset},
		{desc: "no last chunk", answer: head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", want: engine.TargetReset},
		{desc: "reset mid-body", answer: head + "Content-Length: 100000\r\n\r\n" + strings.Repeat("x", 3000), reset: true, want: engine.TargetReset},
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, tc := range tests {
			for _, via := range []string{"direct", "http proxy"} {
				t.Run(tc.desc+"/"+via, func(t *testing.T) {
					t.Parallel()
					site := routetest.ServeTCP(t, func(c net.Conn) {
						defer c.Close()
						if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
							return
						}
						io.WriteString(c, tc.answer)
						if tc.reset {
							c.(*net.TCPConn).SetLinger(0)
						}
					})
					line := "direct"
					if via != "direct" {
						line = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
					}
					v := newEnv(t, Config{}, line)
					resp, err := v.client(t, "").Get("http://" + site + "/page")
					if err != nil {
						t.Fatal(err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if whole := err == nil; whole != (tc.want == engine.OK) {
						t.Errorf("client read %d bytes, error %v: want whole %v", len(body), err, tc.want == engine.OK)
					}
					v.waitOutcome(t, 0, tc.want)
				})
			}
		}
	})
}

// An answer whose body breaks off before its first byte (the exit sent a
// head and died) reaches the client as a 502 naming target_reset, not as
// a connection cut with nothing on it; the route×target takes the
// failure. The answer is of a type nothing judges: an HTML or JSON page's
// start is read within the attempt, whose failure is retried.
func TestBodyBrokenBeforeItsFirstByte(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\n"
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, answer := range []string{
			head + "Content-Length: 100\r\n\r\n",
			head + "Transfer-Encoding: chunked\r\n\r\n",
			head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
		} {
			for _, via := range []string{"direct", "http proxy"} {
				t.Run(fmt.Sprintf("%q/%s", answer[len(head):], via), func(t *testing.T) {
					t.Parallel()
					site := routetest.ServeTCP(t, func(c net.Conn) {
						defer c.Close()
						if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
							io.WriteString(c, answer)
						}
					})
					line := "direct"
					if via != "direct" {
						line = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
					}
					v := newEnv(t, Config{}, line)
					resp, err := v.client(t, "").Get("http://" + site + "/api")
					if err != nil {
						t.Fatal(err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(headerError) != "target_reset" || err != nil {
						t.Errorf("%d %s: %s, %q, %v; want 502 target_reset, read whole", resp.StatusCode, headerError, resp.Header.Get(headerError), body, err)
					}
					v.waitOutcome(t, 0, engine.TargetReset)
				})
			}
		}
	})
}

// A body still streaming at half the lease TTL is reported OK then, before
// it ends, so that a long download does not outlive its lease.
func TestLongBodyReportedBeforeItEnds(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		reported := make(chan struct{})
		site := routetest.ServeTCP(t, func(c net.Conn) {
			defer c.Close()
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
			<-reported
			io.WriteString(c, "world")
		})
		ecfg := engine.Config{Picker: &engine.RoundRobin{}, Seed: 1, LeaseTTL: 100 * time.Millisecond}
		v := newEnvEngine(t, ecfg, Config{}, "direct")
		got := make(chan string, 1)
		go func() {
			resp, err := v.client(t, "").Get("http://" + site + "/video")
			if err != nil {
				got <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got <- string(b)
		}()
		v.waitOutcome(t, 0, engine.OK)
		close(reported)
		if body := <-got; body != "helloworld" {
			t.Errorf("client got %q, want helloworld", body)
		}
	})
}

// A request body that breaks off on the client's side while it streams to
// the target (the client left, or the server cut it for being too slow) is
// no evidence against the route: the attempt is canceled and a client
// still there is told why.
func TestClientBodyBreakOffIsNoEvidence(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, via := range []string{"direct", "http proxy"} {
			for _, gone := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/client gone %v", via, gone), func(t *testing.T) {
					t.Parallel()
					site := newTarget(t, func(_ int, _ http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
					line := "direct"
					if via != "direct" {
						line = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
					}
					v := newEnv(t, Config{MaxBodyBytes: 16}, line)
					// The server's body deadline, as internal/server sets it,
					// surfaces to the handler as a failing read.
					slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						r.Body = struct {
							io.Reader
							io.Closer
						}{io.MultiReader(io.LimitReader(r.Body, 5000), iotest.ErrReader(errors.New("request body too slow"))), r.Body}
						v.g.ServeHTTP(w, r)
					}))
					defer slow.Close()
					addr := v.url.Host
					if !gone {
						addr = slow.Listener.Addr().String()
					}
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					io.WriteString(c, "POST "+site.URL+"/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("b", 5000))
					if gone {
						c.(*net.TCPConn).CloseWrite()
					}
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if !gone && (resp.StatusCode != http.StatusBadRequest || resp.Header.Get(headerError) != "bad_request") {
						t.Errorf("answered %d %q, want 400 bad_request", resp.StatusCode, resp.Header.Get(headerError))
					}
					v.waitOutcome(t, 0, engine.Canceled)
				})
			}
		}
	})
}

// A client that leaves while the upstream stalls mid-body ends the
// attempt: the upstream connection is closed at once, not held until the
// upstream gives up, and the route is not blamed for the client leaving.
// The answer's headers and first bytes reach the client as they come.
func TestClientLeavingEndsAStalledBody(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, via := range []string{"direct", "http proxy"} {
			t.Run(via, func(t *testing.T) {
				t.Parallel()
				released := make(chan struct{})
				site := routetest.ServeTCP(t, func(c net.Conn) {
					defer c.Close()
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nthe first bytes")
					io.Copy(io.Discard, c) // stalls until the gateway lets go
					close(released)
				})
				line := "direct"
				if via != "direct" {
					line = proxyLine(routetest.NewProxy(t, routetest.Behavior{}), "")
				}
				v := newEnv(t, Config{}, line)
				c, err := net.Dial("tcp", v.url.Host)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(c, "GET http://"+site+"/page HTTP/1.1\r\nHost: "+site+"\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
					t.Fatal(err)
				}
				c.Close()
				// Reported once the relay ends (or at half the lease TTL,
				// a minute away): the gateway let go.
				v.waitOutcome(t, 0, engine.OK)
				if via != "direct" {
					return // the test proxy itself holds on to the site until it writes
				}
				select {
				case <-released:
				case <-time.After(5 * time.Second):
					t.Fatal("the site's connection is still held 5s after the client left")
				}
			})
		}
	})
}

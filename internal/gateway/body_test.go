package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
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

package route_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// rawSite answers every request on a connection with answer, after
// keeping the request's bytes as they came (head and body), until the
// client closes; with closeAfter, it closes its side after each answer,
// as a server ending an idle keep-alive connection does, and says so on
// closed.
type rawSite struct {
	addr       string
	answer     string
	closeAfter bool
	closed     chan struct{} // one send per connection it closed

	mu       sync.Mutex
	requests []string // guarded by mu
	conns    int      // guarded by mu
}

func newRawSite(t *testing.T, answer string, closeAfter bool) *rawSite {
	s := &rawSite{answer: answer, closeAfter: closeAfter, closed: make(chan struct{}, 16)}
	s.addr = routetest.ServeTCP(t, func(c net.Conn) {
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		br := bufio.NewReader(c)
		for {
			// What the request's reader reads ahead of it is nothing: a
			// client sends its next request once this one is answered.
			var raw bytes.Buffer
			req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &raw)))
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			s.mu.Lock()
			s.requests = append(s.requests, raw.String())
			s.mu.Unlock()
			io.WriteString(c, s.answer)
			if s.closeAfter {
				c.Close()
				s.closed <- struct{}{}
				return
			}
		}
	})
	return s
}

// seen is every request the site read, as it came, and the connections
// it was opened on.
func (s *rawSite) seen() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...), s.conns
}

const noContent = "HTTP/1.1 204 No Content\r\n\r\n"

// A request leaves as net/http would write it, byte for byte: the request
// line in absolute form to an HTTP proxy (with the route's credentials,
// never a client's Proxy-Authorization) and in origin form to the target
// itself; Host, then User-Agent (none when empty), then the framing, then
// the headers sorted; an empty body said for the methods that carry one,
// a body of unknown length chunked.
func TestRequestAsWritten(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc   string
			method string
			header http.Header
			body   func() io.Reader
			length int64
			want   string // with HOST for the target's authority, TARGET for the request target, AUTH for the route's credentials
		}{
			{desc: "GET", method: http.MethodGet,
				header: http.Header{"X-B": {"2"}, "X-A": {"1", "one"}, "User-Agent": {""}, "Proxy-Authorization": {"Basic Y2xpZW50OnNlY3JldA=="}},
				want:   "GET TARGET HTTP/1.1\r\nHost: HOST\r\nX-A: 1\r\nX-A: one\r\nX-B: 2\r\nAUTH\r\n"},
			{desc: "user agent", method: http.MethodGet, header: http.Header{"User-Agent": {"crawler/1"}, "Accept": {"*/*"}},
				want: "GET TARGET HTTP/1.1\r\nHost: HOST\r\nUser-Agent: crawler/1\r\nAccept: */*\r\nAUTH\r\n"},
			{desc: "empty POST", method: http.MethodPost, header: http.Header{},
				want: "POST TARGET HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\nAUTH\r\n"},
			{desc: "PUT of known length", method: http.MethodPut, header: http.Header{"Content-Type": {"text/plain"}}, body: func() io.Reader { return strings.NewReader("abc") }, length: 3,
				want: "PUT TARGET HTTP/1.1\r\nHost: HOST\r\nContent-Length: 3\r\nContent-Type: text/plain\r\nAUTH\r\nabc"},
			{desc: "POST of unknown length", method: http.MethodPost, header: http.Header{}, body: func() io.Reader { return io.MultiReader(strings.NewReader("ab"), strings.NewReader("c")) }, length: -1,
				want: "POST TARGET HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\nAUTH\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"},
		}
		for _, via := range []string{"direct", "proxy"} {
			for _, tc := range tests {
				t.Run(via+"/"+tc.desc, func(t *testing.T) {
					site := newRawSite(t, noContent, false)
					r := &route.Route{ID: "direct", Scheme: route.Direct}
					host, auth := site.addr, ""
					if via == "proxy" { // the site plays the proxy: the URL's host is never dialled
						r = routeFor(t, &url.URL{Scheme: "http", Host: site.addr, User: url.UserPassword("user", "pass")})
						host, auth = "site.test", "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"
					}
					x := newExit(t, dialCase{r: r}, route.Dialer{})
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					req, err := http.NewRequestWithContext(ctx, tc.method, "http://"+host+"/p?q=1", nil)
					if err != nil {
						t.Fatal(err)
					}
					req.Header = tc.header
					if tc.body != nil {
						req.Body, req.ContentLength = io.NopCloser(tc.body()), tc.length
					}
					resp, err := x.RoundTrip(req, new(route.Progress))
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					target := "/p?q=1"
					if via == "proxy" {
						target = "http://site.test/p?q=1"
					}
					want := strings.NewReplacer("TARGET", target, "HOST", host, "AUTH", auth).Replace(tc.want)
					if got, _ := site.seen(); len(got) != 1 || got[0] != want {
						t.Errorf("the request went out as\n%q\nwant\n%q", got, want)
					}
				})
			}
		}
	})
}

// A request that cannot be written as it is never leaves: a
// *RequestError, client_error, reaching nothing, whatever the route.
func TestRequestRefusedUnwritten(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, tc := range []struct {
			desc   string
			header http.Header
			host   string
		}{
			{desc: "a value that splits the head", header: http.Header{"X-A": {"1\r\nX-Injected: 2"}}},
			{desc: "an invalid name", header: http.Header{"X A": {"1"}}},
			{desc: "a Host that splits the head", host: "site.test\r\nX-Injected: 2"},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				site := newRawSite(t, noContent, false)
				x := newExit(t, dialCase{r: &route.Route{ID: "direct", Scheme: route.Direct}}, route.Dialer{})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+site.addr+"/", nil)
				req.Header, req.Host = tc.header, tc.host
				p := new(route.Progress)
				_, err := x.RoundTrip(req, p)
				if !errors.As(err, new(*route.RequestError)) {
					t.Fatalf("got %v, want a *RequestError", err)
				}
				if class, reached := route.Classify(err, p); class != engine.ClientError || reached {
					t.Errorf("Classify = %v, reached %v; want client_error, not reached", class, reached)
				}
				if got, _ := site.seen(); len(got) != 0 {
					t.Errorf("the site read %q", got)
				}
			})
		}
	})
}

// Interim answers (100 Continue, 103 Early Hints) before the final one
// are read past, up to a bound.
func TestInterimAnswers(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, tc := range []struct {
			interim int
			ok      bool
		}{{0, true}, {2, true}, {5, true}, {6, false}} {
			answer := strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", tc.interim) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
			site := newRawSite(t, answer, false)
			x := newExit(t, dialCase{r: &route.Route{ID: "direct", Scheme: route.Direct}}, route.Dialer{})
			got, err := get(x, "http://"+site.addr+"/")
			switch {
			case tc.ok && (err != nil || got != "ok"):
				t.Errorf("%d interim answers: %q, %v; want ok", tc.interim, got, err)
			case !tc.ok && err == nil:
				t.Errorf("%d interim answers: %q, want an error past the bound", tc.interim, got)
			}
		}
	})
}

// get GETs u through x and reads the answer's body.
func get(x *route.Exit, u string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := x.RoundTrip(req, new(route.Progress))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A kept connection the other end closed while it was idle fails at once,
// and a request that may be sent twice goes again on a fresh one: the
// caller sees an answer, not the closed connection, whether the
// connection was to an HTTP proxy or to the target.
func TestKeptConnectionClosedMeanwhile(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, via := range []string{"direct", "proxy"} {
			t.Run(via, func(t *testing.T) {
				site := newRawSite(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true)
				r := &route.Route{ID: "direct", Scheme: route.Direct}
				host := site.addr
				if via == "proxy" {
					r, host = routeFor(t, &url.URL{Scheme: "http", Host: site.addr}), "site.test"
				}
				u := route.NewUpstream(0, 0)
				x := newExit(t, dialCase{r: r}, route.Dialer{Upstream: u})
				for i := range 3 {
					if got, err := get(x, "http://"+host+"/"); err != nil || got != "ok" {
						t.Fatalf("request %d: %q, %v", i, got, err)
					}
					<-site.closed
				}
				if reqs, conns := site.seen(); len(reqs) != 3 || conns != 3 {
					t.Errorf("the site read %d requests on %d connections, want 3 on 3", len(reqs), conns)
				}
			})
		}
	})
}

// The connections of a provider gateway's sessions (Exit.WithUser) are
// theirs: other credentials, another IP at the provider. An https://
// request of one session never rides the tunnel another session built.
func TestSessionsKeepTheirOwnTunnels(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		t.Cleanup(site.Close)
		roots := &tls.Config{RootCAs: site.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		proxy := routetest.NewProxy(t, routetest.Behavior{})
		gw := routeFor(t, &url.URL{Scheme: "http", Host: proxy.URL.Host, User: url.UserPassword("acct", "pw")})
		x := newExit(t, dialCase{r: gw}, route.Dialer{TargetTLS: roots})
		var sessions [2]*route.Exit
		for i := range sessions {
			var err error
			if sessions[i], err = x.WithUser("acct-session-"+string(rune('a'+i)), i+1); err != nil {
				t.Fatal(err)
			}
		}
		for round := range 2 {
			for i, s := range sessions {
				if got, err := get(s, site.URL+"/"); err != nil || got != "ok" {
					t.Fatalf("round %d, session %d: %q, %v", round, i, got, err)
				}
			}
		}
		if n := proxy.Requests(); n != 2 {
			t.Errorf("the proxy built %d tunnels for 2 sessions, want one each, kept", n)
		}
	})
}

// An answer whose headers never end is refused once they pass a bound,
// as net/http's Transport refuses them, and not read on into memory.
func TestAnswerHeadBounded(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		site := newRawSite(t, "HTTP/1.1 200 OK\r\n"+strings.Repeat(line, 2000)+"Content-Length: 2\r\n\r\nok", false)
		x := newExit(t, dialCase{r: &route.Route{ID: "direct", Scheme: route.Direct}}, route.Dialer{})
		if got, err := get(x, "http://"+site.addr+"/"); err == nil {
			t.Fatalf("an answer with 2 MB of headers was read: %d bytes of body", len(got))
		}
		small := newRawSite(t, "HTTP/1.1 200 OK\r\n"+strings.Repeat(line, 500)+"Content-Length: 2\r\n\r\nok", false)
		if got, err := get(x, "http://"+small.addr+"/"); err != nil || got != "ok" {
			t.Errorf("an answer with 500 KB of headers: %q, %v; want ok", got, err)
		}
	})
}

package gateway

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A POST reaches its target at most once, whatever the target or the way
// out does to it: every failure a target can answer or inflict, on every
// route type, with three routes to retry on.
func TestPostDeliveredAtMostOnce(t *testing.T) {
	hijack := func(w http.ResponseWriter, reply string) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString(reply)
		brw.Flush()
	}
	status := func(code int, header ...string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.WriteHeader(code)
		}
	}
	forms := []struct {
		desc   string
		handle func(http.ResponseWriter, *http.Request)
	}{
		{"407 dressed as a proxy's", status(http.StatusProxyAuthRequired, "Proxy-Authenticate", `Basic realm="x"`)},
		{"bare 407", status(http.StatusProxyAuthRequired)},
		{"403", status(http.StatusForbidden)},
		{"429 with Retry-After", status(http.StatusTooManyRequests, "Retry-After", "1")},
		{"500", status(http.StatusInternalServerError)},
		{"503 with Retry-After", status(http.StatusServiceUnavailable, "Retry-After", "1")},
		{"reset without an answer", func(w http.ResponseWriter, _ *http.Request) { hijack(w, "") }},
		{"body cut short", func(w http.ResponseWriter, _ *http.Request) {
			hijack(w, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		}},
		{"garbage answer", func(w http.ResponseWriter, _ *http.Request) { hijack(w, "SSH-2.0-nope\r\n\r\n") }},
		{"silent past the attempt timeout", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	}
	kinds := []struct {
		desc  string
		lines func(t *testing.T) []string
	}{
		{"direct", func(*testing.T) []string { return []string{"direct id=d1", "direct id=d2", "direct id=d3"} }},
		{"http proxy", proxies(routetest.Behavior{User: "u", Password: "p"})},
		{"socks5 proxy", proxies(routetest.Behavior{Kind: routetest.SOCKS5Proxy, User: "u", Password: "p"})},
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		for _, k := range kinds {
			for _, f := range forms {
				t.Run(k.desc+"/"+f.desc, func(t *testing.T) {
					t.Parallel()
					posts := map[string]int{}
					var mu = make(chan struct{}, 1)
					site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
						b, _ := io.ReadAll(r.Body)
						mu <- struct{}{}
						posts[string(b)]++
						<-mu
						f.handle(w, r)
					})
					v := newEnv(t, Config{AttemptTimeout: 300 * time.Millisecond}, k.lines(t)...)
					client := v.client(t, "")
					for i := range 3 {
						resp, err := client.Post(site.URL+"/order", "text/plain", strings.NewReader("order="+strconv.Itoa(i)))
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
					mu <- struct{}{}
					defer func() { <-mu }()
					if len(posts) == 0 {
						t.Fatal("no POST reached the target: the test proves nothing")
					}
					for order, n := range posts {
						if n > 1 {
							t.Errorf("%s delivered %d times", order, n)
						}
					}
				})
			}
		}
	})
}

// proxies is three routetest proxies behaving as b, as list lines.
func proxies(b routetest.Behavior) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		var lines []string
		for range 3 {
			lines = append(lines, proxyLine(routetest.NewProxy(t, b), ""))
		}
		return lines
	}
}

// A page the gateway read whole to judge it reaches the client with its
// length, however the site framed it; one longer than what is read
// streams on chunked, and an answer without a body is given no length.
func TestDeliveredLength(t *testing.T) {
	page := func(n int) string { return strings.Repeat("p", n) }
	cases := []struct {
		desc, method string
		size         int   // of the page the site sends, chunked
		wantLength   int64 // resp.ContentLength at the client
	}{
		{"small chunked page", http.MethodGet, 5000, 5000},
		{"page the size of the window", http.MethodGet, signatureWindow, -1},
		{"long chunked page", http.MethodGet, 3 * signatureWindow, -1},
		{"HEAD of a chunked page", http.MethodHead, 5000, -1},
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Type", "text/html")
			w.(http.Flusher).Flush() // no length: chunked
			io.WriteString(w, page(n))
		})
		v := newEnv(t, Config{}, "direct")
		client := v.client(t, "")
		for _, tc := range cases {
			t.Run(tc.desc, func(t *testing.T) {
				req, _ := http.NewRequest(tc.method, site.URL+"/?n="+strconv.Itoa(tc.size), nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if resp.ContentLength != tc.wantLength {
					t.Errorf("Content-Length %d (Transfer-Encoding %v), want %d", resp.ContentLength, resp.TransferEncoding, tc.wantLength)
				}
				want := page(tc.size)
				if tc.method == http.MethodHead {
					want = ""
				}
				if string(body) != want {
					t.Errorf("body of %d bytes, want %d", len(body), len(want))
				}
			})
		}
	})
}

package route

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzWriteRequest holds writeRequest to what a request smuggler would
// try: whatever the method, target, Host, header and body, the request
// either is refused (*RequestError) or goes out as one request that
// net/http's own parser reads back as it was meant, no header more or
// less, nothing left over behind it.
func FuzzWriteRequest(f *testing.F) {
	f.Add("GET", "/p?q=1", "site.test", "X-A", "1", "", false)
	f.Add("POST", "/form", "site.test:8080", "Content-Type", "text/plain", "a=1", true)
	f.Add("PUT", "/", "site.test", "X-A", "1\r\nX-Injected: 2", "abc", false)
	f.Add("GET", "/ HTTP/1.1\r\nX: y", "site.test", "X-A", "1", "", true)
	f.Add("GET", "/", "site.test\r\nX-Injected: 2", "X-A", "1", "", false)
	f.Add("GET", "/", "site.test", "Transfer-Encoding", "chunked", "0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n", false)
	f.Add("POST", "/", "site.test", "Content-Length", "0", "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", true)
	// A second Host or framing header spelt in lower case is a second one.
	f.Add("POST", "/", "site.test", "content-length", "0", "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", false)
	f.Add("GET", "/", "site.test", "host", "other.test", "", false)
	f.Fuzz(func(t *testing.T, method, target, host, name, value, body string, absolute bool) {
		if !validMethod(method) {
			t.Skip() // the gateway takes methods from net/http's parser or the fetch API's check
		}
		u, err := url.Parse("http://" + host + target)
		if err != nil || u.Host == "" {
			t.Skip()
		}
		req := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{name: {value}}}
		if body != "" {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			if len(body)%2 == 1 {
				req.ContentLength = -1 // chunked
			}
		}
		auth := "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := writeRequest(bw, req, absolute, auth); err != nil {
			if !errors.As(err, new(*RequestError)) {
				t.Fatalf("writeRequest: %v, want a *RequestError or nothing", err)
			}
			return
		}
		br := bufio.NewReader(&out)
		got, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("written %q, which does not parse: %v", out.String(), err)
		}
		gotBody, err := io.ReadAll(got.Body)
		if err != nil || string(gotBody) != body {
			t.Fatalf("body read back %q, %v; want %q", gotBody, err, body)
		}
		if br.Buffered() > 0 {
			t.Fatalf("written %q: %d bytes behind the request", out.String(), br.Buffered())
		}
		wantHost := cmp.Or(host, u.Host) // without a Host, the URL's, as net/http's Transport writes it
		if absolute {
			wantHost = u.Host // an absolute-form target's authority wins over Host (RFC 9112 §3.2.2)
		}
		if got.Method != method || got.Host != wantHost {
			t.Fatalf("read back %s for Host %q, want %s for %q", got.Method, got.Host, method, wantHost)
		}
		want := http.Header{}
		if !excludedHeader(http.CanonicalHeaderKey(name)) {
			want[http.CanonicalHeaderKey(name)] = []string{strings.Trim(value, " \t")}
		} else if http.CanonicalHeaderKey(name) == "User-Agent" && strings.Trim(value, " \t") != "" {
			want["User-Agent"] = []string{strings.Trim(value, " \t")}
		}
		if absolute {
			want["Proxy-Authorization"] = []string{"Basic dXNlcjpwYXNz"}
		}
		for k, v := range got.Header {
			if k == "Content-Length" || k == "Transfer-Encoding" {
				continue // the framing, checked by the body read back
			}
			if w, ok := want[k]; !ok || !slices.Equal(v, w) {
				t.Fatalf("written %q: header %s %q, want %q", out.String(), k, v, want[k])
			}
			delete(want, k)
		}
		for k, v := range want {
			if v[0] != "" {
				t.Fatalf("written %q: header %s %q lost", out.String(), k, v)
			}
		}
	})
}

// validMethod reports whether m is an HTTP method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, r := range m {
		if r > 0x7f || !strings.ContainsRune("!#$%&'*+-.^_`|~", r) && !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}

package frontdoor

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a connection's goroutine, a watch or a
// server outlives its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves s on a new loopback listener until the test ends.
func start(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// dial opens a client connection that the test's end closes.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails, never blocks the run
	t.Cleanup(func() { c.Close() })
	return c
}

// answer is one answer read off a connection, its body whole.
type answer struct {
	*http.Response
	body string
}

func readAnswer(t *testing.T, br *bufio.Reader, method string) answer {
	t.Helper()
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return answer{res, string(body)}
}

// closedAfter reports whether the server closed c once what was read is
// read.
func closedAfter(br *bufio.Reader) bool {
	_, err := br.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestFraming(t *testing.T) {
	big := strings.Repeat("x", holdSize+1)
	tests := []struct {
		name    string
		request string
		handler http.HandlerFunc
		method  string

		status    int
		length    int64 // -1: none
		chunked   bool
		body      string
		header    map[string]string // "" value: absent
		closeConn bool
	}{
		{
			name:    "a short page gets its length",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") },
			status:  200, length: 5, body: "hello",
			header: map[string]string{"Date": "*"},
		},
		{
			name:    "a long page of unknown length is chunked",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) },
			status:  200, length: -1, chunked: true, body: big,
		},
		{
			name:    "a declared length is kept",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "3")
				w.Header().Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
				io.WriteString(w, "abc")
			},
			status: 200, length: 3, body: "abc",
			header: map[string]string{"Date": "Mon, 01 Jan 2024 00:00:00 GMT"},
		},
		{
			name:    "HEAD keeps the length and sends no body",
			request: "HEAD http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			method:  "HEAD",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "10")
				io.WriteString(w, "0123456789")
			},
			status: 200, length: 10,
		},
		{
			name:    "204 has no length",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "5")
				w.WriteHeader(http.StatusNoContent)
			},
			status: 204, length: 0,
			header: map[string]string{"Content-Length": ""},
		},
		{
			name:    "a handler that writes nothing answers 200 and no body",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(http.ResponseWriter, *http.Request) {},
			status:  200, length: 0,
		},
		{
			name:    "an HTTP/1.0 client asking to keep the connection is told so",
			request: "GET http://site/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") },
			status:  200, length: 2, body: "ok",
			header: map[string]string{"Connection": "keep-alive"},
		},
		{
			name:    "an HTTP/1.0 client gets a long page delimited by the close",
			request: "GET http://site/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) },
			status:  200, length: -1, body: big, closeConn: true,
		},
		{
			name:    "a handler's Connection: close ends the connection",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Connection", "close")
				io.WriteString(w, "bye")
			},
			status: 200, length: 3, body: "bye", closeConn: true,
		},
		{
			name:    "a client's Connection: close ends the connection",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\nConnection: close\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "bye") },
			status:  200, length: 3, body: "bye", closeConn: true,
		},
		{
			name:    "a body shorter than declared ends the connection",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "10")
				io.WriteString(w, "abc")
			},
			status: 200, length: 10, closeConn: true,
		},
		{
			name:    "line breaks in a value become spaces",
			request: "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["X-Split"] = []string{"a\r\nInjected: yes"}
				w.Header()["Bad Name"] = []string{"dropped"}
			},
			status: 200, length: 0,
			header: map[string]string{"X-Split": "a Injected: yes", "Injected": "", "Bad Name": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := start(t, &Server{Handler: tt.handler})
			c := dial(t, addr)
			io.WriteString(c, tt.request)
			br := bufio.NewReader(c)
			method := cmpOr(tt.method, "GET")
			if tt.length == 10 && method == "GET" {
				// The client sees the short body cut: read the head only.
				res, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadAll(res.Body); err == nil {
					t.Error("a body cut short read as whole")
				}
				return
			}
			a := readAnswer(t, br, method)
			if a.StatusCode != tt.status {
				t.Errorf("status %d, want %d", a.StatusCode, tt.status)
			}
			if a.ContentLength != tt.length {
				t.Errorf("Content-Length %d, want %d", a.ContentLength, tt.length)
			}
			if chunked := len(a.TransferEncoding) > 0 && a.TransferEncoding[0] == "chunked"; chunked != tt.chunked {
				t.Errorf("chunked %v, want %v", chunked, tt.chunked)
			}
			if a.body != tt.body {
				t.Errorf("body %.20q (%d bytes), want %.20q (%d)", a.body, len(a.body), tt.body, len(tt.body))
			}
			for k, want := range tt.header {
				got, ok := a.Header[k]
				switch {
				case want == "" && ok:
					t.Errorf("%s: %q, want none", k, got)
				case want == "*" && !ok:
					t.Errorf("%s missing", k)
				case want != "" && want != "*" && (len(got) != 1 || got[0] != want):
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			if a.Close != tt.closeConn {
				t.Errorf("the answer says close %v, want %v", a.Close, tt.closeConn)
			}
			if tt.closeConn {
				if !closedAfter(br) {
					t.Error("the connection was kept")
				}
				return
			}
			io.WriteString(c, tt.request) // kept: it serves another
			if again := readAnswer(t, br, method); again.StatusCode != tt.status {
				t.Errorf("the next request on the connection: %d", again.StatusCode)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestKeepAlive: requests sent together are answered in order on one
// connection, each with its own body.
func TestKeepAlive(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.URL.Path+":"+string(body))
	})})
	c := dial(t, addr)
	io.WriteString(c, "POST http://site/a HTTP/1.1\r\nHost: site\r\nContent-Length: 3\r\n\r\none"+
		"GET http://site/b HTTP/1.1\r\nHost: site\r\n\r\n"+
		"POST http://site/c HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n")
	br := bufio.NewReader(c)
	for _, want := range []string{"/a:one", "/b:", "/c:two"} {
		if a := readAnswer(t, br, "GET"); a.body != want {
			t.Errorf("body %q, want %q", a.body, want)
		}
	}
}

// TestUnreadBody: a body the handler left is read off when it is small, and
// the connection serves the next request; a large one ends the connection.
func TestUnreadBody(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})})
	for _, tt := range []struct {
		size      int
		closeConn bool
	}{{100, false}, {maxDiscard + 10, true}} {
		c := dial(t, addr)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			io.WriteString(c, "POST http://site/ HTTP/1.1\r\nHost: site\r\nContent-Length: "+strconv.Itoa(tt.size)+"\r\n\r\n")
			io.WriteString(c, strings.Repeat("b", tt.size))
		}()
		br := bufio.NewReader(c)
		readAnswer(t, br, "POST") // answered before the body is read
		if !tt.closeConn {
			<-sent // the next request after the whole body, not inside it
			io.WriteString(c, "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n")
			if a := readAnswer(t, br, "GET"); a.body != "ok" {
				t.Errorf("after a %d-byte body left unread: %q", tt.size, a.body)
			}
		} else if !closedAfter(br) {
			t.Errorf("a %d-byte body left unread kept the connection", tt.size)
		}
		<-sent
	}
}

// TestExpectContinue: the go-ahead goes out when the handler first reads
// the body, and never when it answers without reading it.
func TestExpectContinue(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			t.Error("the handler saw Expect")
		}
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Write(body)
	})})

	c := dial(t, addr)
	io.WriteString(c, "PUT http://site/ HTTP/1.1\r\nHost: site\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	br := bufio.NewReader(c)
	if a := readAnswer(t, br, "PUT"); a.StatusCode != http.StatusContinue {
		t.Fatalf("status %d before the body, want 100", a.StatusCode)
	}
	io.WriteString(c, "data")
	if a := readAnswer(t, br, "PUT"); a.StatusCode != 200 || a.body != "data" {
		t.Errorf("answer %d %q, want 200 \"data\"", a.StatusCode, a.body)
	}

	c = dial(t, addr)
	io.WriteString(c, "PUT http://site/refuse HTTP/1.1\r\nHost: site\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	br = bufio.NewReader(c)
	if a := readAnswer(t, br, "PUT"); a.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403 without a 100 first", a.StatusCode)
	}
	if !closedAfter(br) {
		t.Error("the connection stayed open with the body never sent")
	}
}

func TestRefusals(t *testing.T) {
	addr := start(t, &Server{
		MaxHeaderBytes: 1024,
		Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Error("the handler ran")
		}),
	})
	tests := []struct {
		request string
		status  int
		reason  string
	}{
		{"GARBAGE\r\n\r\n", 400, "malformed HTTP request"},
		{"GET / HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "malformed Host header"},
		{"GET http://site/ HTTP/1.1\r\nHost: site\r\nX-Big: " + strings.Repeat("a", 8000) + "\r\n\r\n", 431, "too large"},
		{"POST http://site/ HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported transfer encoding"},
		{"GET http://site/ HTTP/2.0\r\nHost: site\r\n\r\n", 505, "unsupported protocol version"},
		{"GET http://site/ HTTP/1.1\r\nHost: site\r\nExpect: magic\r\n\r\n", 417, ""},
	}
	for _, tt := range tests {
		c := dial(t, addr)
		io.WriteString(c, tt.request)
		br := bufio.NewReader(c)
		a := readAnswer(t, br, "GET")
		if a.StatusCode != tt.status || !strings.Contains(a.body, tt.reason) {
			t.Errorf("%.40q: %d %q, want %d naming %q", tt.request, a.StatusCode, a.body, tt.status, tt.reason)
		}
		if !closedAfter(br) {
			t.Errorf("%.40q: the connection stayed open", tt.request)
		}
	}
}

// TestClientLeaving: a handler waiting on a slow exit learns that its
// client closed the connection, with or without a request body.
func TestClientLeaving(t *testing.T) {
	for _, request := range []string{
		"GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
		"POST http://site/ HTTP/1.1\r\nHost: site\r\nContent-Length: 2\r\n\r\nhi",
	} {
		canceled := make(chan error, 1)
		addr := start(t, &Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
				canceled <- r.Context().Err()
			case <-time.After(10 * time.Second):
				canceled <- nil
			}
		})})
		c := dial(t, addr)
		io.WriteString(c, request)
		c.Close()
		if err := <-canceled; !errors.Is(err, context.Canceled) {
			t.Errorf("%.20q: the handler's context ended with %v, want it canceled", request, err)
		}
	}
}

// TestPipelinedIsNotLeaving: the next request's bytes, sent while the
// first is served, are not the client leaving, and stay to be read.
func TestPipelinedIsNotLeaving(t *testing.T) {
	var s *Server
	entered := make(chan struct{})
	s = &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/1" {
			close(entered)
			// Wait (bounded) for the watch to have seen the bytes.
			for end := time.Now().Add(5 * time.Second); watchState(s) != watchEnded && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			if watchState(s) != watchEnded {
				t.Error("the watch never saw the pipelined request")
			}
		}
		if err := r.Context().Err(); err != nil {
			t.Errorf("request %s: context %v", r.URL.Path, err)
		}
		io.WriteString(w, r.URL.Path)
	})}
	addr := start(t, s)
	c := dial(t, addr)
	io.WriteString(c, "GET http://site/1 HTTP/1.1\r\nHost: site\r\n\r\n")
	<-entered
	io.WriteString(c, "GET http://site/2 HTTP/1.1\r\nHost: site\r\n\r\n")
	br := bufio.NewReader(c)
	for _, want := range []string{"/1", "/2"} {
		if a := readAnswer(t, br, "GET"); a.body != want {
			t.Errorf("body %q, want %q", a.body, want)
		}
	}
}

// watchState is the watch state of s's one connection.
func watchState(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.watch.mu.Lock()
		defer c.watch.mu.Unlock()
		return c.watch.state
	}
	return -1
}

// TestHijack: the handler gets the connection, with the bytes the client
// sent beyond the request, and the server lets go of it, whether the watch
// for the client leaving had started (a slow exit's CONNECT) or not.
func TestHijack(t *testing.T) {
	for _, slow := range []bool{false, true} {
		hijack(t, slow)
	}
}

func hijack(t *testing.T, slow bool) {
	var states []http.ConnState
	var mu sync.Mutex
	var s *Server
	s = &Server{
		ConnState: func(_ net.Conn, st http.ConnState) {
			mu.Lock()
			states = append(states, st)
			mu.Unlock()
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if slow {
				for end := time.Now().Add(5 * time.Second); watchState(s) != watchRunning && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
			}
			nc, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
			brw.Flush()
			line, err := brw.ReadString('\n')
			if err != nil {
				t.Errorf("reading through the tunnel: %v", err)
			}
			io.WriteString(nc, "echo "+line)
		}),
	}
	addr := start(t, s)
	c := dial(t, addr)
	// Sent with the request, the line is read in with it; sent after,
	// it leaves the watch nothing to see before the hijack.
	if slow {
		io.WriteString(c, "CONNECT site:443 HTTP/1.1\r\nHost: site:443\r\n\r\n")
	} else {
		io.WriteString(c, "CONNECT site:443 HTTP/1.1\r\nHost: site:443\r\n\r\nearly\n")
	}
	br := bufio.NewReader(c)
	// The tunnel's bytes are no body: read the head alone.
	if res, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || res.StatusCode != 200 {
		t.Fatalf("answer %v, %v", res, err)
	}
	if slow {
		io.WriteString(c, "early\n")
	}
	if line, _ := br.ReadString('\n'); line != "echo early\n" {
		t.Errorf("through the tunnel: %q", line)
	}
	if !closedAfter(br) {
		t.Error("the handler's close did not end the connection")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []http.ConnState{http.StateNew, http.StateActive, http.StateHijacked}
	if !equalStates(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
}

func equalStates(a, b []http.ConnState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestConnStates: the hooks see what net/http's Server shows them.
func TestConnStates(t *testing.T) {
	states := make(chan http.ConnState, 16)
	type key struct{}
	s := &Server{
		ConnState:   func(_ net.Conn, st http.ConnState) { states <- st },
		ConnContext: func(ctx context.Context, nc net.Conn) context.Context { return context.WithValue(ctx, key{}, nc) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := r.Context().Value(key{}).(net.Conn); !ok {
				t.Error("the request's context lacks ConnContext's value")
			}
			if r.RemoteAddr == "" {
				t.Error("no RemoteAddr")
			}
		}),
	}
	addr := start(t, s)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for range 2 {
		io.WriteString(c, "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n")
		readAnswer(t, br, "GET")
	}
	c.Close()
	want := []http.ConnState{http.StateNew, http.StateActive, http.StateIdle, http.StateActive, http.StateIdle, http.StateClosed}
	var got []http.ConnState
	for range want {
		select {
		case st := <-states:
			got = append(got, st)
		case <-time.After(5 * time.Second):
			t.Fatalf("states %v, then nothing; want %v", got, want)
		}
	}
	if !equalStates(got, want) {
		t.Errorf("states %v, want %v", got, want)
	}
}

// TestTimeouts: a head that stops coming and an idle connection are closed.
func TestTimeouts(t *testing.T) {
	addr := start(t, &Server{
		ReadHeaderTimeout: 50 * time.Millisecond,
		IdleTimeout:       50 * time.Millisecond,
		Handler:           http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
	})
	c := dial(t, addr)
	io.WriteString(c, "GET http://site/ HTTP/1.1\r\n")
	if !closedAfter(bufio.NewReader(c)) {
		t.Error("a head cut short kept the connection")
	}
	c = dial(t, addr)
	io.WriteString(c, "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n")
	br := bufio.NewReader(c)
	readAnswer(t, br, "GET")
	if !closedAfter(br) {
		t.Error("an idle connection was kept")
	}
}

// TestPanics: a handler's panic ends its connection, is logged unless it
// is http.ErrAbortHandler, and the server goes on.
func TestPanics(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	s := &Server{
		Log: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(p)
		}), nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/abort":
				panic(http.ErrAbortHandler)
			case "/bug":
				panic("a bug")
			}
			io.WriteString(w, "fine")
		}),
	}
	addr := start(t, s)
	for _, path := range []string{"/abort", "/bug"} {
		c := dial(t, addr)
		io.WriteString(c, "GET http://site"+path+" HTTP/1.1\r\nHost: site\r\n\r\n")
		if !closedAfter(bufio.NewReader(c)) {
			t.Errorf("%s: the connection was not closed", path)
		}
	}
	c := dial(t, addr)
	io.WriteString(c, "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n")
	if a := readAnswer(t, bufio.NewReader(c), "GET"); a.body != "fine" {
		t.Errorf("after the panics: %q", a.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "panic serving"); n != 1 || !strings.Contains(logged.String(), "a bug") {
		t.Errorf("logged %d panics, want the bug alone:\n%s", n, logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestShutdown: idle connections close at once; a request being served
// finishes, told the connection ends, before Shutdown returns.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})}
	addr := start(t, s)
	idle := dial(t, addr)
	io.WriteString(idle, "GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n")
	idleR := bufio.NewReader(idle)
	readAnswer(t, idleR, "GET")

	busy := dial(t, addr)
	io.WriteString(busy, "GET http://site/slow HTTP/1.1\r\nHost: site\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	if !closedAfter(idleR) {
		t.Error("the idle connection was not closed")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	busyR := bufio.NewReader(busy)
	a := readAnswer(t, busyR, "GET")
	if a.body != "done" || !a.Close {
		t.Errorf("the request in flight: %q, close %v; want \"done\", closing", a.body, a.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

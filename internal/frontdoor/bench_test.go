package frontdoor

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkServe is one keep-alive client's requests answered with a 4 KiB
// page, through the front door and through net/http's Server side by side:
// allocations and time per request of the server and its client together
// (the client is the same for both).
//
//	go test -run '^$' -bench Serve -benchmem -count 6 ./internal/frontdoor
func BenchmarkServe(b *testing.B) {
	page := []byte(strings.Repeat("x", 4096))
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "4096")
		w.Write(page)
	})
	type server interface {
		Serve(net.Listener) error
		Close() error
	}
	servers := []struct {
		name string
		server
	}{
		{"server=frontdoor", &Server{Handler: handler}},
		{"server=net-http", &http.Server{Handler: handler}},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- s.Serve(ln) }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			request := []byte("GET http://site/ HTTP/1.1\r\nHost: site\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			br := bufio.NewReader(c)
			buf := make([]byte, len(page))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(request); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(res.Body, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c.Close()
			s.Close()
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				b.Error(err)
			}
		})
	}
}

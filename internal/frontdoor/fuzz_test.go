package frontdoor

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// FuzzServe feeds the server any bytes as a client's stream: it must never
// panic or hang, and whatever it answers begins as HTTP/1.x.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		"GET http://site/ HTTP/1.1\r\nHost: site\r\n\r\n",
		"GET http://site/ HTTP/1.0\r\n\r\nGET http://site/flush HTTP/1.1\r\nHost: site\r\n\r\n",
		"POST http://site/ HTTP/1.1\r\nHost: site\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://site/ HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"PUT http://site/ HTTP/1.1\r\nHost: site\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"HEAD http://site/big HTTP/1.1\r\nHost: site\r\n\r\n",
		"CONNECT site:443 HTTP/1.1\r\nHost: site:443\r\n\r\nbytes",
		"GET http://site/ HTTP/1.1\r\nHost: site\r\nContent-Length: -1\r\n\r\n",
		"\r\n\r\nGET\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		s := &Server{
			ReadHeaderTimeout: 20 * time.Millisecond,
			IdleTimeout:       20 * time.Millisecond,
			MaxHeaderBytes:    512,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/big":
					w.Write(bytes.Repeat([]byte("x"), holdSize+1))
				case "/flush":
					w.Write([]byte("a"))
					http.NewResponseController(w).Flush()
				}
				if r.Method == http.MethodConnect {
					nc, brw, err := http.NewResponseController(w).Hijack()
					if err == nil {
						brw.WriteString("HTTP/1.1 200 OK\r\n\r\n")
						brw.Flush()
						nc.Close()
					}
					return
				}
				body, _ := io.ReadAll(r.Body)
				w.Write(body)
			}),
		}
		client, server := net.Pipe()
		defer client.Close()
		c := s.newConn(server)
		served := make(chan struct{})
		go func() { c.serve(); close(served) }()
		go func() { client.Write(input) }()
		var out bytes.Buffer
		buf := make([]byte, 4096)
		for {
			// A quiet spell ends the exchange: the server waits for a
			// body that will not come.
			client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := client.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) && err != io.EOF && !errors.Is(err, io.ErrClosedPipe) {
					t.Fatalf("reading the answers: %v", err)
				}
				break
			}
		}
		client.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection's goroutine did not end")
		}
		if out.Len() > 0 && !bytes.HasPrefix(out.Bytes(), []byte("HTTP/1.")) {
			t.Fatalf("answered %.60q", out.Bytes())
		}
	})
}

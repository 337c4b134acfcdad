package gateway

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
)

// clientHello is the first flight of a TLS client naming sni ("" for
// none), as the gateway reads it after a CONNECT's 200.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	buf := make([]byte, 4096)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// FuzzInterceptFront sends what follows a CONNECT's 200 to an intercepting
// gateway: ClientHellos naming odd hosts, none, or no TLS at all. Whatever
// comes, the gateway neither panics nor stops serving, and a bad client
// costs nothing but its own connection.
func FuzzInterceptFront(f *testing.F) {
	var log logtest.Buffer
	m := newMITMEnv(f, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(&log, nil))
		c.MITM.HandshakeTimeout = 300 * time.Millisecond
	}, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
	for _, sni := range []string{"", "127.0.0.1", "elsewhere.example", "a..b", strings.Repeat("x", 250) + ".example"} {
		f.Add(clientHello(f, sni))
	}
	hello := clientHello(f, "")
	f.Add(hello[:len(hello)/2])
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{recordTypeHandshake, 3, 1, 0xff, 0xff})
	f.Add([]byte{})
	siteAddr := m.site.Listener.Addr().String()
	client := m.mitmClient(f, "", false)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := m.connectTo(t, siteAddr, "")
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write(data)
		io.Copy(io.Discard, c)
		c.Close()
		resp, err := client.Get(m.site.URL + "/")
		if err != nil {
			t.Fatalf("after %q the gateway serves no more: %v", data, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "fine" {
			t.Fatalf("after %q: %d %q", data, resp.StatusCode, body)
		}
		if strings.Contains(log.String(), "panic") {
			t.Fatalf("after %q the log says:\n%s", data, log.String())
		}
	})
}

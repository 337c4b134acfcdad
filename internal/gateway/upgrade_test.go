package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// echoSocket is a WebSocket echo handler that refuses the first n
// handshakes with 403.
func echoSocket(n int) http.Handler {
	var hits int
	echo := websocket.Server{Handler: func(ws *websocket.Conn) { io.Copy(ws, ws) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits++; hits <= n {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		echo.ServeHTTP(w, r)
	})
}

// writeFrame sends one masked text frame (RFC 6455 §5.2) of a short
// message; readFrame reads the server's unmasked one back.
func writeFrame(t *testing.T, w io.Writer, msg string) {
	t.Helper()
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(msg))}, mask...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := w.Write(frame); err != nil {
		t.Fatal(err)
	}
}

func readFrame(t *testing.T, r io.Reader) string {
	t.Helper()
	head := make([]byte, 2)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, head[1]&0x7f)
	if _, err := io.ReadFull(r, msg); err != nil {
		t.Fatal(err)
	}
	return string(msg)
}

// TestWebSocketPlain runs a WebSocket handshake through the forward proxy
// as an absolute-form GET: the first route's 403 is retried on another,
// the 101 carries the route headers, and frames go both ways.
func TestWebSocketPlain(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewServer(echoSocket(1))
		defer site.Close()
		v := newEnv(t, Config{}, proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""), proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
		c, err := net.Dial("tcp", v.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s/echo HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", site.URL, site.Listener.Addr())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(headerRoute) != v.id(1) || resp.Header.Get(headerAttempts) != "2" ||
			!strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || resp.Header.Get("Sec-Websocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
			t.Fatalf("handshake answered %d %v", resp.StatusCode, resp.Header)
		}
		for _, msg := range []string{"hello", "again"} {
			writeFrame(t, c, msg)
			if got := readFrame(t, br); got != msg {
				t.Errorf("echo %q, want %q", got, msg)
			}
		}
	})
}

// TestWebSocketMITM runs a wss:// WebSocket inside intercepted TLS.
func TestWebSocketMITM(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		echo := echoSocket(1)
		m := newMITMEnv(t, nil, func(_ int, w http.ResponseWriter, r *http.Request) { echo.ServeHTTP(w, r) })
		c := m.connectTo(t, m.site.Listener.Addr().String(), "")
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(m.ca.CertPEM())
		tc := tls.Client(c, &tls.Config{ServerName: "127.0.0.1", RootCAs: pool, NextProtos: []string{"http/1.1"}})
		cfg, err := websocket.NewConfig("wss://"+m.site.Listener.Addr().String()+"/echo", "https://origin.example")
		if err != nil {
			t.Fatal(err)
		}
		ws, err := websocket.NewClient(cfg, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		for _, msg := range []string{"hello", "secure"} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Errorf("echo %q, %v; want %q", got, err, msg)
			}
		}
	})
}

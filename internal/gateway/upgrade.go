package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchyard/switchyard/internal/route"
)

// WebSockets (RFC 6455) through the attempt loop: the handshake is a GET
// like any other, judged and retried on another route until one answers
// 101; then the client's connection and the site's are spliced until
// either ends. Asked on a connection of its own through the route
// (route.Exit.RoundTrip), since a forward proxy need not carry an upgrade
// on an absolute-form request. HTTP/1.1 only: a WebSocket over HTTP/2 (RFC
// 8441) is not offered, and clients fall back to HTTP/1.1 for it.

// upgradeTo is the protocol a request asks to switch to: "websocket",
// or "" for none (h2c's upgrade, a hop the gateway ends, among them).
func upgradeTo(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		return ""
	}
	if p := h.Get("Upgrade"); strings.EqualFold(p, "websocket") {
		return p
	}
	return ""
}

// switchProtocols relays the site's 101 and splices the two connections.
// w's headers are the 101's, as answer set them.
func switchProtocols(w http.ResponseWriter, site *route.Upgraded, protocol string) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		fail(w, http.StatusBadGateway, "upgrade_failed", "switchyard: a protocol upgrade needs HTTP/1.1 between the client and the gateway")
		return
	}
	defer client.Close()
	site.Detach() // from here the connection lives as long as the client's
	h := w.Header()
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", protocol)
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	h.Write(brw)
	brw.WriteString("\r\n")
	if brw.Flush() != nil {
		return
	}
	var fromClient io.Reader = client
	if brw.Reader.Buffered() > 0 {
		fromClient = brw.Reader
	}
	spliceBoth(client, fromClient, site.Conn, site.R)
}

// spliceBoth copies both ways between a and b, each read through its
// reader, until both directions end.
func spliceBoth(a net.Conn, fromA io.Reader, b net.Conn, fromB *bufio.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, err := pipe(b, fromA, a, nil)
		endWrite(b, err)
	}()
	_, _, err := pipe(a, fromB, b, nil)
	endWrite(a, err)
	<-done
}

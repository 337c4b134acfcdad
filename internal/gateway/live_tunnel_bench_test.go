//go:build unix

package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// tunnelBytes is what BenchmarkLiveTunnel carries through each tunnel.
const tunnelBytes = 100 << 20

// BenchmarkLiveTunnel carries 100 MB from a target through one CONNECT
// tunnel, through a healthy fake HTTP proxy alone and through the gateway
// in front of it, to show what the gateway's copy costs beside the
// upstream's own (which splices: both its ends are *net.TCPConn). The
// target sends once the client has spoken a byte. cpu-ms/op is the whole
// process's CPU (client, gateway, proxy and target alike) per tunnel.
//
//	go test -run '^$' -bench LiveTunnel -benchtime 3x -count 6 ./internal/gateway
func BenchmarkLiveTunnel(b *testing.B) {
	chunk := make([]byte, 1<<20)
	target := routetest.ServeTCP(b, func(c net.Conn) {
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		for range tunnelBytes / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	p := routetest.NewProxy(b, routetest.Behavior{})
	bench := func(b *testing.B, proxy *url.URL) {
		buf := make([]byte, 256<<10)
		b.SetBytes(tunnelBytes)
		cpu0 := cpuTime(b)
		b.ResetTimer()
		for range b.N {
			c, err := net.DialTimeout("tcp", proxy.Host, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\nx"); err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReaderSize(c, len(buf))
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{br}, buf)
			c.Close()
			if err != nil || n != tunnelBytes {
				b.Fatalf("read %d bytes of %d: %v", n, tunnelBytes, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
	}
	b.Run("path=upstream_alone", func(b *testing.B) { bench(b, p.URL) })
	b.Run("path=through_gateway", func(b *testing.B) {
		gw, stop := benchGateway(b, Config{}, []*routetest.Proxy{p})
		defer stop()
		bench(b, gw)
	})
}

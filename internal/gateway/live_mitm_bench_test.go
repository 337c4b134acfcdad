//go:build unix

package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// mitmBenchSite is an HTTPS site on 127.0.0.1 answering both as 127.0.0.1
// and as localhost, with certificates of a CA of its own, and the roots
// that trust it; body is what it answers.
func mitmBenchSite(b *testing.B, body func(w http.ResponseWriter)) (site *httptest.Server, roots *x509.CertPool) {
	b.Helper()
	ca, _, err := mitm.LoadOrCreate(b.TempDir(), mitm.Options{})
	if err != nil {
		b.Fatal(err)
	}
	byIP, err := ca.Leaf("127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	site = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { body(w) }))
	// The certificate for 127.0.0.1 when the client names no host (an IP
	// literal has no SNI), else one for the name.
	site.TLS = &tls.Config{Certificates: []tls.Certificate{*byIP}, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf(h.ServerName)
	}}
	site.StartTLS()
	b.Cleanup(site.Close)
	roots = x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	return site, roots
}

// BenchmarkLiveMITM sets up one HTTPS connection and sends one GET on it
// per op, through the gateway over one healthy fake proxy, three ways side
// by side: a plain tunnel (the client's TLS is with the site, through the
// proxy, every time), an intercepted one whose host's certificate is
// cached (warm; the gateway's connection to the site through the proxy is
// kept from the op before), and one that mints a certificate for every
// connection (cold: a cache of one, two hosts taken in turn). conns/s is
// the rate of such connections one client gets; ns/op its latency.
//
//	go test -run '^$' -bench 'LiveMITM$' -benchtime 1000x -count 2 ./internal/gateway
func BenchmarkLiveMITM(b *testing.B) {
	site, siteRoots := mitmBenchSite(b, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, benchPage)
	})
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
	p := routetest.NewProxy(b, routetest.Behavior{})
	ca := func(b *testing.B, size int) *mitm.Authority {
		a, _, err := mitm.LoadOrCreate(b.TempDir(), mitm.Options{CacheSize: size})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	bench := func(b *testing.B, m *MITM, trust *x509.CertPool) {
		gw, stop := benchGateway(b, Config{MITM: m, TargetTLS: &tls.Config{RootCAs: siteRoots}}, []*routetest.Proxy{p})
		defer stop()
		hosts := []string{"127.0.0.1", "localhost"}
		cpu0 := cpuTime(b)
		start := time.Now()
		b.ResetTimer()
		for i := range b.N {
			tr := &http.Transport{Proxy: http.ProxyURL(gw), TLSClientConfig: &tls.Config{RootCAs: trust}, DisableKeepAlives: true}
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			ok, _ := get(b.Context(), c, "https://"+net.JoinHostPort(hosts[i%2], port)+"/")
			if !ok {
				b.Fatalf("op %d failed", i)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
		b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	b.Run("path=plain_tunnel", func(b *testing.B) { bench(b, nil, siteRoots) })
	b.Run("path=mitm_warm", func(b *testing.B) {
		a := ca(b, mitm.DefaultCacheSize)
		bench(b, &MITM{Authority: a}, poolOf(a))
	})
	b.Run("path=mitm_cold", func(b *testing.B) {
		a := ca(b, 1)
		bench(b, &MITM{Authority: a}, poolOf(a))
	})
}

func poolOf(a *mitm.Authority) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	return pool
}

// downloadBytes is what BenchmarkLiveMITMDownload fetches per op.
const downloadBytes = 100 << 20

// BenchmarkLiveMITMDownload fetches 100 MB from an HTTPS site through an
// intercepted tunnel: the gateway decrypts, relays and re-encrypts it as
// it streams. heap-MB is the most live heap seen during the op (client,
// gateway and site alike), peak-rss-MB the process's peak resident set
// (Linux): bounded by buffers, not by the body.
//
//	go test -run '^$' -bench LiveMITMDownload -benchtime 3x ./internal/gateway
func BenchmarkLiveMITMDownload(b *testing.B) {
	chunk := make([]byte, 1<<20)
	site, siteRoots := mitmBenchSite(b, func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", strconv.Itoa(downloadBytes))
		for range downloadBytes / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	a, _, err := mitm.LoadOrCreate(b.TempDir(), mitm.Options{})
	if err != nil {
		b.Fatal(err)
	}
	gw, stop := benchGateway(b, Config{MITM: &MITM{Authority: a}, TargetTLS: &tls.Config{RootCAs: siteRoots}}, []*routetest.Proxy{routetest.NewProxy(b, routetest.Behavior{})})
	defer stop()
	tr := &http.Transport{Proxy: http.ProxyURL(gw), TLSClientConfig: &tls.Config{RootCAs: poolOf(a)}}
	defer tr.CloseIdleConnections()
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	b.SetBytes(downloadBytes)
	b.ResetTimer()
	for range b.N {
		resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get(site.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != downloadBytes {
			b.Fatalf("read %d of %d: %v", n, downloadBytes, err)
		}
	}
	b.StopTimer()
	close(done)
	<-sampled
	b.ReportMetric(float64(peak.Load())/(1<<20), "heap-MB")
	if kb, ok := peakRSS(); ok {
		b.ReportMetric(float64(kb)/1024, "peak-rss-MB")
	}
}

// peakRSS is the process's peak resident set, in KiB, from Linux's
// /proc/self/status (VmHWM); ok is false elsewhere.
func peakRSS() (kb int64, ok bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		if v, found := strings.CutPrefix(line, "VmHWM:"); found {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}

package browsertest

import (
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/mitm"
)

// TestChromiumThroughMITM browses an HTTPS site through the gateway with
// TLS interception, Chromium trusting the gateway's CA by its key's hash:
// the page loads though the first route's answer was a 403 (retried on
// the other route), and the page's own requests carry the gateway's
// headers, which a plain tunnel could not show.
func TestChromiumThroughMITM(t *testing.T) {
	var hits atomic.Int64
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><title>secure page</title><p>hello through the gateway</p>")
	}))
	defer site.Close()
	stateDir := t.TempDir()
	g := startGateway(t, []fake{{id: "one"}, {id: "two"}}, func(c *config.Config) {
		c.MITM.Enabled, c.MITM.StateDir = true, stateDir
		c.MITM.UpstreamRoots = x509.NewCertPool()
		c.MITM.UpstreamRoots.AddCert(site.Certificate())
	})
	ca, created, err := mitm.LoadOrCreate(stateDir, mitm.Options{})
	if err != nil || created {
		t.Fatalf("the gateway's CA: created %v, %v", created, err)
	}
	b := newBrowser(t,
		chromedp.ProxyServer("http://"+g.proxy),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"), // or Chromium goes direct to 127.0.0.1
		chromedp.Flag("ignore-certificate-errors-spki-list", ca.SPKIHash()),
	)
	b.run(t, 20*time.Second, chromedp.Navigate(site.URL+"/"))
	if title := eval[string](t, b, "document.title"); title != "secure page" {
		t.Fatalf("title %q: the page did not load through the intercepted tunnel", title)
	}
	b.run(t, 5*time.Second, js(`fetch("/again").then(r => window.seen = r.headers.get("X-Switchyard-Route") + " " + r.headers.get("X-Switchyard-Class"))`))
	b.until(t, 5*time.Second, "window.seen !== undefined")
	route := eval[string](t, b, "window.seen")
	if route != "one ok" && route != "two ok" {
		t.Errorf("the page's fetch saw route and class %q, want a route's id and ok", route)
	}
	if n := hits.Load(); n < 3 {
		t.Errorf("the site saw %d requests, want the 403, the retried page and the fetch", n)
	}
}

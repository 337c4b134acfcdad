package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
)

// tool is the path of a client program the test drives; in CI its absence
// fails the test (.ci/run installs it), elsewhere it skips.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (CI installs it)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return path
}

// TestServeMITMClients runs serve --mitm and fetches an HTTPS site through
// it with curl, Python's urllib and Go's client, each trusting the CA that
// switchyard ca prints: every answer comes from inside the TLS, with the
// gateway's headers, which a plain tunnel cannot add.
func TestServeMITMClients(t *testing.T) {
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	}))
	defer site.Close()
	dir := t.TempDir()
	siteCA := filepath.Join(dir, "site-ca.pem")
	os.WriteFile(siteCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: site.Certificate().Raw}), 0o644)
	conf := filepath.Join(dir, "switchyard.toml")
	os.WriteFile(conf, []byte(`
[listen]
proxy = "127.0.0.1:0"
admin = ""
api = ""
[routes]
inline = ["direct"]
[mitm]
enabled = true
state_dir = "state"
upstream_ca = "site-ca.pem"
`), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- serve(ctx, []string{"--config", conf}, log, nil) }()
	defer func() {
		cancel()
		<-done
	}()
	proxy := "http://" + addrOf(t, log, "forward proxy listening")
	if !strings.Contains(log.String(), "generated a local CA") {
		t.Errorf("no word of the CA generated on first use:\n%s", log)
	}

	var out bytes.Buffer
	if code := caCmd([]string{"--config", conf}, &out, io.Discard); code != 0 {
		t.Fatalf("switchyard ca: exit %d", code)
	}
	caPath := filepath.Join(dir, "state", "mitm-ca.pem")
	if !strings.Contains(out.String(), "curl --cacert "+caPath) || !strings.Contains(out.String(), "-----BEGIN CERTIFICATE-----") ||
		strings.Contains(out.String(), "PRIVATE KEY") {
		t.Fatalf("switchyard ca printed:\n%s", out.String())
	}

	ctxRun, cancelRun := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelRun()
	check := func(client, got string) {
		t.Helper()
		if !strings.Contains(got, "hello /"+client) || !strings.Contains(strings.ToLower(got), "x-switchyard-route: direct") {
			t.Errorf("%s through the intercepted tunnel:\n%s", client, got)
		}
	}

	t.Run("curl", func(t *testing.T) {
		curl := tool(t, "curl")
		got, err := exec.CommandContext(ctxRun, curl, "-sS", "-i", "--noproxy", "", "--cacert", caPath, "-x", proxy, site.URL+"/curl").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, got)
		}
		check("curl", string(got))
	})

	t.Run("python", func(t *testing.T) {
		python := tool(t, "python3")
		script := fmt.Sprintf(`
import ssl, urllib.request
ctx = ssl.create_default_context(cafile=%q)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": %q}), urllib.request.HTTPSHandler(context=ctx))
r = opener.open(%q, timeout=10)
print("x-switchyard-route: " + r.headers["X-Switchyard-Route"])
print(r.read().decode())
`, caPath, proxy, site.URL+"/python")
		got, err := exec.CommandContext(ctxRun, python, "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, got)
		}
		check("python", string(got))
	})

	t.Run("go", func(t *testing.T) {
		pemBytes, _ := os.ReadFile(caPath)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		u, _ := url.Parse(proxy)
		tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(site.URL + "/go")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("Go's client spoke %s with the gateway, want HTTP/2", resp.Proto)
		}
		check("go", "x-switchyard-route: "+resp.Header.Get("X-Switchyard-Route")+"\n"+string(body))
	})
}

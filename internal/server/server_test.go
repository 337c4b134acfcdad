package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func direct(t *testing.T) []route.Route {
	t.Helper()
	routes, err := route.ParseList("test", []byte("direct\n"))
	if err != nil {
		t.Fatal(err)
	}
	return routes
}

func TestNewNeedsAProxyListener(t *testing.T) {
	t.Parallel()
	if _, err := New(config.WithRoutes(direct(t)), Listeners{}, nil); err == nil {
		t.Fatal("a server without a proxy listener")
	}
}

func TestRunServesUntilItsContextEnds(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		defer site.Close()
		proxy, adm := listen(t), listen(t)
		s, err := New(config.WithRoutes(direct(t)), Listeners{Proxy: proxy, Admin: adm}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()

		waitChecked(t, s.Engine()) // one sample: the check
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.Addr().String()})}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// The answer is reported once its body has been relayed, which the
		// client may finish reading first.
		waitFor(t, func() bool { return s.Engine().Routes()[0].Health.Samples == 2 })
		resp, err = http.Get("http://" + adm.Addr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return")
		}
	})
}

// TestShutdownEndsEventStreams: a dashboard's event stream never goes
// idle, so a graceful shutdown would wait out its whole grace for it; the
// admin ends the streams as shutdown starts.
func TestShutdownEndsEventStreams(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		proxy, adm := listen(t), listen(t)
		s, err := New(config.WithRoutes(direct(t)), Listeners{Proxy: proxy, Admin: adm}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		const grace = time.Minute
		go func() { done <- s.Run(ctx, grace) }()
		resp, err := http.Get("http://" + adm.Addr().String() + "/api/events/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Run still waiting %v after its context ended, with a stream open (grace %v)", time.Since(start), grace)
		}
		// The stream ended with the server.
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Logf("stream: %v", err)
		}
	})
}

// TestTryMeetsAdmission: the dashboard's "try a request" goes the way a
// client's request goes, SSRF admission first (docs/security.md).
func TestTryMeetsAdmission(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		var reached atomic.Int32
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached.Add(1) }))
		defer site.Close()
		block := true
		cfg := config.WithRoutes(direct(t))
		cfg.Security.BlockPrivateNetworks = &block
		cfg.Admin.Token = config.LiteralSecret("tok-try")
		proxy, adm := listen(t), listen(t)
		s, err := New(cfg, Listeners{Proxy: proxy, Admin: adm}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		req, err := http.NewRequest(http.MethodPost, "http://"+adm.Addr().String()+"/api/try", strings.NewReader(`{"url":"`+site.URL+`/"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok-try")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Status int    `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || got.Status != 0 || got.Error != "blocked_destination" || reached.Load() != 0 {
			t.Errorf("try of a loopback site: %d %+v, the site reached %d times; want no answer, blocked_destination", resp.StatusCode, got, reached.Load())
		}
	})
}

// New takes users' labels and the allowed ranges as Load parsed them: a
// user held to region=eu reaches a loopback site, which admission lets
// through by security.allow_cidrs, over the eu route only.
func TestLoadedLabelsAndRanges(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		defer site.Close()
		us, eu := routetest.NewProxy(t, routetest.Behavior{}), routetest.NewProxy(t, routetest.Behavior{})
		path := filepath.Join(t.TempDir(), "switchyard.toml")
		file := fmt.Sprintf("[routes]\ninline = [%q, %q]\n", us.URL.String()+" id=us region=us", eu.URL.String()+" id=eu region=eu") +
			"[security]\nblock_private_networks = true\nallow_cidrs = [\"127.0.0.1/32\"]\n" +
			"[[users]]\nname = \"alice\"\npassword = \"env:ALICE_PASSWORD\"\nlabels = \"region=eu\"\n"
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(config.Source{Path: path, Env: []string{"ALICE_PASSWORD=pw"}})
		if err != nil {
			t.Fatal(err)
		}
		proxy := listen(t)
		s, err := New(cfg, Listeners{Proxy: proxy}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		via := &url.URL{Scheme: "http", User: url.UserPassword("alice", "pw"), Host: proxy.Addr().String()}
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(via)}}
		defer client.CloseIdleConnections()
		for range 16 {
			resp, err := client.Get(site.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Switchyard-Route") != "eu" {
				t.Fatalf("alice's request: %d by route %q, want 200 by eu", resp.StatusCode, resp.Header.Get("X-Switchyard-Route"))
			}
		}
	})
}

func TestRunReportsAFailedListener(t *testing.T) {
	t.Parallel()
	proxy := listen(t)
	s, err := New(config.WithRoutes(direct(t)), Listeners{Proxy: proxy}, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Close() // Serve fails at once
	select {
	case err := <-func() chan error {
		c := make(chan error, 1)
		go func() { c <- s.Run(context.Background(), time.Second) }()
		return c
	}():
		if err == nil {
			t.Fatal("Run returned nil for a failed listener")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
}

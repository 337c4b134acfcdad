package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to write from serve and read here.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// addrOf waits (bounded) for serve to log the address of listener msg.
func addrOf(t *testing.T, log *syncBuffer, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %q in the log:\n%s", msg, log.String())
	return ""
}

func TestServeEndToEnd(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer site.Close()
	list := filepath.Join(t.TempDir(), "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	log := &syncBuffer{}
	done := make(chan int)
	go func() {
		done <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--proxies", list}, log)
	}()
	proxyAddr := addrOf(t, log, "forward proxy listening")
	adminAddr := addrOf(t, log, "admin listening")

	proxyURL, _ := url.Parse("http://" + proxyAddr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	resp, err := client.Get(site.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" || resp.Header.Get("X-Switchyard-Route") != "direct" {
		t.Fatalf("through the gateway: %q, route %q", body, resp.Header.Get("X-Switchyard-Route"))
	}
	for _, path := range []string{"/healthz", "/readyz", "/api/routes", "/metrics"} {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "proxies.txt")
	os.WriteFile(bad, []byte("direct\nhttp://u:Sekr1tPw@192.0.2.1\n"), 0o644)
	tests := []struct {
		desc string
		args []string
		want string
	}{
		{"no list", []string{}, "usage"},
		{"missing file", []string{"--proxies", filepath.Join(dir, "nope.txt")}, "nope.txt"},
		{"bad line", []string{"--proxies", bad}, "proxies.txt:2: missing port"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			log := &syncBuffer{}
			if code := serve(context.Background(), tt.args, log); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if !strings.Contains(log.String(), tt.want) || strings.Contains(log.String(), "Sekr1tPw") {
				t.Fatalf("output %q, want it to mention %q and no password", log.String(), tt.want)
			}
		})
	}
}

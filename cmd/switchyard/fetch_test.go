package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/server"
)

// apiServer runs a gateway over the direct route with its fetch API on
// 127.0.0.1 and returns the API's address.
func apiServer(t *testing.T) string {
	t.Helper()
	routes, err := route.ParseList("test", []byte("direct\n"))
	if err != nil {
		t.Fatal(err)
	}
	var lns [2]net.Listener
	for i := range lns {
		if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := server.New(config.WithRoutes(routes), server.Listeners{Proxy: lns[0], API: lns[1]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return lns[1].Addr().String()
}

// TestFetchCommand fetches through a running gateway's API and checks the
// body, the readable trace and the JSON, and the exit codes.
func TestFetchCommand(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.Header.Get("X-Who"))
	}))
	defer site.Close()
	api := apiServer(t)
	tests := []struct {
		desc       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{"body and trace, flags after the URL", []string{"--api", api, site.URL, "-H", "X-Who: you", "--must-match", "^hello"}, 0,
			"hello you", []string{"200 OK, 9 bytes", "#1", "direct", "ok"}},
		{"a validator that fails", []string{"--api", api, "--expect-status", "201", site.URL}, 1,
			"hello ", []string{"content_invalid", "status 200 not accepted", "switchyard fetch: switchyard: content_invalid"}},
		{"a label no route has", []string{"--api", api, "--label", "region=us", site.URL}, 1,
			"", []string{"no_matching_route"}},
		{"no URL", []string{"--api", api}, 2, "", []string{"usage: switchyard fetch"}},
		{"two URLs", []string{"--api", api, site.URL, site.URL}, 2, "", []string{"usage: switchyard fetch"}},
		{"bad header", []string{"--api", api, "-H", "nocolon", site.URL}, 2, "", []string{"switchyard fetch: -H \"nocolon\": want 'Name: value'"}},
		{"bad label", []string{"--api", api, "--label", "region", site.URL}, 2, "", []string{"switchyard fetch: --label \"region\": want key=value"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := fetchCmd(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.wantCode || stdout.String() != tc.wantStdout {
				t.Errorf("exit %d, stdout %q; want %d, %q\nstderr: %s", code, stdout.String(), tc.wantCode, tc.wantStdout, stderr.String())
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := fetchCmd(context.Background(), []string{"--api", api, "--json", site.URL}, &stdout, &stderr); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr.String())
	}
	var out struct {
		Status   int    `json:"status"`
		Body     string `json:"body"`
		Attempts []struct {
			Route, Class string
		} `json:"attempts"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Status != 200 || out.Body != "hello " || len(out.Attempts) != 1 || out.Attempts[0].Class != "ok" {
		t.Errorf("--json: %+v, %v\n%s", out, err, stdout.String())
	}
}

// TestDownloadCommand downloads a file through the API in pieces, with
// the progress bar drawn, and refuses a call without -o or with a
// malformed header.
func TestDownloadCommand(t *testing.T) {
	content := strings.Repeat("0123456789abcdef", 5000)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"x"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(content))
	}))
	defer site.Close()
	api := apiServer(t)
	path := filepath.Join(t.TempDir(), "file")
	var stderr bytes.Buffer
	if code := downloadCmd(context.Background(), []string{"--api", api, site.URL, "-o", path, "--piece", "30000"}, &stderr, true); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != content {
		t.Fatalf("the file holds %d bytes, %v; want the %d of the site", len(got), err, len(content))
	}
	for _, want := range []string{"100% 0.1 MiB of 0.1 MiB", "0.1 MiB in ranges, 0 piece(s) resumed, 0 restart(s), verified length"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if code := downloadCmd(context.Background(), []string{"--api", api, site.URL}, &stderr, false); code != 2 {
		t.Errorf("without -o: exit %d, want 2", code)
	}
	stderr.Reset()
	if code := downloadCmd(context.Background(), []string{"--api", api, site.URL, "-o", path, "-H", "nocolon"}, &stderr, false); code != 2 ||
		!strings.Contains(stderr.String(), "switchyard download: -H \"nocolon\": want 'Name: value'") {
		t.Errorf("a malformed header: exit %d, %s; want 2 naming it", code, stderr.String())
	}
}

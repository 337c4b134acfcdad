package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
)

// TestRecordAndReplay: a gateway run with --record leaves a recording of
// what it decided, which replays under the same settings with nothing
// different, and under others with the differences listed.
func TestRecordAndReplay(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/down") {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer site.Close()
	dir := t.TempDir()
	list := filepath.Join(dir, "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)
	events := filepath.Join(dir, "events.jsonl")

	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int)
	go func() {
		done <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "", "--api", "", "--proxies", list, "--record", events}, log, nil)
	}()
	proxyURL, _ := url.Parse("http://" + addrOf(t, log, "forward proxy listening"))
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	for _, path := range []string{"/a", "/down/1", "/b", "/down/2"} {
		resp, err := client.Get(site.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}

	var out, errs bytes.Buffer
	if code := replayCmd([]string{"--events", events}, &out, &errs); code != 0 {
		t.Fatalf("replay under the same settings: exit %d\n%s%s", code, out.String(), errs.String())
	}
	var outcomes, decisions, differ int
	if _, err := fmt.Sscanf(out.String(), "%d outcomes replayed, %d decisions compared, %d differ", &outcomes, &decisions, &differ); err != nil ||
		outcomes < 4 || differ != 0 { // the requests, and the route's first probe
		t.Fatalf("replay said %q, want at least the 4 requests' outcomes and no difference", out.String())
	}

	strict := filepath.Join(dir, "strict.toml")
	os.WriteFile(strict, []byte("[engine]\nsuspect_after = 1\n"), 0o644)
	out.Reset()
	if code := replayCmd([]string{"--events", events, "--config", strict}, &out, &errs); code != 1 {
		t.Fatalf("replay with suspect_after = 1: exit %d, want 1 (differences)\n%s%s", code, out.String(), errs.String())
	}
	if !strings.Contains(out.String(), "suspect") || !strings.Contains(out.String(), "target_5xx") {
		t.Fatalf("replay with suspect_after = 1 printed %q, want the pair turned suspect by a 5xx", out.String())
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("not json\n"), 0o644)
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"no events", nil, "usage: switchyard replay"},
		{"missing file", []string{"--events", filepath.Join(dir, "none")}, "no such file"},
		{"corrupt file", []string{"--events", bad}, "bad.jsonl: events:1:"},
		{"bad config", []string{"--events", bad, "--config", filepath.Join(dir, "none.toml")}, "none.toml"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := replayCmd(tc.args, &out, &errs); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errs.String(), tc.want) {
				t.Errorf("stderr %q, want %q", errs.String(), tc.want)
			}
		})
	}
}

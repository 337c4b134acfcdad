package server

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// sitePace is the pacing learned for the test site through s's only
// route, false when none holds it.
func sitePace(s *Server, site string) (engine.PairPaceStatus, bool) {
	st, ok := s.Engine().Pace(time.Now(), site)
	if !ok || len(st.Pairs) == 0 || st.Pairs[0].Rate == 0 {
		return engine.PairPaceStatus{}, false
	}
	return st.Pairs[0], true
}

// TestLearnedPacingOutlivesARestart: with [pacing] learned_file, what a
// site's 429 taught one gateway holds the next one started on the same
// file from its first request, before the site has said anything to it.
func TestLearnedPacingOutlivesARestart(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		defer site.Close()
		host := strings.TrimPrefix(site.URL, "http://")
		key := host[:strings.LastIndexByte(host, ':')]
		cfg := config.WithRoutes(direct(t))
		cfg.Pacing.LearnedFile = filepath.Join(t.TempDir(), "learned.json")

		var learned engine.PairPaceStatus
		t.Run("first", func(t *testing.T) { // its server stops as it ends
			g := runServer(t, cfg, nil)
			waitChecked(t, g.s.Engine())
			tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: g.proxy})}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(site.URL)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			waitFor(t, func() bool { _, ok := sitePace(g.s, key); return ok })
			learned, _ = sitePace(g.s, key)
		})
		if _, err := os.Stat(cfg.Pacing.LearnedFile); err != nil {
			t.Fatalf("nothing saved at shutdown: %v", err)
		}
		g := runServer(t, cfg, nil)
		if got, ok := sitePace(g.s, key); !ok || got.Route != learned.Route || got.Rate != learned.Rate {
			t.Errorf("after the restart %s held %+v, %v; want %+v as before it", key, got, ok, learned)
		}
	})
}

// TestLearnedFileUnreadable: a learned_file that is not saved pacing is
// set aside as FILE.bad, said in the log, and the gateway starts without
// it.
func TestLearnedFileUnreadable(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		cfg := config.WithRoutes(direct(t))
		cfg.Pacing.LearnedFile = filepath.Join(t.TempDir(), "learned.json")
		const junk = "{\"version\": 1,\n oops}"
		if err := os.WriteFile(cfg.Pacing.LearnedFile, []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		t.Run("serve", func(t *testing.T) { runServer(t, cfg, slog.New(slog.NewTextHandler(&logged, nil))) })
		if kept, err := os.ReadFile(cfg.Pacing.LearnedFile + ".bad"); err != nil || string(kept) != junk {
			t.Errorf("set aside %q, %v; want the file as it was", kept, err)
		}
		if !strings.Contains(logged.String(), "learned.json:2: invalid character") {
			t.Errorf("log %q does not say where the file is bad", logged.String())
		}
	})
}

package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// TestRunServesTheFetchAPI runs a server with an API listener and fetches
// a page through it as JSON: the answer and its trace come back through
// the gateway's route, and the API stops with the server.
func TestRunServesTheFetchAPI(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
		defer site.Close()
		proxy, api := listen(t), listen(t)
		s, err := New(config.WithRoutes(direct(t)), Listeners{Proxy: proxy, API: api}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post("http://"+api.Addr().String()+"/v1/fetch", "application/json",
			strings.NewReader(`{"url":"`+site.URL+`","validators":{"mustMatch":"^ok$"}}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"body":"b2s="`) || !strings.Contains(string(body), `"route":"direct"`) {
			t.Fatalf("POST /v1/fetch: %d %s", resp.StatusCode, body)
		}
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

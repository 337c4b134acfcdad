package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// The floor proxy carries absolute-form requests and CONNECT tunnels
// through its exits in rotation, and takes no exit off the loopback.
func TestFloorProxy(t *testing.T) {
	if _, err := newProxy([]string{"192.0.2.1:3128"}); err == nil {
		t.Error("an exit off the loopback accepted")
	}
	exits := []*routetest.Proxy{routetest.NewProxy(t, routetest.Behavior{KeepAlive: true}), routetest.NewProxy(t, routetest.Behavior{KeepAlive: true})}
	p, err := newProxy([]string{exits[0].URL.Host, exits[1].URL.Host})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	defer p.transport.CloseIdleConnections()
	page := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page "+r.URL.Path) }
	plain, secure := httptest.NewServer(http.HandlerFunc(page)), httptest.NewTLSServer(http.HandlerFunc(page))
	defer plain.Close()
	defer secure.Close()
	tr := secure.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: front.Listener.Addr().String()})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i, u := range []string{plain.URL + "/a", plain.URL + "/b", secure.URL + "/c"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "page /" + string(rune('a'+i)); string(body) != want {
			t.Errorf("%s: %q, want %q", u, body, want)
		}
	}
	if a, b := exits[0].Requests(), exits[1].Requests(); a == 0 || b == 0 {
		t.Errorf("exits carried %d and %d requests: not in rotation", a, b)
	}
}

package gateway

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// What attempts cost reaches the Observer by tier: the price of each
// attempt that reached its exit (not one refused at the connect) and of
// the bytes relayed, through the forward path and through a tunnel.
func TestObserverSeesSpend(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		const page = "a page of thirty-two bytes, ok?\n"
		plain := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, page) })
		tlsSite := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, page) }))
		t.Cleanup(tlsSite.Close)
		dead := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
		live := routetest.NewProxy(t, routetest.Behavior{})
		rec := &recorder{}
		v := newEnv(t, Config{Observer: rec},
			proxyLine(dead, "price_per_request=7"),
			proxyLine(live, "tier=1 price_per_request=0.5 price_per_gb=1e6"))

		resp, err := v.client(t, "").Get(plain.URL) // the dead route first, then the live one
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// 0.5 for the attempt, 10^6 per 10^9 bytes for the answer's body.
		want := 0.5 + float64(len(page))/1e3
		rec.waitFor(t, "the forward answer's spend", func() bool { return math.Abs(rec.spend[1]-want) < 1e-9 })

		tr := tlsSite.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(v.url)
		tr.DisableKeepAlives = true // the tunnel ends with the request
		resp, err = (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(tlsSite.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if !strings.Contains(string(body), "thirty-two") {
			t.Fatalf("body %q", body)
		}
		// A tunnel's bytes both ways are the TLS handshake and records: more
		// than the page, which is all that can be said of their number.
		rec.waitFor(t, "the tunnel's spend", func() bool { return rec.spend[1] > want+0.5+float64(2*len(page))/1e3 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.spend[0] != 0 {
			t.Errorf("spent %v on tier 0, whose route refused every connection", rec.spend[0])
		}
	})
}

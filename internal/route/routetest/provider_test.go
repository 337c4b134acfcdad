package routetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

func TestProviderGateway(t *testing.T) {
	NoLeaks(t, func(t *testing.T) {
		p := NewProviderGateway(t, "acct", "pw")
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.Header.Get(HeaderProviderIP)+" "+r.Header.Get(HeaderProviderCountry))
		}))
		defer site.Close()
		get := func(user, target string) (int, string) {
			u := *p.URL
			u.User = url.UserPassword(user, "pw")
			tr := &http.Transport{Proxy: http.ProxyURL(&u)}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(target)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		_, first := get("acct-country-us-session-s1", site.URL)
		_, again := get("acct-country-us-session-s1", site.URL)
		_, rotating := get("acct-country-us", site.URL)
		if first != "10.0.0.2 us" || again != first || rotating == first {
			t.Fatalf("session s1: %q then %q; rotating %q", first, again, rotating)
		}
		p.Ban("127.0.0.1", "10.0.0.2")
		if code, _ := get("acct-session-s1", site.URL); code != http.StatusForbidden {
			t.Fatalf("a banned IP: %d, want 403", code)
		}
		for _, tc := range []struct {
			desc, user, target string
			want               int
		}{
			{"an injected parameter", "acct-session-a-zone-x", site.URL, http.StatusProxyAuthRequired},
			{"another account", "other-session-a", site.URL, http.StatusProxyAuthRequired},
			{"a site beyond loopback", "acct", "http://192.0.2.1/", http.StatusForbidden},
		} {
			if code, _ := get(tc.user, tc.target); code != tc.want {
				t.Errorf("%s: %d, want %d", tc.desc, code, tc.want)
			}
		}
		if p.Sessions() != 1 || len(p.Users()) != 4 {
			t.Fatalf("%d sessions, users %v", p.Sessions(), p.Users())
		}
	})
}

package target

import (
	"net/http"
	"testing"
)

// TestBuiltinSignatures: each built-in mark is found where it is meant to
// be (its header, or a body holding it), and none in an ordinary page,
// one with a captcha widget included.
func TestBuiltinSignatures(t *testing.T) {
	t.Parallel()
	for _, s := range BuiltinSignatures() {
		t.Run(s.Vendor+" "+s.Header+s.Body, func(t *testing.T) {
			t.Parallel()
			if s.Source == "" {
				t.Error("no source")
			}
			h, body := http.Header{}, []byte("<html>")
			if s.Header != "" {
				h.Set(s.Header, "x-"+s.Value+"-y")
			} else {
				body = append(body, s.Body...)
			}
			got, ok := MatchBuiltin(http.StatusOK, h, body)
			if !ok || got.Vendor != s.Vendor {
				t.Errorf("MatchBuiltin = %+v, %v; want %s", got, ok, s.Vendor)
			}
			// On a 5xx, a body mark counts only for a vendor that sends its
			// challenge so; a header mark counts on any status.
			_, on503 := MatchBuiltin(http.StatusServiceUnavailable, h, body)
			if want := s.Header != "" || s.On5xx; on503 != want {
				t.Errorf("on a 503: matched %v, want %v", on503, want)
			}
			if _, on405 := MatchBuiltin(http.StatusMethodNotAllowed, h, body); on405 != (s.Header != "") {
				t.Errorf("on a 405: matched %v, want %v", on405, s.Header != "")
			}
		})
	}
	page := []byte(`<html><head><title>Shop</title><script src="https://www.google.com/recaptcha/api.js"></script></head>` +
		`<body><form><div class="g-recaptcha" data-sitekey="k"></div></form>` +
		`<script src="/cdn-cgi/challenge-platform/scripts/jsd/main.js"></script></body></html>`)
	h := http.Header{"Server": {"cloudflare"}, "Cf-Ray": {"8a1b"}, "X-Amzn-Waf-Action": {""}}
	if s, ok := MatchBuiltin(http.StatusOK, h, page); ok {
		t.Errorf("an ordinary page matched %+v", s)
	}
	if _, ok := MatchBuiltin(http.StatusOK, nil, nil); ok {
		t.Error("nothing matched something")
	}
}

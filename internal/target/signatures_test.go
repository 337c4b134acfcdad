package target

import (
	"bytes"
	"fmt"
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

// FuzzContains: the anchored search finds a mark wherever bytes.Contains
// does, whichever of its bytes it anchors on.
func FuzzContains(f *testing.F) {
	f.Add([]byte("<html><title>Just a moment...</title>"), "<title>Just a moment...</title>")
	f.Add([]byte("xx_cf_chl_op _cf_chl_opt"), "_cf_chl_opt")
	f.Add([]byte("aaaa"), "aa")
	f.Add([]byte("ab"), "abc")
	f.Add([]byte(""), "a")
	f.Add(bytes.Repeat([]byte("x"), 300), "px-cdn")
	f.Add(append(bytes.Repeat([]byte("x"), 300), "px-cdn"...), "px-cdn")
	f.Add(append(bytes.Repeat([]byte("xp"), 300), "xx-px-cdn"...), "px-cdn")
	f.Fuzz(func(t *testing.T, body []byte, mark string) {
		if mark == "" {
			return
		}
		want := bytes.Contains(body, []byte(mark))
		for at := range len(mark) {
			if got := contains(body, mark, at); got != want {
				t.Fatalf("contains(%q, %q, %d) = %v, want %v", body, mark, at, got, want)
			}
		}
	})
}

// BenchmarkMatchBuiltin is the search of an ok answer's start for the
// built-in marks, against bytes.Contains on the same body: a shop's page
// of the size the gateway reads, and a body made of nothing but the
// marks' anchors, where each is found at nearly every byte.
func BenchmarkMatchBuiltin(b *testing.B) {
	var page bytes.Buffer
	for i := 0; page.Len() < 16<<10; i++ {
		fmt.Fprintf(&page, `<div class="product-card" data-id="%d"><a href="/p/%d"><img src="/img/%d.jpg" alt="Item %d"></a>`+
			`<h2 class="title">Lightweight running shoe, size %d</h2><span class="price">EUR %d.99</span>`+
			`<script>window.__state_%d = {"sku": "SK-%d", "stock": true};</script></div>`+"\n", i, i, i, i, 36+i%12, 20+i, i, i)
	}
	var anchors []byte
	for _, s := range builtin {
		if s.Body != "" {
			anchors = append(anchors, s.Body[s.anchor])
		}
	}
	bodies := []struct {
		name string
		body []byte
	}{
		{"page", page.Bytes()[:16<<10]},
		{"anchors", bytes.Repeat(anchors, (16<<10)/len(anchors))},
	}
	for _, c := range bodies {
		b.Run(c.name+"/anchored", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if _, ok := MatchBuiltin(http.StatusOK, nil, c.body); ok {
					b.Fatal("an ordinary page matched")
				}
			}
		})
		b.Run(c.name+"/bytes.Contains", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				for _, s := range builtin {
					if s.Body != "" && bytes.Contains(c.body, []byte(s.Body)) {
						b.Fatal("an ordinary page matched")
					}
				}
			}
		})
	}
}

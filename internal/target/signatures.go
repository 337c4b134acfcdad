package target

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
)

// Signature marks a challenge or block page that a site's anti-bot service
// sends in place of the page asked for, whatever its status says (a 200, a
// 202, a 405, a 503): a soft ban of the exit at that site. A signature is
// a response header holding a value, or a substring of the body's decoded
// start.
type Signature struct {
	Vendor string // who sends the page
	Header string // a header that must carry Value (canonical form); "" for a body mark
	Value  string // lower case, contained in the header's value
	Body   string // found in the body's decoded start
	// On5xx makes a body mark count on a 5xx answer too, for a vendor
	// that sends its challenge with a 503; else a body mark counts on 2xx
	// answers only, where an error page of the vendor's is no ban.
	On5xx  bool
	Source string // where the mark is documented
	anchor int    // the index in Body of the byte searched for (anchored)
}

// Match reports whether an answer with header h and decoded body start
// body carries s (Applies says on which statuses).
func (s Signature) Match(h http.Header, body []byte) bool {
	if s.Header != "" {
		for _, v := range h.Values(s.Header) {
			if strings.Contains(strings.ToLower(v), s.Value) {
				return true
			}
		}
		return false
	}
	return len(body) > 0 && contains(body, s.Body, s.anchor)
}

// contains reports whether body holds mark, looking for mark's byte at
// index at and comparing the rest around each one found. bytes.Contains
// looks for the first byte, and a mark's first is often among a page's
// commonest ('<', a lower-case letter): searched that way once per
// built-in mark, a page's start took a quarter of judging it. A body
// where the anchor is common after all (a run of one byte, a blob of
// base64) would cost a call for nearly every byte: past a budget of
// false finds that grows with the bytes passed, as bytes.Index keeps
// one for its first byte, the rest is left to bytes.Contains, which
// compares whole windows at a time.
func contains(body []byte, mark string, at int) bool {
	c := mark[at]
	fails := 0
	for i := at; i < len(body); {
		j := bytes.IndexByte(body[i:], c)
		if j < 0 {
			return false
		}
		if start := i + j - at; start+len(mark) <= len(body) && string(body[start:start+len(mark)]) == mark {
			return true
		}
		i += j + 1
		if fails++; fails > 4+i>>4 {
			// Every start before i-at had its anchor found and checked.
			return bytes.Contains(body[i-at:], []byte(mark))
		}
	}
	return false
}

// commonInPages ranks bytes by how often web pages hold them, the
// commonest first: English letters by their frequency among HTML's
// punctuation, with v raised for <div>. A byte not listed (an upper-case
// letter, say) is rarer than any listed.
const commonInPages = " etaoinsrhldcuv<>/=\"-.mfpgwyb,k:;_'x#0123456789"

// anchored gives each body mark of sigs its anchor, the index of its
// rarest byte by commonInPages (the last of equals).
func anchored(sigs []Signature) []Signature {
	for k := range sigs {
		rank := -1
		for i := range len(sigs[k].Body) {
			r := strings.IndexByte(commonInPages, sigs[k].Body[i])
			if r < 0 {
				r = len(commonInPages)
			}
			if r >= rank {
				sigs[k].anchor, rank = i, r
			}
		}
	}
	return sigs
}

// builtin are the marks Switchyard knows without configuration. Each is
// specific to the interstitial itself, not to a widget an ordinary page
// may embed (a reCAPTCHA on a login form is no ban): a vendor's header on
// its challenge answers, a challenge page's own title or script object,
// the host its block page loads the captcha from, the text of its block
// page. A vendor's block page sent as a 403 is `blocked` by its status
// already (Akamai's Access Denied, say), and its error pages on other
// statuses are errors, not bans. README "Soft bans" lists them.
var builtin = anchored([]Signature{
	{Vendor: "Cloudflare", Header: "Cf-Mitigated", Value: "challenge",
		Source: "https://developers.cloudflare.com/cloudflare-challenges/challenge-types/challenge-pages/detect-response/"},
	{Vendor: "Cloudflare", Body: "<title>Just a moment...</title>", On5xx: true,
		Source: "the challenge page's title, sent with a 403 or 503 (https://docs.rs/parse-book-source/0.5.0/parse_book_source/fetch/fn.is_challenge.html)"},
	{Vendor: "Cloudflare", Body: "_cf_chl_opt", On5xx: true,
		Source: "the challenge page's options object (https://docs.rs/parse-book-source/0.5.0/parse_book_source/fetch/fn.is_challenge.html)"},
	{Vendor: "AWS WAF", Header: "X-Amzn-Waf-Action", Value: "captcha",
		Source: "a 405 with a CAPTCHA (https://docs.aws.amazon.com/waf/latest/developerguide/waf-captcha-and-challenge-actions.html)"},
	{Vendor: "AWS WAF", Header: "X-Amzn-Waf-Action", Value: "challenge",
		Source: "a 202 with a challenge script (https://docs.aws.amazon.com/waf/latest/developerguide/waf-captcha-and-challenge-actions.html)"},
	{Vendor: "DataDome", Body: "geo.captcha-delivery.com",
		Source: "the block page's captcha and device check (https://docs.capsolver.com/de/guide/antibots/datadome)"},
	{Vendor: "HUMAN (PerimeterX)", Body: "captcha.px-cdn.net",
		Source: "the default block page's captcha script (PerimeterX's server SDKs, e.g. github.com/PerimeterX/mod_perimeterx)"},
	{Vendor: "Imperva (Incapsula)", Body: "Incapsula incident ID",
		Source: "the block page's incident line (github.com/EnableSecurity/wafw00f, wafw00f/plugins/incapsula.py)"},
	{Vendor: "Google", Body: "detected unusual traffic from your computer network",
		Source: "the /sorry/ page, which links https://support.google.com/websearch/answer/86640"},
})

// BuiltinSignatures lists the signatures known without configuration.
func BuiltinSignatures() []Signature { return slices.Clone(builtin) }

// MatchBuiltin returns the first built-in signature an answer of status
// with header h and decoded body start body carries; either may be nil, to
// check the other alone.
func MatchBuiltin(status int, h http.Header, body []byte) (Signature, bool) {
	for _, s := range builtin {
		if s.applies(status) && s.Match(h, body) {
			return s, true
		}
	}
	return Signature{}, false
}

// applies reports whether s counts on an answer of status: a header mark
// on any (the vendor says it is a challenge), a body mark on a 2xx, or on
// a 5xx with On5xx.
func (s Signature) applies(status int) bool {
	switch {
	case s.Header != "":
		return true
	case status >= 200 && status < 300:
		return true
	default:
		return s.On5xx && status >= 500 && status < 600
	}
}

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
	Source string // where the mark is documented
}

// Match reports whether an answer with header h and decoded body start
// body carries s.
func (s Signature) Match(h http.Header, body []byte) bool {
	if s.Header != "" {
		for _, v := range h.Values(s.Header) {
			if strings.Contains(strings.ToLower(v), s.Value) {
				return true
			}
		}
		return false
	}
	return len(body) > 0 && bytes.Contains(body, []byte(s.Body))
}

// builtin are the marks Switchyard knows without configuration. Each is
// specific to the interstitial itself, not to a widget an ordinary page
// may embed (a reCAPTCHA on a login form is no ban): a vendor's header on
// its challenge answers, a challenge page's own title or script object,
// the host its block page loads the captcha from, the text of its block
// page. README "Soft bans" lists them.
var builtin = []Signature{
	{Vendor: "Cloudflare", Header: "Cf-Mitigated", Value: "challenge",
		Source: "https://developers.cloudflare.com/cloudflare-challenges/challenge-types/challenge-pages/detect-response/"},
	{Vendor: "Cloudflare", Body: "<title>Just a moment...</title>",
		Source: "the challenge page's title (https://docs.rs/parse-book-source/0.5.0/parse_book_source/fetch/fn.is_challenge.html)"},
	{Vendor: "Cloudflare", Body: "_cf_chl_opt",
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
	{Vendor: "Akamai", Body: "errors.edgesuite.net",
		Source: "the Access Denied page's reference link (https://github.com/cisco/openh264/issues/3766 quotes one)"},
	{Vendor: "Google", Body: "detected unusual traffic from your computer network",
		Source: "the /sorry/ page, which links https://support.google.com/websearch/answer/86640"},
}

// BuiltinSignatures lists the signatures known without configuration.
func BuiltinSignatures() []Signature { return slices.Clone(builtin) }

// MatchBuiltin returns the first built-in signature an answer with header
// h and decoded body start body carries; either may be nil, to check the
// other alone.
func MatchBuiltin(h http.Header, body []byte) (Signature, bool) {
	for _, s := range builtin {
		if s.Match(h, body) {
			return s, true
		}
	}
	return Signature{}, false
}

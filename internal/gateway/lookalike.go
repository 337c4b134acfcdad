package gateway

import (
	"strings"

	"github.com/switchyard/switchyard/internal/lookalike"
)

// lookable reports whether answers of media type mt are judged by the
// lookalike detector: HTML pages, which ban and captcha pages are, and
// JSON, whose APIs answer a banned client with one error body. Other
// types (images, downloads, event streams) are not held back for their
// start to be read; docs/design/011-lookalike.md.
func lookable(mt string) bool {
	return mt == "text/html" || mt == "application/xhtml+xml" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// looksAlike asks the lookalike detector whether route's answer to j, whose
// body starts with head (decoded), is a page in place of the page asked
// for. An empty body (a HEAD, a 204) is the same for every URL and says
// nothing. A probe's answer is rechecked: it is judged by what users'
// answers taught, and teaches nothing.
func (j *job) looksAlike(route string, head []byte) bool {
	if len(head) == 0 {
		return false
	}
	a := lookalike.Answer{URL: lookalike.URLDigest(j.url.Path, j.url.RawQuery), Body: lookalike.BodyDigest(head), Size: len(head)}
	if j.probe {
		return j.lookalike.Recheck(j.target, route, a) != lookalike.Valid
	}
	return j.lookalike.Judge(j.target, route, a) != lookalike.Valid
}

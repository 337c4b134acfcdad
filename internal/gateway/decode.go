package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// decodedPrefix is the start of a body, at most limit bytes, decoded from
// the codings its Content-Encoding lists (gzip, deflate, br, zstd; RFC 9110
// §8.4: applied in the order listed, so undone from the last), for the
// judges that read a page as the site meant it: block signatures and the
// fetch API's validators. Crawlers, browsers and HTTP libraries all ask for
// compressed answers, and a captcha page sent gzipped would otherwise pass
// as a page. raw is the body's start as sent; a start cut short decodes as
// far as it goes. A coding it does not know, or a body that does not
// decode, is judged as sent.
func decodedPrefix(encoding string, raw []byte, limit int) []byte {
	asSent := raw[:min(len(raw), limit)]
	if encoding == "" {
		return asSent
	}
	codings := strings.Split(encoding, ",")
	var r io.Reader = bytes.NewReader(raw)
	for i := len(codings) - 1; i >= 0; i-- {
		next, ok := decoder(strings.ToLower(strings.TrimSpace(codings[i])), r)
		if !ok {
			return asSent
		}
		if c, ok := next.(io.Closer); ok {
			defer c.Close() // zstd's releases its decoder
		}
		r = next
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if len(out) == 0 && err != nil {
		return asSent
	}
	return out
}

// decoder reads r decoded from coding; ok is false for a coding it does not
// know or a stream whose header is not that coding's.
func decoder(coding string, r io.Reader) (io.Reader, bool) {
	switch coding {
	case "", "identity":
		return r, true
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r)
		return zr, err == nil
	case "deflate":
		// RFC 9110's deflate is zlib-wrapped (RFC 1950: a header whose
		// first two bytes are a multiple of 31); some servers send it raw.
		br := bufio.NewReader(r)
		if head, _ := br.Peek(2); len(head) == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
			zr, err := zlib.NewReader(br)
			return zr, err == nil
		}
		return flate.NewReader(br), true
	case "br":
		return brotli.NewReader(r), true
	case "zstd":
		// A window cap bounds the memory a hostile stream can ask for.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return nil, false
		}
		return zr.IOReadCloser(), true
	}
	return nil, false
}

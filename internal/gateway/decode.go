package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"
	"sync"

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
// far as it goes. A coding it does not know, a body that does not decode
// or more than maxCodings codings: judged as sent.
func decodedPrefix(encoding string, raw []byte, limit int) []byte {
	asSent := raw[:min(len(raw), limit)]
	if encoding == "" || strings.Count(encoding, ",") >= maxCodings {
		return asSent
	}
	codings := strings.Split(encoding, ",")
	var r io.Reader = bytes.NewReader(raw)
	for i := len(codings) - 1; i >= 0; i-- {
		coding := strings.ToLower(strings.TrimSpace(codings[i]))
		if coding == "" || coding == "identity" {
			// Nothing to undo, and no decoder of its own to close: the
			// one below closed twice went back to its pool twice, to be
			// handed to two codings of one answer, reading from itself
			// (a stack overflow, which kills the process).
			continue
		}
		next, ok := decoder(coding, r)
		if !ok {
			return asSent
		}
		if c, ok := next.(io.Closer); ok {
			defer c.Close() // returns a pooled decoder
		}
		r = next
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if len(out) == 0 && err != nil {
		return asSent
	}
	return out
}

// maxCodings bounds the codings decodedPrefix undoes. Sites send one, now
// and then two; each decoder holds its own window (tens of kilobytes for
// deflate and br), and a Content-Encoding that lists thousands, which an
// answer's head of up to a megabyte can (internal/route), would take
// gigabytes.
const maxCodings = 4

// decoder reads r decoded from coding; ok is false for a coding it does not
// know or a stream whose header is not that coding's.
func decoder(coding string, r io.Reader) (io.Reader, bool) {
	switch coding {
	case "gzip", "x-gzip":
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		if zr.Reset(r) != nil {
			gzipReaders.Put(zr)
			return nil, false
		}
		return pooledGzip{zr}, true
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
		br, _ := brotliReaders.Get().(*brotli.Reader)
		if br == nil {
			return pooledBrotli{brotli.NewReader(r)}, true
		}
		if br.Reset(r) != nil {
			return nil, false
		}
		return pooledBrotli{br}, true
	case "zstd":
		zr, _ := zstdDecoders.Get().(*zstd.Decoder)
		if zr == nil {
			var err error
			// A window cap bounds the memory a hostile stream can ask
			// for: RFC 9659's, what an HTTP encoder may use.
			if zr, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20)); err != nil {
				return nil, false
			}
		}
		if zr.Reset(r) != nil {
			return nil, false
		}
		return pooledZstd{zr}, true
	}
	return nil, false
}

// brotliReaders, gzipReaders and zstdDecoders keep decoders for the next
// answer: a decoder of a streamed page holds a ring the size of the
// stream's window (4 MiB for br's default, 8 MiB for zstd's higher levels,
// gzip's 32 KiB), which a new decoder would allocate again to read a few
// kilobytes.
var brotliReaders, gzipReaders, zstdDecoders sync.Pool

// pooledBrotli, pooledGzip and pooledZstd are decoders from those pools,
// returned there on Close (br's and zstd's letting go of the body).
type (
	pooledBrotli struct{ *brotli.Reader }
	pooledGzip   struct{ *gzip.Reader }
	pooledZstd   struct{ *zstd.Decoder }
)

func (b pooledBrotli) Close() error {
	b.Reset(nil)
	brotliReaders.Put(b.Reader)
	return nil
}

func (g pooledGzip) Close() error {
	gzipReaders.Put(g.Reader)
	return nil
}

func (z pooledZstd) Close() error {
	z.Reset(nil)
	zstdDecoders.Put(z.Decoder)
	return nil
}

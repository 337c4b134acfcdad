package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// encode compresses b with coding, as a site would send it.
func encode(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	case "raw-deflate":
		w, _ = flate.NewWriter(&buf, flate.DefaultCompression)
	case "br":
		w = brotli.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("no encoder for %q", coding)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodedPrefix(t *testing.T) {
	t.Parallel()
	page := []byte("<html><title>Just a moment...</title>" + strings.Repeat("x", 40_000) + "</html>")
	gz := encode(t, "gzip", page)
	tests := []struct {
		desc     string
		encoding string
		raw      []byte
		limit    int
		want     []byte
	}{
		{desc: "identity", encoding: "", raw: page, limit: 100, want: page[:100]},
		{desc: "identity named", encoding: "identity", raw: page, limit: 100, want: page[:100]},
		{desc: "gzip", encoding: "gzip", raw: gz, limit: 100, want: page[:100]},
		{desc: "x-gzip, any case", encoding: " X-GZIP ", raw: gz, limit: 100, want: page[:100]},
		{desc: "deflate (zlib)", encoding: "deflate", raw: encode(t, "deflate", page), limit: 100, want: page[:100]},
		{desc: "deflate sent raw", encoding: "deflate", raw: encode(t, "raw-deflate", page), limit: 100, want: page[:100]},
		{desc: "br", encoding: "br", raw: encode(t, "br", page), limit: 100, want: page[:100]},
		{desc: "zstd", encoding: "zstd", raw: encode(t, "zstd", page), limit: 100, want: page[:100]},
		{desc: "codings undone from the last", encoding: "gzip, br", raw: encode(t, "br", gz), limit: 100, want: page[:100]},
		{desc: "a start cut short decodes as far as it goes", encoding: "gzip", raw: gz[:len(gz)/2], limit: len(page), want: nil},
		{desc: "an unknown coding is judged as sent", encoding: "compress", raw: gz, limit: 10, want: gz[:10]},
		{desc: "a body that is not what it says is judged as sent", encoding: "gzip", raw: page, limit: 10, want: page[:10]},
		{desc: "as many codings as a site would send", encoding: "identity, identity, gzip, br", raw: encode(t, "br", gz), limit: 100, want: page[:100]},
		{desc: "more codings than a site would send are judged as sent", encoding: "identity, identity, identity, gzip, br", raw: gz, limit: 10, want: gz[:10]},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got := decodedPrefix(tc.encoding, tc.raw, tc.limit)
			switch {
			case tc.want == nil:
				if len(got) == 0 || len(got) >= len(page) || !bytes.Equal(got, page[:len(got)]) {
					t.Errorf("got %d bytes, want a proper prefix of the page", len(got))
				}
			case !bytes.Equal(got, tc.want):
				t.Errorf("got %.40q…, want %.40q…", got, tc.want)
			}
		})
	}
}

// streamed is b compressed as a server streaming a page of unknown length
// sends it, flushed halfway: a br stream at its default window (4 MiB), a
// gzip stream (its window is always 32 KiB), a zstd frame naming an 8 MiB
// window (zstd's higher levels).
func streamed(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w interface {
		io.WriteCloser
		Flush() error
	}
	switch coding {
	case "br":
		w = brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 5, LGWin: 22})
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(8<<20))
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("no streaming encoder for %q", coding)
	}
	half := len(b) / 2
	for _, part := range [][]byte{b[:half], b[half:]} {
		if _, err := w.Write(part); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Decoders are reused (brotliReaders, gzipReaders, zstdDecoders): each
// answer reads its own page, whatever the one before left.
func TestDecodedPrefixReused(t *testing.T) {
	t.Parallel()
	a := []byte("<html><title>Just a moment...</title>" + strings.Repeat("a", 5000) + "</html>")
	b := []byte("<html><title>Shop</title>" + strings.Repeat("b", 5000) + "</html>")
	for _, coding := range []string{"br", "gzip", "zstd"} {
		za, zb := streamed(t, coding, a), streamed(t, coding, b)
		for i, tc := range []struct {
			raw, want []byte
		}{
			{za, a[:100]},
			{za[:len(za)/2], nil}, // cut short
			{[]byte("not compressed at all"), []byte("not compressed at all")},
			{zb, b[:100]},
			{encode(t, coding, a), a[:100]},
			{zb, b[:100]},
		} {
			got := decodedPrefix(coding, tc.raw, 100)
			if tc.want != nil && !bytes.Equal(got, tc.want) {
				t.Errorf("%s, answer %d: got %.40q…, want %.40q…", coding, i, got, tc.want)
			}
		}
	}
}

// BenchmarkDecodedPrefix reads the start of a streamed page, as the judges
// do for every HTML answer sent so: B/op is what each costs.
func BenchmarkDecodedPrefix(b *testing.B) {
	page := []byte("<html><title>Just a moment...</title>" + strings.Repeat("xyz", 400_000) + "</html>")
	for _, coding := range []string{"br", "gzip", "zstd"} {
		raw := streamed(b, coding, page)
		b.Run(coding, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := decodedPrefix(coding, raw, signatureWindow); len(got) != signatureWindow {
					b.Fatalf("%d bytes decoded", len(got))
				}
			}
		})
	}
}

// TestDecodedPrefixPoolsEachDecoderOnce: an identity coding between two
// others, named or empty, puts no decoder back in its pool twice (a
// decoder handed to two codings of one answer read from itself until the
// stack overflowed: FuzzDecodedPrefix found it). Not parallel: it reads
// the pools.
func TestDecodedPrefixPoolsEachDecoderOnce(t *testing.T) {
	page := []byte("<title>Just a moment...</title>")
	tests := []struct {
		encoding string
		raw      []byte
	}{
		{"br, identity, br", encode(t, "br", encode(t, "br", page))},
		{"br, , br", encode(t, "br", encode(t, "br", page))},
		{"gzip, identity, gzip", encode(t, "gzip", encode(t, "gzip", page))},
		{"zstd, identity", encode(t, "zstd", page)},
	}
	for _, tc := range tests {
		for range 2 { // the second from decoders the first put back
			if got := decodedPrefix(tc.encoding, tc.raw, 100); !bytes.Equal(got, page) {
				t.Fatalf("%s: got %q, want the page", tc.encoding, got)
			}
			if twice := pooledTwice(&brotliReaders) || pooledTwice(&gzipReaders) || pooledTwice(&zstdDecoders); twice {
				t.Fatalf("%s: a decoder went back to its pool twice", tc.encoding)
			}
		}
	}
}

// pooledTwice reports whether p holds a decoder twice, and puts each back
// once.
func pooledTwice(p *sync.Pool) bool {
	var held []any
	twice := false
	for {
		d := p.Get()
		if d == nil {
			break
		}
		if slices.Contains(held, d) {
			twice = true
			continue
		}
		held = append(held, d)
	}
	for _, d := range held {
		p.Put(d)
	}
	return twice
}

// A Content-Encoding listing a coding a hundred thousand times, which fits
// in an answer's head, is judged as sent without a decoder made for each
// (br's and deflate's windows: gigabytes).
func TestDecodedPrefixManyCodings(t *testing.T) {
	raw := []byte("<title>Just a moment...</title>")
	for _, coding := range []string{"br", "deflate", "zstd", "gzip"} {
		encoding := strings.TrimSuffix(strings.Repeat(coding+",", 100_000), ",")
		var got []byte
		allocs := testing.AllocsPerRun(1, func() { got = decodedPrefix(encoding, raw, 1024) })
		if !bytes.Equal(got, raw) || allocs > 0 {
			t.Errorf("%s × 100,000: got %.20q… in %v allocations, want the body as sent in none", coding, got, allocs)
		}
	}
}

// FuzzDecodedPrefix: any body under any Content-Encoding decodes without
// a panic to at most the limit.
func FuzzDecodedPrefix(f *testing.F) {
	page := []byte("<title>Just a moment...</title>")
	for _, c := range []string{"gzip", "deflate", "raw-deflate", "br", "zstd"} {
		name := c
		if c == "raw-deflate" {
			name = "deflate"
		}
		f.Add(name, encode(f, c, page))
	}
	f.Add("gzip, zstd", []byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add("br, br, br, br, br, br", encode(f, "br", page))
	f.Fuzz(func(t *testing.T, encoding string, raw []byte) {
		if got := decodedPrefix(encoding, raw, 1024); len(got) > 1024 {
			t.Fatalf("%d bytes decoded, over the limit", len(got))
		}
	})
}

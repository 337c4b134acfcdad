package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/gateway"
)

// body is a large body made up as it is read: byte i depends on i alone
// and does not repeat with a short period, so that a piece written at the
// wrong offset cannot match.
type body struct {
	size int64
	off  int64
}

func (b *body) Read(p []byte) (int, error) {
	if b.off >= b.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.size-b.off))
	for i := range n {
		p[i] = byteAt(b.off + int64(i))
	}
	b.off += int64(n)
	return n, nil
}

func (b *body) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		b.off = offset
	case io.SeekCurrent:
		b.off += offset
	case io.SeekEnd:
		b.off = b.size + offset
	}
	return b.off, nil
}

// byteAt is splitmix64 of the 8-byte word holding i, cut to i's byte.
func byteAt(i int64) byte {
	z := uint64(i/8) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return byte(z >> (8 * (i % 8)))
}

func sumOf(r io.Reader) [sha256.Size]byte {
	h := sha256.New()
	io.Copy(h, r)
	var s [sha256.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

// dropping serves size bytes with Range support, an ETag and their
// Repr-Digest, and cuts a third of its answers short at a random offset
// (seeded), as a flaky site does. ranges false ignores Range requests
// after the first answer, as a backend swapped mid-download would.
func dropping(t *testing.T, size int64, ranges bool) (*httptest.Server, [sha256.Size]byte) {
	sum := sumOf(&body{size: size})
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	served := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		cut := int64(-1)
		if rng.IntN(3) == 0 {
			cut = rng.Int64N(1 << 20)
		}
		ignore := !ranges && served > 1
		mu.Unlock()
		w.Header().Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
		if ignore {
			r.Header.Del("Range")
		} else {
			w.Header().Set("Etag", `"v1"`)
		}
		if cut >= 0 {
			w = &cutWriter{ResponseWriter: w, left: cut}
		}
		http.ServeContent(w, r, "", time.Time{}, &body{size: size})
	}))
	t.Cleanup(s.Close)
	return s, sum
}

// cutWriter breaks the connection once left bytes of the body went out.
type cutWriter struct {
	http.ResponseWriter
	left int64
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.ResponseWriter.Write(p[:c.left])
		panic(http.ErrAbortHandler) // net/http closes the connection
	}
	c.left -= int64(len(p))
	return c.ResponseWriter.Write(p)
}

// downloadMiB is the size of the resumable download test's body:
// SWITCHYARD_TEST_DOWNLOAD_MB, default 16 (200 for the check).
func downloadMiB(t *testing.T) int64 {
	if v := os.Getenv("SWITCHYARD_TEST_DOWNLOAD_MB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("SWITCHYARD_TEST_DOWNLOAD_MB=%q", v)
		}
		return n
	}
	return 16
}

// TestDownloadResumes downloads from a site that cuts a third of its
// answers short, one attempt per piece so that the SDK resumes them
// itself: the copy is byte-identical and verified by length and digest.
func TestDownloadResumes(t *testing.T) {
	size := downloadMiB(t) << 20
	site, want := dropping(t, size, true)
	c := newClient(t, gatewayAPIWith(t, 2, gateway.Config{MaxFetchBody: 2 << 20}), WithToken("alice:pw"))
	path := filepath.Join(t.TempDir(), "copy")
	var calls int
	start := time.Now()
	res, err := c.DownloadFile(testContextFor(t, time.Duration(size>>20)*time.Second+10*time.Second), site.URL, path,
		PieceSize(1<<20), PieceRetries(20, time.Millisecond), FetchOptions(Attempts(1)),
		OnProgress(func(written, total int64) {
			calls++
			if total != size || written > total {
				t.Errorf("progress %d of %d, want of %d", written, total, size)
			}
		}))
	if err != nil {
		t.Fatalf("Download: %v (%+v)", err, res)
	}
	t.Logf("%d MiB in %v: %d resumed, %d progress calls", size>>20, time.Since(start).Round(time.Millisecond), res.Resumed, calls)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := sumOf(f); got != want {
		t.Fatal("the copy differs from the body")
	}
	if res.Size != size || !res.Ranges || res.Resumed == 0 || res.Restarted != 0 || calls != int(size>>20) ||
		!slices.Equal(res.Verified, []string{"length", "digest"}) {
		t.Errorf("result %+v, %d progress calls", res, calls)
	}
}

// TestDownloadWithoutRanges checks a server that stops answering Range
// requests: the download starts again from 0, says so, and ends
// byte-identical; one too large for an answer fails with ErrNoRanges.
func TestDownloadWithoutRanges(t *testing.T) {
	site, want := dropping(t, 1<<20+12345, false)
	c := newClient(t, gatewayAPIWith(t, 2, gateway.Config{MaxFetchBody: 2 << 20}), WithToken("alice:pw"))
	var dst writerAt
	res, err := c.Download(testContext(t), site.URL, &dst, PieceSize(256<<10), PieceRetries(20, time.Millisecond))
	if err != nil {
		t.Fatalf("Download: %v (%+v)", err, res)
	}
	if sumOf(bytes.NewReader(dst.b)) != want || res.Ranges || res.Restarted != 1 || !slices.Equal(res.Verified, []string{"length", "digest"}) {
		t.Errorf("result %+v, %d bytes", res, len(dst.b))
	}
	big, _ := dropping(t, 3<<20, false)
	_, err = c.Download(testContext(t), big.URL, &writerAt{}, PieceSize(1<<20), PieceRetries(20, time.Millisecond))
	if !errors.Is(err, ErrNoRanges) {
		t.Errorf("a body over the gateway's cap without ranges: %v, want ErrNoRanges", err)
	}
}

// TestContentRange reads Content-Range values.
func TestContentRange(t *testing.T) {
	tests := []struct {
		in                string
		first, last, size int64
		ok                bool
	}{
		{"bytes 0-99/1000", 0, 99, 1000, true},
		{"bytes 100-199/*", 100, 199, -1, true},
		{"bytes */1000", -1, -1, 1000, true},
		{"bytes 0-1000/1000", 0, 0, 0, false},
		{"bytes 5-4/10", 0, 0, 0, false},
		{"items 0-1/2", 0, 0, 0, false},
		{"bytes 0-1", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	}
	for _, tc := range tests {
		first, last, size, ok := contentRange(tc.in)
		if first != tc.first || last != tc.last || size != tc.size || ok != tc.ok {
			t.Errorf("contentRange(%q) = %d, %d, %d, %t", tc.in, first, last, size, ok)
		}
	}
}

// TestCheckMD5 compares pieces with their Content-MD5.
func TestCheckMD5(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(md5Of([]byte("piece")))
	tests := []struct {
		desc, header string
		wantErr      bool
		wantOK       bool // every piece so far had a matching Content-MD5
	}{
		{"matching", good, false, true},
		{"absent", "", false, false},
		{"wrong", base64.StdEncoding.EncodeToString(md5Of([]byte("other"))), true, true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			d := &download{md5ok: true}
			resp := &Response{Body: []byte("piece"), Header: http.Header{}}
			if tc.header != "" {
				resp.Header.Set("Content-MD5", tc.header)
			}
			if err := d.checkMD5(resp); (err != nil) != tc.wantErr || d.md5ok != tc.wantOK {
				t.Errorf("checkMD5: %v, md5ok %t", err, d.md5ok)
			}
		})
	}
}

func md5Of(b []byte) []byte {
	s := md5.Sum(b)
	return s[:]
}

// writerAt is an in-memory io.WriterAt.
type writerAt struct{ b []byte }

func (w *writerAt) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(w.b)) {
		w.b = append(w.b, make([]byte, end-int64(len(w.b)))...)
	}
	return copy(w.b[off:], p), nil
}

func testContextFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// failing is a listener whose node can fail: fail cuts every connection
// it accepted and refuses (closes at once) the next down ones, as a
// gateway that died and came back.
type failing struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn // guarded by mu
	down  int        // guarded by mu
}

func (f *failing) Accept() (net.Conn, error) {
	for {
		c, err := f.Listener.Accept()
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		refuse := f.down > 0
		if refuse {
			f.down--
		} else {
			f.conns = append(f.conns, c)
		}
		f.mu.Unlock()
		if !refuse {
			return c, nil
		}
		c.Close()
	}
}

func (f *failing) fail(down int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns, f.down = nil, down
}

// TestDownloadSurvivesTheNode cuts the gateway's connections mid-download
// and refuses the next one: the download resumes from the last byte
// written once the node answers again, and the copy is byte-identical.
func TestDownloadSurvivesTheNode(t *testing.T) {
	const size = 6 << 20
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, &body{size: size})
	}))
	defer site.Close()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failing{Listener: inner}
	serveAPI(t, ln, 1, gateway.Config{})
	c := newClient(t, ln.Addr().String(), WithToken("alice:pw"), WithRetries(1, time.Millisecond))
	var dst writerAt
	failed := false
	res, err := c.Download(testContextFor(t, 30*time.Second), site.URL, &dst, PieceSize(1<<20), PieceRetries(30, 10*time.Millisecond),
		OnProgress(func(written, _ int64) {
			if written >= 2<<20 && !failed {
				failed = true
				ln.fail(1)
			}
		}))
	if err != nil {
		t.Fatalf("Download: %v (%+v)", err, res)
	}
	if sumOf(bytes.NewReader(dst.b)) != sumOf(&body{size: size}) || res.Resumed == 0 || res.Restarted != 0 {
		t.Errorf("result %+v, %d bytes", res, len(dst.b))
	}
}

package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Downloads (docs/design/009-fetch-api.md, Bodies and large downloads): a
// large body is fetched in pieces, each a Range request of its own, so that
// each is carried, retried and traced by the gateway like any request and
// a piece that fails is asked again from the last byte written.

// DownloadOption configures a Download.
type DownloadOption func(*downloadOptions)

type downloadOptions struct {
	piece    int64
	retries  int
	backoff  time.Duration
	progress func(written, total int64)
	fetch    []CallOption
}

// PieceSize sets how many bytes each piece asks for; at most the
// gateway's fetch.max_response_bytes. Default 8 MiB.
func PieceSize(n int64) DownloadOption { return func(o *downloadOptions) { o.piece = n } }

// PieceRetries sets how many times in a row a piece that failed is asked
// again, and the first wait between, doubling. Defaults 5 and 200ms.
func PieceRetries(n int, backoff time.Duration) DownloadOption {
	return func(o *downloadOptions) { o.retries, o.backoff = n, backoff }
}

// OnProgress is told, after each piece written, how many bytes are
// written and the total (-1 while unknown).
func OnProgress(f func(written, total int64)) DownloadOption {
	return func(o *downloadOptions) { o.progress = f }
}

// FetchOptions apply to every piece's request (headers, session, labels,
// attempts…).
func FetchOptions(opts ...CallOption) DownloadOption {
	return func(o *downloadOptions) { o.fetch = append(o.fetch, opts...) }
}

// Downloaded is what a Download did.
type Downloaded struct {
	Size int64
	// Ranges says the server answered Range requests; without them the
	// body came whole in one answer, which must fit the gateway's
	// fetch.max_response_bytes.
	Ranges bool
	// Resumed counts the pieces asked again after a failure, from the
	// last byte written; Restarted the times the download began again
	// from 0, because the server ignored a Range or the body changed.
	Resumed, Restarted int
	// Verified names the checks passed: "length", "content-md5" (each
	// piece's), "digest" (the whole body's SHA-256).
	Verified []string
}

// ErrNoRanges is a body too large for one answer from a server that does
// not answer Range requests.
var ErrNoRanges = errors.New("switchyard download: the server ignores Range requests and the body is larger than one answer may be (fetch.max_response_bytes)")

// Download fetches url into dst in pieces, verifying the length and, where
// the server gives them, each piece's Content-MD5 and the body's SHA-256
// digest (Repr-Digest or Digest). Pieces after the first carry If-Range
// (a strong ETag, else Last-Modified), so that a body changed mid-way is
// fetched again whole rather than spliced.
func (c *Client) Download(ctx context.Context, url string, dst io.WriterAt, opts ...DownloadOption) (*Downloaded, error) {
	o := downloadOptions{piece: 8 << 20, retries: 5, backoff: 200 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	d := &download{c: c, url: url, dst: dst, o: o, total: -1, sum: sha256.New(), res: &Downloaded{Ranges: true}}
	if err := d.run(ctx); err != nil {
		return d.res, err
	}
	return d.res, nil
}

// DownloadFile is Download into the file at path, written as path+".part"
// and renamed once complete and verified.
func (c *Client) DownloadFile(ctx context.Context, url, path string, opts ...DownloadOption) (*Downloaded, error) {
	part := path + ".part"
	f, err := os.Create(part)
	if err != nil {
		return nil, err
	}
	res, err := c.Download(ctx, url, f, opts...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, path)
	}
	return res, err
}

// download is one Download in progress.
type download struct {
	c     *Client
	url   string
	dst   io.WriterAt
	o     downloadOptions
	res   *Downloaded
	off   int64     // bytes written, in order from 0
	total int64     // -1 while unknown
	ifRng string    // the validator pieces carry in If-Range
	sum   hash.Hash // SHA-256 of the bytes written, in order
	want  []byte    // the digest the server gave, nil for none
	md5ok bool      // every piece carried a Content-MD5 that matched
}

func (d *download) run(ctx context.Context) error {
	fails, wait := 0, d.o.backoff
	d.md5ok = true
	for d.total < 0 || d.off < d.total {
		done, err := d.piece(ctx)
		switch {
		case err == nil && done:
			return d.verify()
		case err == nil:
			fails, wait = 0, d.o.backoff
			continue
		case ctx.Err() != nil || !transient(err) || fails >= d.o.retries:
			return err
		}
		fails++
		d.res.Resumed++
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
	return d.verify()
}

// piece fetches the next piece and writes it; done says the body is
// complete (a whole answer to a Range ignored, or nothing left).
func (d *download) piece(ctx context.Context) (done bool, err error) {
	opts := append(d.o.fetch[:len(d.o.fetch):len(d.o.fetch)], Header("Range", fmt.Sprintf("bytes=%d-%d", d.off, d.off+d.o.piece-1)))
	if d.ifRng != "" {
		opts = append(opts, Header("If-Range", d.ifRng))
	}
	resp, err := d.c.Fetch(ctx, d.url, opts...)
	if resp != nil && resp.Status == http.StatusRequestedRangeNotSatisfiable {
		// Nothing from off on: an empty body, or one that shrank.
		if _, _, size, ok := contentRange(resp.Header.Get("Content-Range")); ok && size == d.off && (d.total < 0 || d.total == size) {
			d.total = size
			return true, nil
		}
		return false, fmt.Errorf("switchyard download: range from %d refused (416)", d.off)
	}
	if err != nil {
		return false, err
	}
	switch resp.Status {
	case http.StatusPartialContent:
		return false, d.part(resp)
	case http.StatusOK:
		return true, d.whole(resp)
	}
	return false, fmt.Errorf("switchyard download: status %d", resp.Status)
}

// part writes a 206 answer at off.
func (d *download) part(resp *Response) error {
	start, last, size, ok := contentRange(resp.Header.Get("Content-Range"))
	if !ok || start != d.off || last-start+1 != int64(len(resp.Body)) || size < 0 {
		return &Error{Code: "bad_range", Message: fmt.Sprintf("a piece from %d came back as %q with %d bytes", d.off, resp.Header.Get("Content-Range"), len(resp.Body))}
	}
	if d.total >= 0 && size != d.total {
		// If-Range should have caught a change; the size did.
		d.restart()
		return &Error{Code: "changed", Message: "the body's size changed mid-way; starting again"}
	}
	if err := d.checkMD5(resp); err != nil {
		return err
	}
	if d.total < 0 {
		d.total = size
		d.ifRng = validator(resp.Header)
		d.want = digest(resp.Header)
	}
	return d.write(resp.Body)
}

// whole writes a 200 answer: the server ignored the Range, or the body
// changed since the first piece (If-Range).
func (d *download) whole(resp *Response) error {
	if d.off > 0 {
		d.restart()
	}
	d.res.Ranges = false
	if resp.Truncated {
		return ErrNoRanges
	}
	if err := d.checkMD5(resp); err != nil {
		return err
	}
	d.total, d.want = int64(len(resp.Body)), digest(resp.Header)
	return d.write(resp.Body)
}

// restart begins again from 0.
func (d *download) restart() {
	d.res.Restarted++
	d.off, d.total, d.ifRng, d.want, d.md5ok = 0, -1, "", nil, true
	d.sum.Reset()
}

func (d *download) write(b []byte) error {
	if _, err := d.dst.WriteAt(b, d.off); err != nil {
		return err
	}
	d.sum.Write(b)
	d.off += int64(len(b))
	d.res.Size = d.off
	if d.o.progress != nil {
		d.o.progress(d.off, d.total)
	}
	return nil
}

// checkMD5 compares a piece with its Content-MD5, when it has one.
func (d *download) checkMD5(resp *Response) error {
	h := resp.Header.Get("Content-Md5")
	if h == "" {
		d.md5ok = false
		return nil
	}
	sum := md5.Sum(resp.Body)
	if base64.StdEncoding.EncodeToString(sum[:]) != h {
		return &Error{Code: "corrupt", Message: fmt.Sprintf("the piece from %d does not match its Content-MD5", d.off)}
	}
	return nil
}

// verify checks the whole body once written.
func (d *download) verify() error {
	if d.off != d.total {
		return &Error{Code: "short", Message: fmt.Sprintf("%d bytes written of %d", d.off, d.total)}
	}
	d.res.Verified = append(d.res.Verified, "length")
	if d.md5ok && d.total > 0 {
		d.res.Verified = append(d.res.Verified, "content-md5")
	}
	if d.want != nil {
		if !bytes.Equal(d.sum.Sum(nil), d.want) {
			return &Error{Code: "corrupt", Message: "the body does not match its SHA-256 digest"}
		}
		d.res.Verified = append(d.res.Verified, "digest")
	}
	return nil
}

// transient says whether a failed piece is worth asking again: the
// gateway or its routes failed, not the request.
func transient(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case CodeUnavailable, "bad_range", "changed", "corrupt", "target_reset", "target_timeout", "proxy_connect_failed",
		"proxy_timeout", "tunnel_failed", "tls_failed", "dns_failed", "target_5xx", "request_timeout",
		"no_route", "busy", "paced", "rate_limited", "local_resources", "deadline_exceeded":
		return true
	}
	return false
}

// contentRange parses "bytes first-last/size" (size -1 for "*"), or
// "bytes */size" (first and last -1).
func contentRange(v string) (first, last, size int64, ok bool) {
	unit, rest, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || !strings.EqualFold(unit, "bytes") {
		return 0, 0, 0, false
	}
	span, total, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	size = -1
	if total != "*" {
		n, err := strconv.ParseInt(total, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, 0, false
		}
		size = n
	}
	if span == "*" {
		return -1, -1, size, size >= 0
	}
	a, b, found := strings.Cut(span, "-")
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if !found || err1 != nil || err2 != nil || first < 0 || last < first || (size >= 0 && last >= size) {
		return 0, 0, 0, false
	}
	return first, last, size, true
}

// validator is what If-Range carries for the body: a strong ETag (a weak
// one cannot be used, RFC 9110 §13.1.5), else Last-Modified.
func validator(h http.Header) string {
	if e := h.Get("Etag"); e != "" && !strings.HasPrefix(e, "W/") {
		return e
	}
	return h.Get("Last-Modified")
}

// digest is the SHA-256 of the whole body the server gave, from
// Repr-Digest (RFC 9530, "sha-256=:b64:") or Digest (RFC 3230,
// "SHA-256=b64"); nil for none.
func digest(h http.Header) []byte {
	for _, v := range []string{h.Get("Repr-Digest"), h.Get("Digest")} {
		for item := range strings.SplitSeq(v, ",") {
			alg, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || !strings.EqualFold(alg, "sha-256") {
				continue
			}
			if b, err := base64.StdEncoding.DecodeString(strings.Trim(val, ":")); err == nil && len(b) == sha256.Size {
				return b
			}
		}
	}
	return nil
}

package frontdoor

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// writerSize is an answer's write buffer: a head and a page of up to about
// 7 KiB leave in one write.
const writerSize = 8 << 10

var errFinished = errors.New("frontdoor: the handler has returned")

var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writerSize) }}

// response is the http.ResponseWriter of one request. Its head is written
// at the first byte of the body that is let out, or when the handler
// returns, flushes or hijacks: the framing is chosen then, from what the
// handler declared and, for an answer that ended within holdSize, from
// its length.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header
	body   *requestBody // nil: the request had none

	mu         sync.Mutex    // guards bw against the body's 100-continue
	bw         *bufio.Writer // nil until something is written
	status     int           // 0 until WriteHeader
	committed  bool          // the head is written
	length     int64         // the body's length as framed; -1 unknown
	written    int64         // body bytes let out
	chunked    bool
	held       []byte // body held back before the head, while its length is unknown
	closeAfter bool   // the connection ends with this answer
	continued  bool   // a 100 Continue or the head went out
	hijacked   bool
	finished   bool
}

// Header is the answer's header, to set before its head is written.
func (w *response) Header() http.Header { return w.header }

// WriteHeader sets the status; a 1xx status other than 101 is written at
// once as an interim answer.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("frontdoor: invalid WriteHeader code " + strconv.Itoa(code)) // as net/http's
	}
	if w.hijacked || w.finished || w.committed || w.status != 0 {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.mu.Lock()
		defer w.mu.Unlock()
		bw := w.writer()
		w.writeHead(bw, code)
		bw.WriteString("\r\n")
		if err := bw.Flush(); err != nil {
			w.closeAfter = true
		}
		if code == http.StatusContinue {
			w.continued = true
		}
		return
	}
	w.status = code
}

// Write lets out p as part of the body.
func (w *response) Write(p []byte) (int, error) {
	switch {
	case w.hijacked:
		return 0, http.ErrHijacked
	case w.finished:
		return 0, errFinished
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.committed {
		if w.header.Get("Content-Length") == "" && len(w.held)+len(p) <= holdSize {
			if w.held == nil {
				w.held = w.c.hold[:0]
			}
			w.held = append(w.held, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	return w.writeBody(p)
}

func (w *response) writeBody(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if w.chunked {
		w.bw.Write(strconv.AppendInt(w.bw.AvailableBuffer(), int64(len(p)), 16))
		w.bw.WriteString("\r\n")
	}
	n, err := w.bw.Write(p)
	if w.chunked {
		w.bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.closeAfter = true
	}
	return n, err
}

// Flush writes the head and what is buffered to the client.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush, reporting a failed write (http.ResponseController
// uses it).
func (w *response) FlushError() error {
	switch {
	case w.hijacked:
		return http.ErrHijacked
	case w.finished:
		return errFinished
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	if err := w.bw.Flush(); err != nil {
		w.closeAfter = true
		return err
	}
	return nil
}

// Hijack hands the connection to the handler, with what was read of it
// beyond the request and a writer holding anything written.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked || w.finished {
		return nil, nil, http.ErrHijacked
	}
	c := w.c
	c.watch.stop()
	if w.status != 0 && !w.committed {
		w.commit(false)
	}
	w.mu.Lock()
	bw := w.writer()
	w.mu.Unlock()
	if err := bw.Flush(); err != nil {
		return nil, nil, err
	}
	w.hijacked = true // the writer goes with the connection, never back to the pool
	c.rwc.SetDeadline(time.Time{})
	c.s.setState(c, http.StateHijacked)
	c.s.forget(c)
	return c.rwc, bufio.NewReadWriter(c.br, bw), nil
}

// sendContinue tells a client holding its body back for 100-continue to
// send it, unless the answer's head went out first.
func (w *response) sendContinue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.continued || w.hijacked || w.finished {
		return
	}
	w.continued = true
	bw := w.writer()
	bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if bw.Flush() != nil {
		w.closeAfter = true
	}
}

// writer is the answer's write buffer, taken from the pool at first need.
// Callers hold mu.
func (w *response) writer() *bufio.Writer {
	if w.bw == nil {
		w.bw = writers.Get().(*bufio.Writer)
		w.bw.Reset(w.c.rwc)
	}
	return w.bw
}

// release returns the write buffer to the pool.
func (w *response) release() {
	if w.bw != nil {
		w.bw.Reset(nil)
		writers.Put(w.bw)
		w.bw = nil
	}
}

// commit chooses the framing and writes the head, then any body held
// back. done: the handler has returned, so a held body is the whole of it.
func (w *response) commit(done bool) {
	h := w.header
	if _, ok := h["Connection"]; ok {
		if httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
			w.closeAfter = true
		}
		h.Del("Connection")
	}
	h.Del("Transfer-Encoding")
	declared := false
	if v := h.Get("Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if declared = err == nil && n >= 0; declared {
			w.length = n
		} else {
			h.Del("Content-Length")
		}
	}
	sized := false // the length is written here
	switch {
	case !bodyAllowed(w.status):
		if w.status != http.StatusNotModified {
			h.Del("Content-Length")
			w.length = -1
		}
	case declared:
	case done:
		if w.req.Method != http.MethodHead || len(w.held) > 0 {
			w.length, sized = int64(len(w.held)), true
		}
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.closeAfter = true // the body ends with the connection
	}
	if w.c.s.shuttingDown() {
		w.closeAfter = true
	}
	is11 := w.req.ProtoAtLeast(1, 1)

	w.mu.Lock()
	bw := w.writer()
	w.writeHead(bw, w.status)
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.WriteString(w.c.dateValue())
		bw.WriteString("\r\n")
	}
	if sized {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), w.length, 10))
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	switch {
	case w.closeAfter && is11:
		bw.WriteString("Connection: close\r\n")
	case !w.closeAfter && !is11:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
	w.committed, w.continued = true, true
	w.mu.Unlock()

	if held := w.held; len(held) > 0 {
		w.held = nil
		if w.req.Method != http.MethodHead {
			w.writeBody(held)
		}
	}
}

// writeHead writes the status line and the handler's header fields,
// dropping a field whose name is invalid and turning line breaks in values
// into spaces, as net/http does.
func (w *response) writeHead(bw *bufio.Writer, code int) {
	if w.req.ProtoAtLeast(1, 1) {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	}
	bw.WriteString("\r\n")
	for k, vv := range w.header {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = newlines.Replace(v)
			}
			bw.WriteString(strings.TrimSpace(v))
			bw.WriteString("\r\n")
		}
	}
}

var newlines = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

// finish completes the answer after the handler returned: the head if it
// is not out, the end of a chunked body, the flush, and what is left of
// the request's body.
func (w *response) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	w.mu.Lock()
	w.finished = true
	w.mu.Unlock()
	if w.chunked {
		w.bw.WriteString("0\r\n\r\n")
	}
	if w.length >= 0 && w.written != w.length && bodyAllowed(w.status) && w.req.Method != http.MethodHead {
		w.closeAfter = true // the client would wait for the rest
	}
	if w.bw.Flush() != nil {
		w.closeAfter = true
	}
	w.release()
	if b := w.body; b != nil && !b.eof && (w.closeAfter || !b.drain(w.c)) {
		w.closeAfter = true
		w.c.unread = !b.continueDue // held back, the body was never sent
	}
}

// bodyAllowed reports whether an answer with status code may have a body.
func bodyAllowed(code int) bool {
	return !(code >= 100 && code < 200 || code == http.StatusNoContent || code == http.StatusNotModified)
}

// dateValue is the Date header for now, formatted once a second.
func (c *conn) dateValue() string {
	now := time.Now()
	if sec := now.Unix(); sec != c.dateSec || c.date == "" {
		c.dateSec, c.date = sec, now.UTC().Format(http.TimeFormat)
	}
	return c.date
}

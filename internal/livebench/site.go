package livebench

import (
	"crypto/tls"
	"fmt"
	"html"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/mitm"
)

// DefaultCaptchaMarker is what a captcha page says, as a common bot wall's
// interstitial does.
const DefaultCaptchaMarker = "<title>Just a moment...</title>"

// siteTLD is the only suffix exits forward: names under it are the fleet's
// fake sites, served on 127.0.0.1 without any DNS.
const siteTLD = ".test"

// siteServer serves every fake site on one 127.0.0.1 listener, telling
// sites apart by Host. It knows which exit each connection comes from, as a
// real site knows the exit's IP address, so that the world can answer per
// exit — through a CONNECT tunnel as well as for forwarded requests.
type siteServer struct {
	// Immutable after startSites.
	world   *world
	marker  string
	srv     *http.Server
	ln      net.Listener
	served  chan struct{} // closed when Serve returns
	captcha []byte

	mu    sync.Mutex
	conns map[string]int // guarded by mu: an exit's local address of a connection to the site → exit index
}

// startSites starts the site server for w's sites, over TLS with leaves
// of ca when it is not nil.
func startSites(w *world, marker string, ca *mitm.Authority) (*siteServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if ca != nil {
		ln = tls.NewListener(ln, &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(h.ServerName) }})
	}
	s := &siteServer{
		world:   w,
		marker:  marker,
		ln:      ln,
		served:  make(chan struct{}),
		conns:   make(map[string]int),
		captcha: []byte("<!doctype html><html><head>" + marker + "</head><body>Checking your browser before accessing the site.</body></html>\n"),
	}
	// Clients that hang up mid-handshake (a worker's timeout, a hedge's
	// loser, the run's end) are the load's business, not the report's:
	// the server's log would print each one.
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		defer close(s.served)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// addr is where every site listens.
func (s *siteServer) addr() string { return s.ln.Addr().String() }

// close stops the server and cuts its connections.
func (s *siteServer) close() {
	s.srv.Close()
	<-s.served
}

// register notes that the connection from local (an exit's end) belongs to
// exit; the returned func forgets it.
func (s *siteServer) register(local string, exit int) (forget func()) {
	s.mu.Lock()
	s.conns[local] = exit
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.conns, local)
		s.mu.Unlock()
	}
}

// from is the exit a request's connection comes from.
func (s *siteServer) from(remote string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.conns[remote]
	return i, ok
}

// isSite reports whether host (no port) is one of the fleet's sites.
func (s *siteServer) isSite(host string) bool {
	for _, name := range s.world.sites {
		if strings.EqualFold(host, name) {
			return true
		}
	}
	return false
}

// ServeHTTP answers as the world says the site treats the requesting exit;
// a request from no known exit (a test's own) gets the page.
func (s *siteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(hostOf(r.Host))
	if !s.isSite(host) {
		http.NotFound(w, r)
		return
	}
	bulk := bulkSize(r.URL.Path)
	ans := siteAnswer{status: http.StatusOK}
	if exit, ok := s.from(r.RemoteAddr); ok {
		ans = s.world.atSite(exit, host, time.Now())
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	switch {
	case ans.status == http.StatusOK && ans.captcha:
		w.Write(s.captcha)
	case ans.status == http.StatusOK && bulk > 0:
		writeBulk(w, bulk)
	case ans.status == http.StatusOK:
		w.Write(page(host, r.URL.Path))
	default:
		if ans.retryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(int(math.Ceil(ans.retryAfter.Seconds()))))
		}
		w.WriteHeader(ans.status)
		fmt.Fprintf(w, "<html><body>%d %s</body></html>\n", ans.status, http.StatusText(ans.status))
	}
}

// bulkPrefix starts the path of a bulk download: /bulk/N is N zero bytes,
// what LiveCost pulls through one tunnel.
const bulkPrefix = "/bulk/"

// maxBulk bounds a bulk download, so no request makes a site stream
// without end.
const maxBulk = 1 << 30

// bulkSize is the size a bulk path asks for, 0 when path is none or asks
// for nothing, or too much.
func bulkSize(path string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(path, bulkPrefix), 10, 64)
	if !strings.HasPrefix(path, bulkPrefix) || err != nil || n <= 0 || n > maxBulk {
		return 0
	}
	return n
}

// bulkChunk is what writeBulk writes at a time: zeros, shared.
var bulkChunk = make([]byte, 256<<10)

// writeBulk answers n zero bytes, with their length, so that the client
// knows when it has them all.
func writeBulk(w http.ResponseWriter, n int64) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	for n > 0 {
		k, err := w.Write(bulkChunk[:min(n, int64(len(bulkChunk)))])
		if err != nil {
			return
		}
		n -= int64(k)
	}
}

// pageFiller pads pages to a few KB, the size of a small real page.
var pageFiller = strings.Repeat("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>\n", 60)

// page is the real page of host at path: a few KB that name both, so a
// client can tell it got this page and not another's or a captcha.
func page(host, path string) []byte {
	return []byte("<!doctype html><html><head><title>" + host + "</title>" + pageTag(host, path) +
		"</head><body>\n" + pageFiller + "</body></html>\n")
}

// pageTag is the line that marks the real page of host at path.
func pageTag(host, path string) string {
	return `<meta name="livebench-page" content="` + html.EscapeString(host+path) + `">`
}

// hostOf is hostport without its port.
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

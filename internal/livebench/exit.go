package livebench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// exit is one fake upstream HTTP proxy on 127.0.0.1. It forwards
// absolute-form requests and builds CONNECT tunnels, to the fleet's sites
// only, shaped by the world: delayed, held forever, or refused with 407.
// A dead exit has no server at all: its address refuses connections.
type exit struct {
	// Immutable after startExit.
	index   int
	world   *world
	sites   *siteServer
	url     *url.URL
	srv     *http.Server    // nil when dead
	tr      *http.Transport // to the site server
	served  chan struct{}   // closed when Serve returns; nil when dead
	closing chan struct{}   // closed by close: held and delayed requests end
	release func()          // frees a dead exit's refusing address

	requests atomic.Int64 // requests received, CONNECT included
	accepted atomic.Int64 // TCP connections accepted

	mu      sync.Mutex
	closed  bool                  // guarded by mu
	tunnels map[net.Conn]struct{} // guarded by mu: both ends of open tunnels
	wg      sync.WaitGroup        // handlers and tunnel pipes in flight
}

// startExit starts exit i of w, forwarding to sites.
func startExit(i int, w *world, sites *siteServer) (*exit, error) {
	x := &exit{index: i, world: w, sites: sites, closing: make(chan struct{}), tunnels: make(map[net.Conn]struct{})}
	x.tr = &http.Transport{
		DialContext:         x.dialSite,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	if w.shapes[i].Dead {
		addr, release, err := refusingAddr()
		if err != nil {
			return nil, err
		}
		x.url, x.release = &url.URL{Scheme: "http", Host: addr}, release
		return x, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	x.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	x.served = make(chan struct{})
	x.srv = &http.Server{
		Handler:           x,
		ReadHeaderTimeout: 30 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				x.accepted.Add(1)
			}
		},
	}
	go func() {
		defer close(x.served)
		x.srv.Serve(ln)
	}()
	return x, nil
}

// refusingAddr is a 127.0.0.1 address where nothing listens and that no
// listener can take until release: the port is held by one end of a
// loopback connection, so connecting to it is refused.
func refusingAddr() (addr string, release func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	defer ln.Close()
	holder, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return "", nil, err
	}
	peer, err := ln.Accept()
	if err != nil {
		holder.Close()
		return "", nil, err
	}
	return holder.LocalAddr().String(), func() { holder.Close(); peer.Close() }, nil
}

// close stops the exit: held requests end, every connection and tunnel is
// cut, and it returns once its goroutines have.
func (x *exit) close() {
	x.mu.Lock()
	x.closed = true
	open := make([]net.Conn, 0, len(x.tunnels))
	for c := range x.tunnels {
		open = append(open, c)
	}
	x.mu.Unlock()
	close(x.closing)
	if x.srv != nil {
		x.srv.Close()
		<-x.served
	}
	for _, c := range open {
		c.Close()
	}
	x.wg.Wait()
	x.tr.CloseIdleConnections()
	if x.release != nil {
		x.release()
	}
}

// enter counts a goroutine in, unless the exit is closing.
func (x *exit) enter() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.wg.Add(1)
	return true
}

// track adds c to the open tunnels, unless the exit is closing.
func (x *exit) track(c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.tunnels[c] = struct{}{}
	return true
}

func (x *exit) untrack(c net.Conn) {
	x.mu.Lock()
	delete(x.tunnels, c)
	x.mu.Unlock()
	c.Close()
}

// ServeHTTP is the proxy: count, ask the world, then hold, answer 407, or
// wait the exit's latency and refuse or carry the request to a site.
func (x *exit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !x.enter() {
		return
	}
	defer x.wg.Done()
	x.requests.Add(1)
	act, delay := x.world.atExit(x.index, time.Now())
	switch act {
	case actHold:
		x.wait(r.Context(), nil)
		return
	case act407:
		w.Header().Set("Proxy-Authenticate", `Basic realm="livebench"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	// A refusal crosses the exit too: a slow exit's answer to a neutral
	// probe (a CONNECT to a name no exit reaches) takes its latency, as a
	// real one's does and the simulator's probes do. Refused at once, a
	// slow exit would pass its first check as soon as a fast one, and a
	// crawler's first tunnels would go through it.
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		if !x.wait(r.Context(), t.C) {
			return
		}
	}
	if status, why := checkTarget(r); status != 0 {
		w.Header().Set("X-Livebench-Refused", "1")
		http.Error(w, "livebench exit: "+why, status)
		return
	}
	if r.Method == http.MethodConnect {
		x.tunnel(w, r)
		return
	}
	x.forward(w, r)
}

// wait blocks until done fires (true), or the request or the exit ends
// (false). With a nil done it waits for the end: a blackhole.
func (x *exit) wait(ctx context.Context, done <-chan time.Time) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-x.closing:
	}
	return false
}

// checkTarget refuses anything but a proxy request for a *.test site: a
// CONNECT to one, or an absolute-form http:// request for one. The status
// is 0 when the request may go on.
func checkTarget(r *http.Request) (status int, why string) {
	host := r.Host
	if r.Method != http.MethodConnect {
		if !r.URL.IsAbs() || r.URL.Scheme != "http" {
			return http.StatusBadRequest, "not an absolute-form http:// proxy request"
		}
		host = r.URL.Host
	}
	if !siteHost(hostOf(host)) {
		return http.StatusForbidden, "only *" + siteTLD + " sites are reachable"
	}
	return 0, ""
}

// siteHost reports whether host (no port) names a fake site: a name, not
// an address, under siteTLD.
func siteHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return len(h) > len(siteTLD) && strings.HasSuffix(h, siteTLD) && net.ParseIP(h) == nil
}

// dialSite connects to the site server on behalf of this exit, whatever
// site addr names (after checking it is one), so nothing but 127.0.0.1 is
// ever dialled. The site learns the connection is this exit's.
func (x *exit) dialSite(ctx context.Context, _, addr string) (net.Conn, error) {
	if !siteHost(hostOf(addr)) {
		return nil, errors.New("livebench exit: refusing to dial " + addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", x.sites.addr())
	if err != nil {
		return nil, err
	}
	return &siteConn{Conn: c, forget: x.sites.register(c.LocalAddr().String(), x.index)}, nil
}

// siteConn is a connection to the site server, forgotten by it on close.
type siteConn struct {
	net.Conn
	once   sync.Once
	forget func()
}

func (c *siteConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}

// WriteTo hands io.Copy the TCP connection under the wrapper, which would
// otherwise hide it from the splice fast path: a tunnel's bulk direction
// then costs the exit what it costs a splicing proxy (LiveCost's
// "upstream alone").
func (c *siteConn) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, c.Conn) }

// hopHeaders are the hop-by-hop headers a proxy does not pass on (RFC 9110
// §7.6.1), and the client's proxy credentials.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward performs an absolute-form request at the site and relays the
// answer.
func (x *exit) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := x.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "livebench exit: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// tunnel builds a CONNECT tunnel to the site and pipes both ways until
// either side closes or the exit does.
func (x *exit) tunnel(w http.ResponseWriter, r *http.Request) {
	site, err := x.dialSite(r.Context(), "tcp", r.Host)
	if err != nil {
		http.Error(w, "livebench exit: "+err.Error(), http.StatusBadGateway)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		site.Close()
		return
	}
	if !x.track(client) || !x.track(site) {
		client.Close()
		site.Close()
		return
	}
	defer x.untrack(client)
	defer x.untrack(site)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		return
	}
	up := make(chan struct{})
	go func() {
		defer close(up)
		x.carry(r.Context(), site, buf) // the client's bytes, those already buffered first
		site.Close()
	}()
	io.Copy(client, site)
	client.Close()
	<-up
}

// carry copies a tunnel's client bytes to the site, each burst of them
// after the exit's latency, as every round trip through a real exit pays
// it: a request inside a kept-alive tunnel costs what an absolute-form one
// does, and a blackholed exit stalls its tunnels too.
func (x *exit) carry(ctx context.Context, site io.Writer, client io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if !x.await(ctx) {
				return
			}
			if _, err := site.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// await waits what the world says one burst of a tunnel's bytes waits at
// this exit: its latency (no timer when that is none, so a fast exit's
// tunnel costs what a plain relay does), or, blackholed, until the end.
// False when the tunnel is to end instead.
func (x *exit) await(ctx context.Context) bool {
	act, delay := x.world.atExit(x.index, time.Now())
	if act != actHold && delay <= 0 {
		return true
	}
	var done <-chan time.Time // nil, for a blackhole: wait for the end
	if act != actHold {
		t := time.NewTimer(delay)
		defer t.Stop()
		done = t.C
	}
	return x.wait(ctx, done)
}

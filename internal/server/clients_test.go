package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// running is a server run until the test ends, and where to reach it.
type running struct {
	s     *Server
	proxy string // host:port
	admin string // http://host:port
}

// runServer runs a server over cfg, with an admin listener, until the
// test ends. log may be nil.
func runServer(t *testing.T, cfg *config.Config, log *slog.Logger) running {
	t.Helper()
	proxy, adm := listen(t), listen(t)
	s, err := New(cfg, Listeners{Proxy: proxy, Admin: adm}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return running{s: s, proxy: proxy.Addr().String(), admin: "http://" + adm.Addr().String()}
}

// metric is the value of one series on the admin listener's /metrics.
func (g running) metric(t *testing.T, series string) float64 {
	t.Helper()
	for line := range strings.Lines(g.metrics(t)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}

// metrics is the admin listener's /metrics. A scrape the admin cut is
// asked again, a few times: the tests set server.header_timeout to a
// second, which the admin listener keeps too, and a loaded machine may
// not read a scrape's headers within it.
func (g running) metrics(t *testing.T) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	var err error
	for range 5 {
		var resp *http.Response
		if resp, err = c.Get(g.admin + "/metrics"); err != nil {
			continue
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err = rerr; err == nil {
			return string(body)
		}
	}
	t.Fatal(err)
	return ""
}

// waitMetric waits, boundedly, until series reads want: the server counts
// a cut once the connection is closed, just after the client sees it.
func (g running) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got := g.metric(t, series); got != want; got = g.metric(t, series) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", series, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cutTotal(reason string) string {
	return `switchyard_client_conns_cut_total{reason="` + reason + `"}`
}

// site answers every request with the length of its body, and counts them.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func okSite(t *testing.T) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		io.WriteString(w, strconv.FormatInt(n, 10))
	}))
	t.Cleanup(s.Close)
	return s
}

// get is a keep-alive absolute-form GET of site's root.
func get(site *site) string {
	host := site.Listener.Addr().String()
	return "GET http://" + host + "/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
}

// roundTrip writes req on c and reads the answer, body included.
func roundTrip(c net.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

// waitClosed reads c until the server closes it, at most 30 s, and
// reports whether it did.
func waitClosed(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := br.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// Idle keep-alive connections, connections that send nothing and headers
// never finished are cut after their timeout, each counted by reason; the
// elapsed times are logged (measured from before the connection's first
// byte, so never shorter than the timeout).
func TestIdleAndSlowConnectionsAreCut(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := okSite(t)
		const short, long = time.Second, time.Minute
		tests := []struct {
			desc          string
			conns         int
			header, idle  time.Duration
			send          string
			answered      bool
			reason        string
			wantAtLeast   time.Duration
			untouchedKind string
		}{
			{desc: "idle keep-alive", conns: 1000, header: long, idle: short, send: get(site), answered: true, reason: "idle", wantAtLeast: short, untouchedKind: "header"},
			{desc: "conns after connect", conns: 200, header: short, idle: long, reason: "header", wantAtLeast: short, untouchedKind: "idle"},
			{desc: "headers never finished", conns: 200, header: short, idle: long, send: strings.TrimSuffix(get(site), "\r\n"), reason: "header", wantAtLeast: short, untouchedKind: "idle"},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				cfg := config.WithRoutes(direct(t))
				cfg.Server.HeaderTimeout, cfg.Server.IdleTimeout = tc.header, tc.idle
				g := runServer(t, cfg, nil)
				waitChecked(t, g.s.Engine())
				// elapsed is from before each connection's first byte: never
				// shorter than the timeout; quiet from the answer (or the last
				// byte sent) on, what the client saw of the timeout.
				elapsed, quiet := make([]time.Duration, tc.conns), make([]time.Duration, tc.conns)
				var wg sync.WaitGroup
				errs := make(chan error, tc.conns)
				for i := range tc.conns {
					wg.Go(func() {
						start := time.Now()
						c, err := net.Dial("tcp", g.proxy)
						if err != nil {
							errs <- err
							return
						}
						defer c.Close()
						br := bufio.NewReader(c)
						if tc.answered {
							if resp, _, err := roundTrip(c, br, tc.send); err != nil || resp.StatusCode != 200 {
								errs <- errors.New("the request before idling failed")
								return
							}
						} else if _, err := io.WriteString(c, tc.send); err != nil {
							errs <- err
							return
						}
						since := time.Now()
						if !waitClosed(c, br) {
							errs <- errors.New("not cut within 30s")
							return
						}
						elapsed[i], quiet[i] = time.Since(start), time.Since(since)
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				slices.Sort(elapsed)
				slices.Sort(quiet)
				if elapsed[0] < tc.wantAtLeast {
					t.Errorf("a connection was cut %v after its first byte, before its timeout %v", elapsed[0], tc.wantAtLeast)
				}
				t.Logf("%d connections cut (%s, timeout %v) %v to %v (median %v) after they went quiet",
					tc.conns, tc.reason, tc.wantAtLeast, quiet[0].Round(time.Millisecond), quiet[tc.conns-1].Round(time.Millisecond), quiet[tc.conns/2].Round(time.Millisecond))
				g.waitMetric(t, cutTotal(tc.reason), float64(tc.conns))
				g.waitMetric(t, "switchyard_client_conns", 0)
				if n := g.metric(t, cutTotal(tc.untouchedKind)); n != 0 {
					t.Errorf("%v connections counted as %s", n, tc.untouchedKind)
				}
			})
		}
	})
}

// openTunnel builds a CONNECT tunnel to addr through the proxy.
func openTunnel(t *testing.T, proxy, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c, br
}

// echoes reports whether the tunnel carries a message there and back.
func echoes(c net.Conn, br *bufio.Reader) bool {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return false
	}
	line, err := br.ReadString('\n')
	return err == nil && line == "ping\n"
}

// dialProxy connects to the proxy, closing the connection when the test
// ends.
func dialProxy(t *testing.T, g running) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// Connections beyond max_client_conns are closed as soon as accepted,
// unanswered and counted; a tunnel holds its place while open and is never
// cut for idleness, however long it is quiet.
func TestConnectionCap(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := okSite(t)
		echo := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
		const capacity, over = 10, 5
		cfg := config.WithRoutes(direct(t))
		cfg.Server.MaxClientConns, cfg.Server.IdleTimeout = capacity, time.Second
		g := runServer(t, cfg, nil)
		waitChecked(t, g.s.Engine())

		// A tunnel and connections yet to send their request (under the
		// header timeout of a minute) fill the cap.
		tunnel, tr := openTunnel(t, g.proxy, echo)
		conns := make([]net.Conn, capacity-1)
		for i := range conns {
			conns[i], _ = dialProxy(t, g)
		}
		g.waitMetric(t, "switchyard_client_conns", capacity)
		for range over {
			c, br := dialProxy(t, g)
			if _, _, err := roundTrip(c, br, get(site)); err == nil {
				t.Fatal("a connection over the cap was served")
			}
			if !waitClosed(c, br) {
				t.Fatal("a connection over the cap stayed open")
			}
		}
		if n := g.metric(t, cutTotal("over_cap")); n != over {
			t.Errorf("%v connections counted over the cap, want %d", n, over)
		}
		for _, c := range conns {
			c.Close()
		}
		g.waitMetric(t, "switchyard_client_conns", 1)

		// Keep-alive connections take the places freed, and are cut once
		// idle; the tunnel, quiet since before they were made, is not.
		idle := make([]*bufio.Reader, capacity-1)
		for i := range idle {
			c, br := dialProxy(t, g)
			if resp, _, err := roundTrip(c, br, get(site)); err != nil || resp.StatusCode != 200 {
				t.Fatalf("within the cap: %v %v", resp, err)
			}
			conns[i], idle[i] = c, br
		}
		for i, br := range idle {
			if !waitClosed(conns[i], br) {
				t.Fatal("an idle connection was not cut")
			}
		}
		g.waitMetric(t, cutTotal("idle"), capacity-1)
		if !echoes(tunnel, tr) {
			t.Fatal("the tunnel was cut")
		}
		tunnel.Close()
		g.waitMetric(t, "switchyard_client_conns", 0)
	})
}

// A request body that falls behind min_body_rate by body_timeout is cut,
// however fast it started; a large fast upload is not, nor a trickle under
// min_body_rate 0 that never stalls for body_timeout.
func TestSlowBodiesAreCut(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc    string
			timeout time.Duration
			rate    int64
			length  int           // Content-Length
			burst   int           // bytes written at once after the headers
			every   time.Duration // then one byte each; 0 for none (a stall)
			wantCut bool
		}{
			{desc: "1 B/s", timeout: 2 * time.Second, rate: 1024, length: 120, every: time.Second, wantCut: true},
			{desc: "stall after a fast start", timeout: 2 * time.Second, rate: 1024, length: 512 << 10, burst: 256 << 10, wantCut: true},
			{desc: "large fast upload", timeout: 10 * time.Second, rate: 1024, length: 8 << 20, burst: 8 << 20},
			{desc: "trickle without a rate", timeout: 10 * time.Second, length: 20, every: 20 * time.Millisecond},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				site := okSite(t)
				cfg := config.WithRoutes(direct(t))
				cfg.Server.BodyTimeout, cfg.Server.MinBodyRate = tc.timeout, tc.rate
				g := runServer(t, cfg, nil)
				waitChecked(t, g.s.Engine())

				start := time.Now()
				c, err := net.Dial("tcp", g.proxy)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				host := site.Listener.Addr().String()
				io.WriteString(c, "POST http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: "+strconv.Itoa(tc.length)+"\r\n\r\n")
				type answer struct {
					resp *http.Response
					body string
					err  error
				}
				answered := make(chan answer, 1)
				go func() {
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					var body []byte
					if err == nil {
						body, err = io.ReadAll(resp.Body)
						resp.Body.Close()
					}
					answered <- answer{resp, string(body), err}
				}()
				if _, err := c.Write(make([]byte, tc.burst)); err != nil && !tc.wantCut {
					t.Fatal(err)
				}
				var got answer
				var trickle <-chan time.Time // nil: no trickle
				if tc.every > 0 {
					tick := time.NewTicker(tc.every)
					defer tick.Stop()
					trickle = tick.C
				}
				giveUp := time.After(60 * time.Second)
			wait:
				for sent := tc.burst; ; {
					select {
					case got = <-answered:
						break wait
					case <-trickle:
						if sent < tc.length {
							c.Write([]byte{'x'})
							sent++
						}
					case <-giveUp:
						t.Fatal("no answer within 60s")
					}
				}
				elapsed := time.Since(start)
				if !tc.wantCut {
					if got.err != nil || got.resp.StatusCode != 200 || got.body != strconv.Itoa(tc.length) {
						t.Fatalf("answer %+v, want 200 and the site to get %d bytes", got, tc.length)
					}
					if n := g.metric(t, cutTotal("slow_body")); n != 0 {
						t.Errorf("%v bodies cut", n)
					}
					return
				}
				// The client gets 400 if it reads before the cut reaches it.
				if got.err == nil && (got.resp.StatusCode != http.StatusBadRequest || !strings.Contains(got.body, "too slow")) {
					t.Errorf("answer %d %q, want 400 naming the slowness", got.resp.StatusCode, got.body)
				}
				if elapsed < tc.timeout {
					t.Errorf("cut after %v, before body_timeout %v", elapsed, tc.timeout)
				}
				how := "connection closed"
				if got.err == nil {
					how = got.resp.Status
				}
				t.Logf("%s: cut after %v (body_timeout %v, min_body_rate %d B/s): %s", tc.desc, elapsed.Round(time.Millisecond), tc.timeout, tc.rate, how)
				g.waitMetric(t, cutTotal("slow_body"), 1)
				if n := site.hits.Load(); n != 0 {
					t.Errorf("the site got %d requests", n)
				}
			})
		}
	})
}

// A client connection hands its TCP connection over to a tunnel, which
// copies straight between TCP connections so that the kernel splices
// them; a connection of another kind has none to hand over.
func TestClientConnHandsOverTCP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := (&clientConn{Conn: c}).TCPConn(); got != c {
		t.Errorf("TCPConn() = %v, want the connection beneath", got)
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if got := (&clientConn{Conn: p}).TCPConn(); got != nil {
		t.Errorf("TCPConn() of a pipe = %v, want nil", got)
	}
}

// admin.pprof puts Go's profiles on the admin listener, behind the admin
// token.
func TestPprofOnAdmin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switchyard.toml")
	if err := os.WriteFile(path, []byte("[routes]\ninline = [\"direct\"]\n[admin]\npprof = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{Path: path, Env: []string{"SWITCHYARD_ADMIN_TOKEN=tok-server"}})
	if err != nil {
		t.Fatal(err)
	}
	g := runServer(t, cfg, nil)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer tok-server", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, g.admin+"/debug/pprof/goroutine?debug=1", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || tc.want == http.StatusOK && !strings.Contains(string(body), "goroutine") {
			t.Errorf("with %q: %d %.80q, want %d", tc.auth, resp.StatusCode, body, tc.want)
		}
	}
}

// switchyard_upstream_conns counts the connections of the transport the
// routes share: the direct route's one to the site, kept idle after the
// request.
func TestUpstreamConnsMetric(t *testing.T) {
	site := okSite(t)
	g := runServer(t, config.WithRoutes(direct(t)), nil)
	waitChecked(t, g.s.Engine())
	if n := g.metric(t, "switchyard_upstream_conns"); n != 0 {
		t.Fatalf("%v upstream connections before any request", n)
	}
	c, br := dialProxy(t, g)
	if resp, _, err := roundTrip(c, br, get(site)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%v %v", resp, err)
	}
	if n := g.metric(t, "switchyard_upstream_conns"); n != 1 {
		t.Errorf("%v upstream connections after one request, want 1", n)
	}
}

// metrics.per_route reaches /metrics: the series labelled by route are
// there under auto with one route, and on true, and not on false, while
// the pool's stay.
func TestMetricsPerRouteSetting(t *testing.T) {
	tests := []struct {
		desc     string
		perRoute admin.PerRoute
		want     bool
	}{
		{"auto, one route", admin.PerRouteAuto, true},
		{"true", admin.PerRouteOn, true},
		{"false", admin.PerRouteOff, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := config.WithRoutes(direct(t))
			cfg.Metrics.PerRoute = tc.perRoute
			body := runServer(t, cfg, nil).metrics(t)
			if got := strings.Contains(body, `switchyard_route_score{route="direct"}`); got != tc.want {
				t.Errorf("per-route series %v, want %v", got, tc.want)
			}
			if !strings.Contains(body, `switchyard_routes{state="candidate"}`) {
				t.Error("no switchyard_routes")
			}
		})
	}
}

// TestClientLeavingEndsTheAttempt: a client that gives up on a silent exit
// ends the attempt through it when it leaves (the front door's watch, through
// the socket beneath clientConn), not at the attempt's deadline, a minute on.
func TestClientLeavingEndsTheAttempt(t *testing.T) {
	exit := listen(t)
	asked, cut := make(chan struct{}), make(chan struct{})
	go func() {
		for first := true; ; first = false {
			c, err := exit.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [1]byte
				if _, err := c.Read(b[:]); err != nil || !first {
					return
				}
				close(asked)
				io.Copy(io.Discard, c) // never answers: returns when the gateway lets go
				close(cut)
			}()
		}
	}()
	defer exit.Close()
	cfg := configOf(t, "http://"+exit.Addr().String()+"\n")
	cfg.Engine.UncheckedCandidates = true // the one connection the exit takes is the request's
	cfg.Retry.AttemptTimeout, cfg.Engine.DeadlineFloor = time.Minute, time.Minute
	cfg.Retry.RequestTimeout = 2 * time.Minute
	g := runServer(t, cfg, nil)

	client, err := net.Dial("tcp", g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	io.WriteString(client, "GET http://site.test/ HTTP/1.1\r\nHost: site.test\r\n\r\n")
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the exit")
	}
	client.Close()
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt outlived its client by 10 s")
	}
}

// TestUpgradeThroughTheFrontDoor: a WebSocket handshake through the real
// server is answered 101 on the client's own connection, and bytes then
// pass both ways (the front door hands the connection over).
func TestUpgradeThroughTheFrontDoor(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo "+line)
	}))
	defer site.Close()
	g := runServer(t, config.WithRoutes(direct(t)), nil)

	client, err := net.Dial("tcp", g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.SetDeadline(time.Now().Add(10 * time.Second))
	host := strings.TrimPrefix(site.URL, "http://")
	io.WriteString(client, "GET "+site.URL+"/ HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(client)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the handshake: %v, %v", res, err)
	}
	io.WriteString(client, "ping\n")
	if line, err := br.ReadString('\n'); line != "echo ping\n" {
		t.Errorf("through the upgraded connection: %q, %v", line, err)
	}
}

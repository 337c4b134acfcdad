package livebench

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testFleet starts a fleet of shapes over testSites, closed by t.Cleanup.
func testFleet(t *testing.T, shapes ...Shape) *fleet {
	t.Helper()
	f, err := startFleet(shapes, testSites, 1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return f
}

// fleetGoroutines are the stacks of goroutines running the fleet's code:
// servers, handlers, tunnels.
func fleetGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"livebench.(*exit).", "livebench.startExit", "livebench.startSites", "livebench.(*siteServer)."} {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}

// TestCloseLeavesNothingRunning is not parallel, so that no other test's
// fleet runs beside it: close must return only once every goroutine of
// the fleet has, held requests and open tunnels included.
func TestCloseLeavesNothingRunning(t *testing.T) {
	f, err := startFleet([]Shape{fast(), blackholed(), dead()}, testSites, 1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _, err := fetch(t, f, 0, "shop.test", 5*time.Second); status != 200 {
		t.Fatalf("%d %v", status, err)
	}
	// A tunnel left open, and a request held by the blackhole.
	c, err := net.DialTimeout("tcp", f.exits[0].url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT shop.test:80 HTTP/1.1\r\nHost: shop.test:80\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	held, err := net.DialTimeout("tcp", f.exits[1].url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	io.WriteString(held, "GET http://shop.test/ HTTP/1.1\r\nHost: shop.test\r\n\r\n")
	// Until the blackhole holds it: the handler counts before it holds.
	deadline := time.Now().Add(5 * time.Second)
	for f.exits[1].requests.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the blackholed exit never got the request")
		}
		runtime.Gosched()
	}
	f.close()
	// A goroutine that has told close it is done may still be returning:
	// allow it a bounded moment to be gone.
	deadline = time.Now().Add(2 * time.Second)
	for leaked := fleetGoroutines(); leaked != ""; leaked = fleetGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after close:\n%s", leaked)
		}
		runtime.Gosched()
	}
}

// fetch GETs http://site/p/1 through exit i of f, within timeout, and
// returns the status, the Retry-After header and the body.
func fetch(t *testing.T, f *fleet, i int, site string, timeout time.Duration) (status int, retryAfter, body string, err error) {
	t.Helper()
	c := proxyClient(f.exits[i].url, 1, f.roots)
	defer closeClients(c)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+site+"/p/1", nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err
}

// tunnelGet GETs http://site/p/1 inside a CONNECT tunnel through exit i.
func tunnelGet(t *testing.T, f *fleet, i int, site string) (connectStatus, status int, body string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.exits[i].url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "CONNECT "+site+":80 HTTP/1.1\r\nHost: "+site+":80\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, 0, ""
	}
	io.WriteString(c, "GET /p/1 HTTP/1.1\r\nHost: "+site+"\r\n\r\n")
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Body.Close()
	b, _ := io.ReadAll(inner.Body)
	return http.StatusOK, inner.StatusCode, string(b)
}

func TestExitsForwardAndTunnelAsShaped(t *testing.T) {
	t.Parallel()
	f := testFleet(t, fast(), fast().on("shop.test", banned), fast().on("news.test", captcha), auth407())
	real := pageTag("shop.test", "/p/1")
	tests := []struct {
		desc       string
		exit       int
		site       string
		wantStatus int
		wantBody   string // a substring
	}{
		{"healthy exit gets the page", 0, "shop.test", 200, real},
		{"banned exit: 403 on its site", 1, "shop.test", 403, ""},
		{"banned exit: the page elsewhere", 1, "news.test", 200, pageTag("news.test", "/p/1")},
		{"captcha exit: the captcha page on its site", 2, "news.test", 200, DefaultCaptchaMarker},
		{"captcha exit: the page elsewhere", 2, "shop.test", 200, real},
		{"unknown site under .test", 0, "nowhere.test", 404, ""},
	}
	for _, tt := range tests {
		t.Run("forward/"+tt.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body, err := fetch(t, f, tt.exit, tt.site, 5*time.Second)
			if err != nil || status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("got %d %v %.80q, want %d with %q", status, err, body, tt.wantStatus, tt.wantBody)
			}
		})
		t.Run("tunnel/"+tt.desc, func(t *testing.T) {
			t.Parallel()
			connect, status, body := tunnelGet(t, f, tt.exit, tt.site)
			if connect != 200 || status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("got CONNECT %d, %d %.80q; want %d with %q", connect, status, body, tt.wantStatus, tt.wantBody)
			}
		})
	}
	t.Run("407 for requests and CONNECT", func(t *testing.T) {
		t.Parallel()
		if status, _, _, err := fetch(t, f, 3, "shop.test", 5*time.Second); status != 407 {
			t.Fatalf("forward: %d %v", status, err)
		}
		if connect, _, _ := tunnelGet(t, f, 3, "shop.test"); connect != 407 {
			t.Fatalf("CONNECT: %d", connect)
		}
	})
}

// TestExitsRefuseAnythingButSites: an exit refuses whatever is not a
// proxy request for a fake site, after its latency, as a real exit's
// answers cross its path.
func TestExitsRefuseAnythingButSites(t *testing.T) {
	t.Parallel()
	const latency = 200 * time.Millisecond
	f := testFleet(t, Shape{Latency: latency})
	exit := f.exits[0].url.Host
	tests := []struct {
		desc    string
		request string // the request line and headers, without the final CRLF
		want    int
	}{
		{"a public name", "GET http://example.com/ HTTP/1.1\r\nHost: example.com", 403},
		{"a loopback address", "GET http://127.0.0.1:" + portOf(f.sites.addr()) + "/ HTTP/1.1\r\nHost: 127.0.0.1", 403},
		{"localhost", "GET http://localhost/ HTTP/1.1\r\nHost: localhost", 403},
		{"a private address by CONNECT", "CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443", 403},
		{"a public name by CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443", 403},
		{"https in absolute form", "GET https://shop.test/ HTTP/1.1\r\nHost: shop.test", 400},
		{"origin form: not a proxy request", "GET /p/1 HTTP/1.1\r\nHost: shop.test", 400},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			c, err := net.DialTimeout("tcp", exit, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			start := time.Now()
			io.WriteString(c, tt.request+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			resp.Body.Close()
			if resp.StatusCode != tt.want || resp.Header.Get("X-Livebench-Refused") != "1" {
				t.Fatalf("got %d (refused header %q), want %d", resp.StatusCode, resp.Header.Get("X-Livebench-Refused"), tt.want)
			}
			if took < latency {
				t.Errorf("refused after %v, before the exit's latency %v", took, latency)
			}
		})
	}
}

// portOf is the port of hostport.
func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

func TestRateLimitedExitOverHTTP(t *testing.T) {
	t.Parallel()
	f := testFleet(t, fast().on("shop.test", rateLimited(2, 7*time.Second)))
	// The bucket holds 2 and refills one every 500 ms: requests back to
	// back empty it after a few, however slow the machine, unless each
	// takes half a second.
	var statuses []int
	for len(statuses) < 20 {
		status, retry, _, err := fetch(t, f, 0, "shop.test", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, status)
		if status == http.StatusTooManyRequests {
			if retry != "7" {
				t.Fatalf("Retry-After %q, want the 7 s penalty", retry)
			}
			break
		}
		if status != http.StatusOK {
			t.Fatalf("statuses %v: want 200s until a 429", statuses)
		}
	}
	if len(statuses) < 3 || statuses[len(statuses)-1] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v: want at least two 200s, then a 429", statuses)
	}
	// The penalty holds for the site, not for the other one.
	if status, retry, _, _ := fetch(t, f, 0, "shop.test", 5*time.Second); status != 429 || (retry != "7" && retry != "6") {
		t.Fatalf("during the penalty: %d, Retry-After %q", status, retry)
	}
	if status, _, _, _ := fetch(t, f, 0, "news.test", 5*time.Second); status != 200 {
		t.Fatalf("the other site: %d", status)
	}
}

func TestDeadExitRefuses(t *testing.T) {
	t.Parallel()
	f := testFleet(t, dead())
	_, _, _, err := fetch(t, f, 0, "shop.test", 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want connection refused", err)
	}
}

func TestBlackholeHoldsThenAnswersWhenSwitchedOff(t *testing.T) {
	t.Parallel()
	f := testFleet(t, fast())
	f.world.setBlackhole(0, true)
	// A blackhole accepts the connection and answers nothing: the client
	// times out, whatever its timeout.
	if _, _, _, err := fetch(t, f, 0, "shop.test", 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blackholed: err = %v, want a timeout", err)
	}
	if tunnelHeld(t, f, 0) {
		t.Fatal("blackholed: CONNECT answered")
	}
	f.world.setBlackhole(0, false)
	if status, _, _, err := fetch(t, f, 0, "shop.test", 5*time.Second); status != 200 {
		t.Fatalf("switched off: %d %v", status, err)
	}
	if got := f.exits[0].requests.Load(); got != 3 {
		t.Fatalf("the exit counted %d requests, want 3 (held ones included)", got)
	}
}

// tunnelHeld sends a CONNECT through exit i and reports whether anything
// came back within 200 ms.
func tunnelHeld(t *testing.T, f *fleet, i int) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.exits[i].url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT shop.test:80 HTTP/1.1\r\nHost: shop.test:80\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, _ := c.Read(make([]byte, 1))
	return n > 0
}

func TestBlackholeWindowFollowsTheRun(t *testing.T) {
	t.Parallel()
	f := testFleet(t, fast().blackholedDuring(0.2, 0.6))
	// The window sits on the run's timeline: place the run so that now is
	// inside it, then after it.
	f.begin(time.Now().Add(-3*time.Second), 10*time.Second) // now is at 30%
	if _, _, _, err := fetch(t, f, 0, "shop.test", 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("inside the window: err = %v, want a timeout", err)
	}
	f.begin(time.Now().Add(-7*time.Second), 10*time.Second) // now is at 70%
	if status, _, _, err := fetch(t, f, 0, "shop.test", 5*time.Second); status != 200 {
		t.Fatalf("after the window: %d %v", status, err)
	}
}

func TestFleetCountsRequests(t *testing.T) {
	t.Parallel()
	f := testFleet(t, fast(), fast())
	for range 3 {
		fetch(t, f, 1, "shop.test", 5*time.Second)
	}
	if got := f.perExit(); got[0] != 0 || got[1] != 3 {
		t.Fatalf("per exit %v, want [0 3]", got)
	}
	for _, u := range f.urls() {
		if u.Hostname() != "127.0.0.1" {
			t.Fatalf("exit URL %v is not on 127.0.0.1", u)
		}
	}
}

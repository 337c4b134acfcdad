package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A kept-alive tunnel whose exit dies under it: the stall watch checks the
// exit once the client has waited past the deadline, the check times out,
// and the tunnel is cut, so that the client learns at once instead of at
// its own timeout. A few bytes the client sends expecting no answer are
// no wait. Through a live exit a slow answer is left alone: the check
// passes, nothing is cut, the answer arrives whole. Either way the watch
// stops once the tunnels end (NoLeaks).
func TestStalledTunnel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the stall watch reads TCP_INFO, Linux's")
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc     string
			hang     bool // the exit hangs after the first exchange
			ack      bool // then the client sends a few bytes and waits past the deadline
			slow     bool // the site waits past the deadline before its second answer
			wantCut  bool
			wantSeen engine.Class // the check's class
		}{
			{desc: "the exit hangs", hang: true, wantCut: true, wantSeen: engine.ProxyTimeout},
			{desc: "the exit hangs, a few bytes first", hang: true, ack: true, wantCut: true, wantSeen: engine.ProxyTimeout},
			{desc: "the site is slow", slow: true, wantSeen: engine.OK},
		}
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				// Past the tunnel's deadline, and a check's: the deadline
				// is engine.deadline_floor's 1s when the route answered its
				// CONNECT and first exchange in a few milliseconds, longer
				// on a loaded machine, so it is read once they are known.
				var past atomic.Int64
				site := echoSite(t, func() time.Duration {
					if tc.slow {
						return time.Duration(past.Load())
					}
					return 0
				})
				p := routetest.NewProxy(t, routetest.Behavior{Hangable: true})
				rec := &recorder{}
				v := newEnv(t, Config{Observer: rec}, proxyLine(p, ""))
				const patience = 20 * time.Second // the client's own timeout
				c, br := openTunnel(t, v, site, patience)
				exchange := func(line string) (string, error) { return exchangeLine(c, br, line) }
				if got, err := exchange(long("one")); got != "got "+long("one")+"\n" {
					t.Fatalf("first exchange: %q, %v", got, err)
				}
				v.waitOutcome(t, 0, engine.OK)
				past.Store(int64(v.deadline(0, site) + 1500*time.Millisecond))
				if tc.hang {
					p.Hang()
				}
				if tc.ack {
					io.WriteString(c, "ack\n")
					time.Sleep(time.Duration(past.Load()))
					rec.mu.Lock()
					checks := len(rec.stallChecks)
					rec.mu.Unlock()
					if checks != 0 {
						t.Fatalf("%d checks after the client sent 4 bytes", checks)
					}
				}
				start := time.Now()
				got, err := exchange(long("two"))
				took := time.Since(start)
				rec.waitFor(t, "a stall check", func() bool { return len(rec.stallChecks) > 0 })
				rec.mu.Lock()
				checks, cut := slices.Clone(rec.stallChecks), rec.cut[TunnelCutExitFailed]
				rec.mu.Unlock()
				if checks[0] != tc.wantSeen {
					t.Errorf("checks %v, want the first %v", checks, tc.wantSeen)
				}
				if tc.wantCut {
					if err == nil || took >= patience/2 || cut != 1 {
						t.Fatalf("second exchange through the hung exit: %q, %v after %v, %d cut: want the tunnel cut long before the client's timeout", got, err, took, cut)
					}
					v.waitOutcome(t, 0, engine.ProxyTimeout)
					return
				}
				if got != "got "+long("two")+"\n" || cut != 0 {
					t.Errorf("second exchange through the live exit: %q, %v, %d cut: want the slow answer whole", got, err, cut)
				}
				// Past stallCheckEvery, the same wait is not checked again.
				if len(checks) != 1 {
					t.Errorf("checks %v: want the one that passed", checks)
				}
			})
		}
	})
}

// A client waiting on a slow site has its exit checked only if nothing
// came through the exit since it spoke: while another tunnel through the
// same exit streams its server's bytes, the exit is plainly alive.
func TestStallWatchSparesAnExitThatCarries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the stall watch reads TCP_INFO, Linux's")
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		const wait = 2500 * time.Millisecond // the slow site's, past the deadline (1s) and a check's
		slow := routetest.ServeTCP(t, func(c net.Conn) {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			time.Sleep(wait)
			io.WriteString(c, "got "+line)
		})
		stream := routetest.ServeTCP(t, func(c net.Conn) {
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			for range 2 * wait / (50 * time.Millisecond) {
				if _, err := io.WriteString(c, "."); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		p := routetest.NewProxy(t, routetest.Behavior{})
		rec := &recorder{}
		v := newEnv(t, Config{Observer: rec}, proxyLine(p, ""))
		request := long("GET")
		sc, sbr := openTunnel(t, v, stream, 4*wait)
		io.WriteString(sc, request+"\n")
		if _, err := sbr.ReadByte(); err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, sbr)
		c, br := openTunnel(t, v, slow, 4*wait)
		if got, err := exchangeLine(c, br, request); got != "got "+request+"\n" || err != nil {
			t.Fatalf("the slow site's answer: %q, %v", got, err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.stallChecks) != 0 {
			t.Errorf("checks %v while the exit carried another tunnel's bytes", rec.stallChecks)
		}
	})
}

// A tunnel through a route drained since it was built is closed once it
// idles between two exchanges, and not while its client waits for an
// answer: the route takes no new work.
func TestDrainedRouteClosesIdleTunnels(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the stall watch reads TCP_INFO, Linux's")
	}
	routetest.NoLeaks(t, func(t *testing.T) {
		// The site's wait before its second answer is past stallIdle.
		site := echoSite(t, func() time.Duration { return 1500 * time.Millisecond })
		p := routetest.NewProxy(t, routetest.Behavior{})
		rec := &recorder{}
		v := newEnv(t, Config{Observer: rec}, proxyLine(p, ""))
		c, br := openTunnel(t, v, site, 20*time.Second)
		exchange := func(line string) (string, error) { return exchangeLine(c, br, line) }
		one, two := long("one"), long("two")
		if got, err := exchange(one); got != "got "+one+"\n" {
			t.Fatalf("first exchange: %q, %v", got, err)
		}
		if err := v.e.Drain(time.Now(), v.id(0)); err != nil {
			t.Fatal(err)
		}
		// Waiting on the slow site past stallIdle: not idle, not closed.
		if got, err := exchange(two); got != "got "+two+"\n" {
			t.Fatalf("the exchange under way when the route was drained: %q, %v", got, err)
		}
		start := time.Now()
		if n, err := br.ReadByte(); err == nil || os.IsTimeout(err) {
			t.Fatalf("read %q, %v from the idle tunnel of a drained route: want it closed", n, err)
		}
		// The kernel counts to the jiffy: a few ms early is stallIdle.
		if took := time.Since(start); took < stallIdle/2 {
			t.Errorf("closed after %v idle, long before stallIdle", took)
		}
		rec.waitFor(t, "a tunnel closed, drained", func() bool { return rec.cut[TunnelCutDrained] == 1 })
	})
}

// echoSite serves lines, answering each with "got " and the line, the
// second after slow() has passed.
func echoSite(t *testing.T, slow func() time.Duration) string {
	return routetest.ServeTCP(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if n == 1 {
				time.Sleep(slow())
			}
			if _, err := io.WriteString(c, "got "+line); err != nil {
				return
			}
		}
	})
}

// openTunnel opens a tunnel to site through v's gateway, for patience.
func openTunnel(t *testing.T, v *env, site string, patience time.Duration) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(patience))
	io.WriteString(c, "CONNECT "+site+" HTTP/1.1\r\nHost: "+site+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v, %v", site, resp, err)
	}
	return c, br
}

// exchangeLine sends line through a tunnel and reads the answer's line.
func exchangeLine(c net.Conn, br *bufio.Reader, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return br.ReadString('\n')
}

// long is s made a request's worth: more than stallMinBytes.
func long(s string) string { return s + " " + strings.Repeat("x", stallMinBytes) }

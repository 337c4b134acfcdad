package route_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// path is the way an attempt goes out through an Exit.
type path uint8

const (
	forward path = 1 << iota // an absolute-form GET through RoundTrip, its body read to the end
	tunnel                   // a stream to the target through DialTarget, as for a client's CONNECT
	both    = forward | tunnel
)

func (p path) String() string {
	if p == forward {
		return "forward"
	}
	return "tunnel"
}

// The route types each row runs for.
var (
	anyRoute    = []route.Scheme{route.HTTP, route.HTTPS, route.SOCKS5, route.Direct}
	anyProxy    = []route.Scheme{route.HTTP, route.HTTPS, route.SOCKS5}
	httpProxies = []route.Scheme{route.HTTP, route.HTTPS}
	httpsOnly   = []route.Scheme{route.HTTPS}
	socksOnly   = []route.Scheme{route.SOCKS5}
	directOnly  = []route.Scheme{route.Direct}
)

// layerSetup builds a row's route of scheme s and its target.
type layerSetup func(t *testing.T, s route.Scheme) dialCase

// through goes to target through a routetest proxy of scheme s behaving
// as b (its TLS and Kind follow s), or straight to target on Direct.
func through(b routetest.Behavior, target func(testing.TB) string) layerSetup {
	return func(t *testing.T, s route.Scheme) dialCase {
		if s == route.Direct {
			return direct(target)(t)
		}
		b := b // one row runs for many schemes
		b.TLS = s == route.HTTPS
		if s == route.SOCKS5 {
			b.Kind = routetest.SOCKS5Proxy
		}
		return viaProxy(b, target)(t)
	}
}

// at is a route whose proxy, or for Direct whose target, is host.
func at(host func(testing.TB) string) layerSetup {
	return func(t *testing.T, s route.Scheme) dialCase {
		if s == route.Direct {
			return direct(host)(t)
		}
		u := &url.URL{Scheme: string(s), Host: host(t), User: url.UserPassword(user, password)}
		return dialCase{r: routeFor(t, u), addr: pageTarget(t)}
	}
}

// raw is a route whose proxy is handle on a raw listener.
func raw(handle func(net.Conn)) layerSetup {
	return func(t *testing.T, s route.Scheme) dialCase { return viaRaw(s, handle)(t) }
}

// distrusted verifies an HTTPS proxy's certificate against an empty pool.
func distrusted(s layerSetup) layerSetup {
	return func(t *testing.T, scheme route.Scheme) dialCase {
		return untrusted(func(t *testing.T) dialCase { return s(t, scheme) })(t)
	}
}

// noSuchHost is a name that cannot resolve, refused by the resolver
// before any query leaves the machine.
func noSuchHost(testing.TB) string { return "no..such:80" }

// silentTarget reads requests and never answers.
func silentTarget(t testing.TB) string {
	return routetest.ServeTCP(t, func(c net.Conn) { io.Copy(io.Discard, c) })
}

// heardTarget reads requests and never answers, and closes the channel
// heard(addr) gives once it has read one: a request out, whatever it
// went through.
func heardTarget(t testing.TB) string {
	ch := make(chan struct{})
	var once sync.Once
	addr := routetest.ServeTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			once.Do(func() { close(ch) })
		}
		io.Copy(io.Discard, c)
	})
	heardAt.Store(addr, ch)
	t.Cleanup(func() { heardAt.Delete(addr) })
	return addr
}

// heardAt holds each heardTarget's channel by its address.
var heardAt sync.Map

// heard is the channel of the heardTarget at addr.
func heard(addr string) <-chan struct{} {
	ch, _ := heardAt.Load(addr)
	return ch.(chan struct{})
}

// hangupTarget closes the connection once it has read the request.
func hangupTarget(t testing.TB) string {
	return routetest.ServeTCP(t, func(c net.Conn) { http.ReadRequest(bufio.NewReader(c)) })
}

// headersOnly answers the headers and the first bytes of a longer body,
// then leaves the connection to end: stalledBody holds it open, cutBody
// closes it.
func headersOnly(end func(net.Conn)) func(testing.TB) string {
	return func(t testing.TB) string {
		return routetest.ServeTCP(t, func(c net.Conn) {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nthe first bytes")
			end(c)
		})
	}
}

var (
	stalledBody = headersOnly(func(c net.Conn) { io.Copy(io.Discard, c) })
	cutBody     = headersOnly(func(net.Conn) {}) // closed: the body ends short
)

// closeTLS is an HTTPS proxy that closes once the client's hello came.
func closeTLS(c net.Conn) { c.Read(make([]byte, 1)) }

// When the caller gives up.
type cancelAt uint8

const (
	never     cancelAt = iota
	before             // before the attempt starts
	onceHeard          // as soon as the target has read the request (forward path, heardTarget)
	midway             // a moment into the attempt, wherever it is
)

// TestClassifyByLayer is the contract of Classify: each failure, on each
// route type it can happen on, through real listeners, in the class of
// the layer that failed, and whether bytes of the request may have
// reached the target.
func TestClassifyByLayer(t *testing.T) {
	const (
		short = 100 * time.Millisecond // Timeouts.Dial or Handshake of rows that stall there
		quiet = 300 * time.Millisecond // the attempt's deadline for rows that wait on silence
	)
	routetest.NoLeaks(t, func(t *testing.T) {
		tests := []struct {
			desc     string
			schemes  []route.Scheme
			path     path
			setup    layerSetup
			timeouts route.Timeouts
			deadline time.Duration // of the attempt's context; 0: 5s
			cancel   cancelAt
			class    engine.Class
			reached  bool
		}{
			// Reaching the exit.
			{desc: "proxy refuses the connection", schemes: anyProxy, path: both, setup: through(routetest.Behavior{Refuse: true}, pageTarget), class: engine.ProxyConnectFailed},
			{desc: "proxy name does not resolve", schemes: anyProxy, path: both, setup: at(noSuchHost), class: engine.ProxyConnectFailed},
			{desc: "connecting to the proxy outlasts Timeouts.Dial", schemes: anyProxy, path: both, setup: at(routetest.StalledPort), timeouts: route.Timeouts{Dial: short}, class: engine.ProxyTimeout},
			{desc: "connecting to the proxy outlasts the deadline", schemes: anyProxy, path: both, setup: at(routetest.StalledPort), deadline: short, class: engine.ProxyTimeout},
			{desc: "TLS: untrusted certificate", schemes: httpsOnly, path: both, setup: distrusted(through(routetest.Behavior{}, pageTarget)), class: engine.ProxyConnectFailed},
			{desc: "TLS: garbage", schemes: httpsOnly, path: both, setup: raw(func(c net.Conn) { io.WriteString(c, "SSH-2.0-NotTLS\r\n"); io.Copy(io.Discard, c) }), class: engine.ProxyConnectFailed},
			{desc: "TLS: closed", schemes: httpsOnly, path: both, setup: raw(closeTLS), class: engine.ProxyConnectFailed},
			{desc: "TLS stalls past Timeouts.Handshake", schemes: httpsOnly, path: both, setup: through(routetest.Behavior{Blackhole: true}, pageTarget), timeouts: route.Timeouts{Handshake: short}, class: engine.ProxyTimeout},
			{desc: "TLS stalls past the deadline", schemes: httpsOnly, path: both, setup: through(routetest.Behavior{Blackhole: true}, pageTarget), deadline: short, class: engine.ProxyTimeout},
			{desc: "proxy refuses the credentials", schemes: socksOnly, path: both, setup: through(routetest.Behavior{User: user, Password: "other"}, pageTarget), class: engine.ProxyAuth},
			{desc: "proxy refuses the credentials", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{User: user, Password: "other"}, pageTarget), class: engine.ProxyAuth},
			{desc: "proxy takes no credentials (407, no acceptable method)", schemes: socksOnly, path: both, setup: through(routetest.Behavior{Answer407: true}, pageTarget), class: engine.ProxyAuth},
			{desc: "proxy takes no credentials (407)", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{Answer407: true}, pageTarget), class: engine.ProxyAuth},
			// A proxy's 407 to a forwarded request cannot show that it
			// passed nothing on: a non-idempotent request is not re-sent.
			{desc: "proxy refuses the credentials of a forwarded request", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{User: user, Password: "other"}, pageTarget), class: engine.ProxyAuth, reached: true},
			{desc: "proxy takes no credentials for a forwarded request (407)", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{Answer407: true}, pageTarget), class: engine.ProxyAuth, reached: true},
			{desc: "proxy refuses the credentials of a forwarded request, CONNECT to 443 only", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{User: user, Password: "other", SSLPortsOnly: true}, pageTarget), class: engine.ProxyAuth, reached: true},

			// SOCKS5 negotiation.
			{desc: "negotiation stalls", schemes: socksOnly, path: both, setup: through(routetest.Behavior{Blackhole: true}, pageTarget), timeouts: route.Timeouts{Handshake: short}, class: engine.ProxyTimeout},
			{desc: "CONNECT request unanswered", schemes: socksOnly, path: both, setup: through(routetest.Behavior{Silent: true}, pageTarget), timeouts: route.Timeouts{Handshake: short}, class: engine.ProxyTimeout},
			{desc: "garbage", schemes: socksOnly, path: both, setup: through(routetest.Behavior{Garbage: true}, pageTarget), class: engine.ProxyConnectFailed},
			{desc: "closed during negotiation", schemes: socksOnly, path: both, setup: through(routetest.Behavior{Hangup: true}, pageTarget), class: engine.ProxyConnectFailed},
			{desc: "reply 0x01 general failure", schemes: socksOnly, path: both, setup: socksReply(0x01), class: engine.TunnelFailed},
			{desc: "reply 0x02 not allowed by ruleset", schemes: socksOnly, path: both, setup: socksReply(0x02), class: engine.Blocked},
			{desc: "reply 0x03 network unreachable", schemes: socksOnly, path: both, setup: socksReply(0x03), class: engine.TunnelFailed},
			{desc: "reply 0x04 host unreachable", schemes: socksOnly, path: both, setup: socksReply(0x04), class: engine.TunnelFailed},
			{desc: "reply 0x05 connection refused", schemes: socksOnly, path: both, setup: socksReply(0x05), class: engine.TunnelFailed},
			{desc: "reply 0x06 TTL expired", schemes: socksOnly, path: both, setup: socksReply(0x06), class: engine.TunnelFailed},
			{desc: "reply 0x07 command not supported", schemes: socksOnly, path: both, setup: socksReply(0x07), class: engine.ProxyConnectFailed},
			{desc: "reply 0x08 address type not supported", schemes: socksOnly, path: both, setup: socksReply(0x08), class: engine.ProxyConnectFailed},

			// The proxy's answer to CONNECT.
			{desc: "CONNECT answered 403", schemes: httpProxies, path: tunnel, setup: connectStatus(403), class: engine.Blocked},
			{desc: "CONNECT answered 400", schemes: httpProxies, path: tunnel, setup: connectStatus(400), class: engine.TunnelFailed},
			{desc: "CONNECT answered 502", schemes: httpProxies, path: tunnel, setup: connectStatus(502), class: engine.TunnelFailed},
			{desc: "CONNECT answered 503", schemes: httpProxies, path: tunnel, setup: connectStatus(503), class: engine.TunnelFailed},
			{desc: "CONNECT answered 504", schemes: httpProxies, path: tunnel, setup: connectStatus(504), class: engine.TunnelFailed},
			{desc: "CONNECT unanswered past Timeouts.Handshake", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{Silent: true}, pageTarget), timeouts: route.Timeouts{Handshake: short}, class: engine.ProxyTimeout},
			{desc: "CONNECT unanswered past the deadline", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{Silent: true}, pageTarget), deadline: short, class: engine.ProxyTimeout},
			{desc: "CONNECT answered garbage", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{Garbage: true}, pageTarget), class: engine.ProxyConnectFailed},
			{desc: "CONNECT unanswered, closed", schemes: httpProxies, path: tunnel, setup: through(routetest.Behavior{Hangup: true}, pageTarget), class: engine.ProxyConnectFailed},

			// Reaching the target from a Direct route.
			{desc: "target refuses the connection", schemes: directOnly, path: both, setup: at(routetest.ClosedPort), class: engine.TargetReset},
			{desc: "target name does not resolve", schemes: directOnly, path: both, setup: at(noSuchHost), class: engine.DNSFailed},
			{desc: "connecting to the target outlasts Timeouts.Dial", schemes: directOnly, path: both, setup: at(routetest.StalledPort), timeouts: route.Timeouts{Dial: short}, class: engine.TargetTimeout},
			{desc: "connecting to the target outlasts the deadline", schemes: directOnly, path: both, setup: at(routetest.StalledPort), deadline: short, class: engine.TargetTimeout},

			// After the request went out: it may have reached the target.
			{desc: "no answer byte by the deadline", schemes: anyProxy, path: forward, setup: through(routetest.Behavior{}, silentTarget), deadline: quiet, class: engine.ProxyTimeout, reached: true},
			{desc: "proxy silent after the request", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{Silent: true}, pageTarget), deadline: quiet, class: engine.ProxyTimeout, reached: true},
			{desc: "no answer byte by the deadline", schemes: directOnly, path: forward, setup: through(routetest.Behavior{}, silentTarget), deadline: quiet, class: engine.TargetTimeout, reached: true},
			{desc: "proxy closes after the request", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{Hangup: true}, pageTarget), class: engine.TargetReset, reached: true},
			{desc: "target closes after the request", schemes: []route.Scheme{route.SOCKS5, route.Direct}, path: forward, setup: through(routetest.Behavior{}, hangupTarget), class: engine.TargetReset, reached: true},
			{desc: "proxy answers garbage", schemes: httpProxies, path: forward, setup: through(routetest.Behavior{Garbage: true}, pageTarget), class: engine.TargetReset, reached: true},
			{desc: "body stalls past the deadline", schemes: anyRoute, path: forward, setup: through(routetest.Behavior{}, stalledBody), deadline: time.Second, class: engine.TargetTimeout, reached: true},
			{desc: "body cut short", schemes: anyRoute, path: forward, setup: through(routetest.Behavior{}, cutBody), class: engine.TargetReset, reached: true},

			// The caller gives up.
			{desc: "canceled before the attempt", schemes: anyRoute, path: both, setup: through(routetest.Behavior{}, pageTarget), cancel: before, class: engine.Canceled},
			{desc: "canceled once the request is out", schemes: anyRoute, path: forward, setup: through(routetest.Behavior{}, heardTarget), cancel: onceHeard, class: engine.Canceled, reached: true},
			{desc: "canceled during the CONNECT", schemes: anyProxy, path: tunnel, setup: through(routetest.Behavior{Silent: true}, pageTarget), cancel: midway, class: engine.Canceled},
			{desc: "canceled while connecting", schemes: anyRoute, path: both, setup: at(routetest.StalledPort), cancel: midway, class: engine.Canceled},
		}
		for _, tc := range tests {
			for _, s := range tc.schemes {
				for _, pth := range []path{forward, tunnel} {
					if tc.path&pth == 0 {
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/%s", pth, s, tc.desc), func(t *testing.T) {
						t.Parallel()
						d := tc.setup(t, s)
						x := newExit(t, d, route.Dialer{Timeouts: tc.timeouts, TLS: d.tlsConfig})
						deadline := tc.deadline
						if deadline == 0 {
							deadline = 5 * time.Second
						}
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						defer cancel()
						switch tc.cancel {
						case before:
							cancel()
						case onceHeard:
							go func() {
								select {
								case <-heard(d.addr):
									cancel()
								case <-ctx.Done():
								}
							}()
						case midway:
							timer := time.AfterFunc(20*time.Millisecond, cancel)
							defer timer.Stop()
						}

						p := new(route.Progress)
						start := time.Now()
						err := attempt(ctx, x, pth, d.addr, p)
						if err == nil {
							t.Fatal("the attempt succeeded, want a failure")
						}
						if took := time.Since(start); took > deadline+2*time.Second {
							t.Errorf("failing took %v: a phase is not bounded", took)
						}
						t.Log(err)
						class, reached := route.Classify(err, p)
						if class != tc.class || reached != tc.reached {
							t.Errorf("Classify = %v, reached %v; want %v, reached %v (%v)", class, reached, tc.class, tc.reached, err)
						}
						checkNoSecret(t, err)
					})
				}
			}
		}
	})
}

// attempt goes to addr through x by path, as the gateway does: a GET read
// to its end, or a tunnel. A success is a nil error.
func attempt(ctx context.Context, x *route.Exit, pth path, addr string, p *route.Progress) error {
	if pth == tunnel {
		c, err := x.DialTarget(ctx, addr, p)
		if err == nil {
			c.Close()
		}
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return err
	}
	resp, err := x.RoundTrip(req, p)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// socksReply is a SOCKS5 proxy replying code to every CONNECT.
func socksReply(code byte) layerSetup {
	return through(routetest.Behavior{HostReply: map[string]byte{"127.0.0.1": code}}, pageTarget)
}

// connectStatus is an HTTP proxy answering every CONNECT with status.
func connectStatus(status int) layerSetup {
	return through(routetest.Behavior{HostStatus: map[string]int{"127.0.0.1": status}}, pageTarget)
}

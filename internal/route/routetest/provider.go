package routetest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Headers the fake provider gateway adds to each request it forwards (not
// inside tunnels), for the site, and so the test, to see which fake IP and
// country carried it.
const (
	HeaderProviderIP      = "X-Provider-Ip"
	HeaderProviderCountry = "X-Provider-Country"
)

// ProviderGateway is a fake provider gateway on 127.0.0.1: an HTTP proxy,
// for absolute-form requests and CONNECT, steered by its username as a rotating
// residential gateway is, in the convention of the brightdata preset:
// ACCOUNT[-country-CC][-city-NAME][-session-ID]. A username with another
// parameter, or another account or password, is refused 407, so a test sees
// any injected parameter. Each provider session keeps one fake IP until
// the test bans it; a request without a session gets a new fake IP. It
// reaches loopback sites only.
type ProviderGateway struct {
	URL               *url.URL // http://127.0.0.1:port, without credentials
	Account, Password string

	// Immutable after NewProviderGateway.
	srv *httptest.Server
	tr  *http.Transport

	mu       sync.Mutex
	next     int                        // guarded by mu: the last fake IP handed out
	sessions map[string]string          // guarded by mu: provider session id → fake IP
	users    []string                   // guarded by mu: the usernames of the requests served, in order
	bans     map[string]map[string]bool // guarded by mu: site host → fake IPs it answers 403
	captchas map[string]map[string]bool // guarded by mu: site host → fake IPs it serves a captcha page
}

// CaptchaPage is what a site serves a fake IP it captchas: a page the
// gateway's built-in signatures know (Google's /sorry/ text).
const CaptchaPage = "<html>Our systems have detected unusual traffic from your computer network.</html>"

// NewProviderGateway starts a fake provider gateway for account and
// password, closed when t ends.
func NewProviderGateway(t testing.TB, account, password string) *ProviderGateway {
	t.Helper()
	p := &ProviderGateway{Account: account, Password: password, sessions: map[string]string{},
		bans: map[string]map[string]bool{}, captchas: map[string]map[string]bool{}}
	p.tr = &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}).DialContext,
		DisableCompression: true,
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL, _ = url.Parse(p.srv.URL)
	t.Cleanup(func() {
		p.srv.Close()
		p.tr.CloseIdleConnections()
	})
	return p
}

// Ban has site (a host without port) answer 403 to fake IP ip.
func (p *ProviderGateway) Ban(site, ip string) { p.mark(p.bans, site, ip) }

// Captcha has site serve CaptchaPage, status 200, to fake IP ip.
func (p *ProviderGateway) Captcha(site, ip string) { p.mark(p.captchas, site, ip) }

func (p *ProviderGateway) mark(m map[string]map[string]bool, site, ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m[site] == nil {
		m[site] = map[string]bool{}
	}
	m[site][ip] = true
}

// Sessions is how many provider sessions the gateway has seen.
func (p *ProviderGateway) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// Users are the usernames of the requests served so far, in order.
func (p *ProviderGateway) Users() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.users...)
}

// params reads a username of the convention: its parameters, or an error
// naming what is wrong.
func (p *ProviderGateway) params(user string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(user, p.Account)
	if !ok {
		return nil, fmt.Errorf("unknown account")
	}
	tokens := strings.Split(rest, "-")
	if tokens[0] != "" || len(tokens)%2 == 0 {
		return nil, fmt.Errorf("malformed parameters %q", rest)
	}
	params := map[string]string{}
	for i := 1; i < len(tokens); i += 2 {
		key, value := tokens[i], tokens[i+1]
		switch {
		case key != "country" && key != "city" && key != "session":
			return nil, fmt.Errorf("unknown parameter %q", key)
		case value == "":
			return nil, fmt.Errorf("empty %s", key)
		case params[key] != "":
			return nil, fmt.Errorf("%s given twice", key)
		}
		params[key] = value
	}
	return params, nil
}

func (p *ProviderGateway) serve(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Hostname()
	if r.Method == http.MethodConnect {
		host, _, _ = net.SplitHostPort(r.Host)
	} else if !r.URL.IsAbs() {
		http.Error(w, "absolute-form requests and CONNECT only", http.StatusBadRequest)
		return
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		http.Error(w, "the fake provider gateway reaches loopback sites only", http.StatusForbidden)
		return
	}
	params, err := p.authorize(r)
	if err != nil {
		w.Header().Set("Proxy-Authenticate", `Basic realm="fake provider"`)
		http.Error(w, err.Error(), http.StatusProxyAuthRequired)
		return
	}
	ip, banned, captcha := p.exitFor(params["session"], host)
	switch {
	case banned:
		http.Error(w, "banned", http.StatusForbidden)
		return
	case r.Method == http.MethodConnect:
		p.tunnel(w, r.Host) // the site's own bytes: nothing to mark them with
		return
	case captcha:
		io.WriteString(w, CaptchaPage)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Set(HeaderProviderIP, ip)
	out.Header.Set(HeaderProviderCountry, params["country"])
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// authorize checks r's credentials and returns its username's parameters.
func (p *ProviderGateway) authorize(r *http.Request) (map[string]string, error) {
	auth := r.Header.Get("Proxy-Authorization")
	req := &http.Request{Header: http.Header{"Authorization": {auth}}}
	user, pass, ok := req.BasicAuth()
	if !ok || pass != p.Password {
		return nil, fmt.Errorf("bad credentials")
	}
	params, err := p.params(user)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.users = append(p.users, user)
	p.mu.Unlock()
	return params, nil
}

// exitFor is the fake IP of provider session session (a new one for ""),
// and whether site bans or captchas it.
func (p *ProviderGateway) exitFor(session, site string) (ip string, banned, captcha bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip, known := p.sessions[session]
	if !known {
		p.next++
		ip = fmt.Sprintf("10.0.%d.%d", p.next/250, p.next%250+1)
		if session != "" {
			p.sessions[session] = ip
		}
	}
	return ip, p.bans[site][ip], p.captchas[site][ip]
}

// tunnel answers a CONNECT to addr, a loopback site, and splices.
func (p *ProviderGateway) tunnel(w http.ResponseWriter, addr string) {
	t, err := (&net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}).Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer t.Close()
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	splice(c, brw.Reader, t)
}

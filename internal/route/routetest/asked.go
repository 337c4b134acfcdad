package routetest

import "sync"

// askLog is what a proxy's clients asked it to reach, in order.
type askLog struct {
	mu    sync.Mutex
	hosts []string // guarded by mu
}

// note records a target's authority as a client named it.
func (l *askLog) note(hostport string) {
	l.mu.Lock()
	l.hosts = append(l.hosts, hostport)
	l.mu.Unlock()
}

// Asked is every target the proxy was asked to reach, in order, as the
// client named it: the CONNECT authority or absolute-form URL's host (with
// its port, if it had one), or the SOCKS5 request's address and port
// (IPv6 in brackets). A target is recorded whether or not the proxy went
// on to refuse it, so a test sees what a real proxy would have been asked
// to connect to; a check's name is not (Checks).
func (p *Proxy) Asked() []string {
	p.asked.mu.Lock()
	defer p.asked.mu.Unlock()
	return append([]string(nil), p.asked.hosts...)
}

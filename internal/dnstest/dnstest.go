// Package dnstest is an authoritative DNS server on 127.0.0.1 for tests of
// DNS discovery (docs/design/013-cluster.md): A and SRV records the test
// sets, and a resolver that asks it alone. The only importer of
// github.com/miekg/dns.
package dnstest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// SRV is one SRV record's target (a name, with its trailing dot) and port.
type SRV struct {
	Target string
	Port   uint16
}

// Server answers A and SRV questions over UDP; any other name is
// NXDOMAIN.
type Server struct {
	addr string

	mu  sync.Mutex
	a   map[string][]string // guarded by mu: name → IPv4 addresses
	srv map[string][]SRV    // guarded by mu
}

// Start starts a server closed by t's cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &Server{addr: pc.LocalAddr().String(), a: map[string][]string{}, srv: map[string][]SRV{}}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: d, NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { defer close(done); s.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { s.Shutdown(); <-done })
	return d
}

// Set makes name (fully qualified, with its trailing dot) answer a and
// srv; both nil make it NXDOMAIN.
func (d *Server) Set(name string, a []string, srv []SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a == nil && srv == nil {
		delete(d.a, name)
		delete(d.srv, name)
		return
	}
	d.a[name], d.srv[name] = a, srv
}

// ServeDNS implements dns.Handler.
func (d *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	d.mu.Lock()
	known := false
	for _, q := range r.Question {
		_, hasA := d.a[q.Name]
		_, hasSRV := d.srv[q.Name]
		known = known || hasA || hasSRV
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 1}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range d.a[q.Name] {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.ParseIP(ip)})
			}
		case dns.TypeSRV:
			for _, s := range d.srv[q.Name] {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: hdr, Target: s.Target, Port: s.Port})
			}
		}
	}
	d.mu.Unlock()
	if !known {
		m.Rcode = dns.RcodeNameError
	}
	w.WriteMsg(m)
}

// Resolver asks d alone.
func (d *Server) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
}

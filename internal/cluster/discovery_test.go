package cluster

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// dnsServer is an authoritative DNS server on 127.0.0.1 (UDP) answering
// A and SRV questions from records the test sets.
type dnsServer struct {
	addr string
	mu   sync.Mutex
	a    map[string][]string // guarded by mu: name → IPv4 addresses
	srv  map[string][]*dns.SRV
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{addr: pc.LocalAddr().String(), a: map[string][]string{}, srv: map[string][]*dns.SRV{}}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: d, NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { defer close(done); s.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { s.Shutdown(); <-done })
	return d
}

func (d *dnsServer) set(name string, a []string, srv []*dns.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.a[name], d.srv[name] = a, srv
}

func (d *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	d.mu.Lock()
	for _, q := range r.Question {
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range d.a[q.Name] {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
			}
		case dns.TypeSRV:
			for _, s := range d.srv[q.Name] {
				rr := *s
				rr.Hdr = dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1}
				m.Answer = append(m.Answer, &rr)
			}
		}
	}
	if len(m.Answer) == 0 && d.a[r.Question[0].Name] == nil && d.srv[r.Question[0].Name] == nil {
		m.Rcode = dns.RcodeNameError
	}
	d.mu.Unlock()
	w.WriteMsg(m)
}

// resolver asks d only.
func (d *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
}

func peerAddrs(c *Cluster) []string {
	var out []string
	for _, n := range c.Nodes()[1:] {
		out = append(out, n.Address)
	}
	return out
}

// TestDNSDiscovery resolves A and SRV names from a DNS server on
// 127.0.0.1: a record added adds a peer, a record removed removes it, a
// failed lookup keeps the peers, and a reload to another name forgets the
// old name's. No peer is called: connections open at the first call.
func TestDNSDiscovery(t *testing.T) {
	d := startDNS(t)
	for _, tc := range []struct {
		desc string
		name string
		set  func(recs int)
		want func(recs int) []string
	}{
		{
			desc: "A records", name: "nodes.cluster.test.:9091",
			set: func(n int) {
				d.set("nodes.cluster.test.", []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}[:n], nil)
			},
			want: func(n int) []string { return []string{"127.0.0.2:9091", "127.0.0.3:9091", "127.0.0.4:9091"}[:n] },
		},
		{
			desc: "SRV records", name: "_api._tcp.cluster.test.",
			set: func(n int) {
				srvs := []*dns.SRV{{Target: "n1.cluster.test.", Port: 7001}, {Target: "n2.cluster.test.", Port: 7002}, {Target: "n3.cluster.test.", Port: 7003}}
				d.set("_api._tcp.cluster.test.", nil, srvs[:n])
			},
			want: func(n int) []string {
				return []string{"n1.cluster.test:7001", "n2.cluster.test:7002", "n3.cluster.test:7003"}[:n]
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := newCluster(t, "me", "s3cret", nil, func(o *Options) { o.Resolver = d.resolver() })
			c.SetPeers(nil, tc.name)
			for _, n := range []int{2, 3, 1} {
				tc.set(n)
				if err := c.Resolve(t.Context()); err != nil {
					t.Fatalf("%d records: %v", n, err)
				}
				if got, want := peerAddrs(c), tc.want(n); !slices.Equal(got, want) {
					t.Fatalf("%d records: peers %v, want %v", n, got, want)
				}
			}
			d.set(dns.Fqdn(tc.name), nil, nil) // the name is gone: NXDOMAIN
			d.mu.Lock()
			delete(d.a, "nodes.cluster.test.")
			delete(d.srv, "_api._tcp.cluster.test.")
			d.mu.Unlock()
			if err := c.Resolve(t.Context()); err == nil {
				t.Fatal("a name that does not resolve: no error")
			}
			if got := peerAddrs(c); !slices.Equal(got, tc.want(1)) {
				t.Fatalf("after a failed lookup: peers %v, want %v kept", got, tc.want(1))
			}
			c.SetPeers([]string{"127.0.0.1:7999"}, "")
			if got := peerAddrs(c); !slices.Equal(got, []string{"127.0.0.1:7999"}) {
				t.Fatalf("reloaded without dns: peers %v", got)
			}
		})
	}
}

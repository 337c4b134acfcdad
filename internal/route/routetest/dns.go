package routetest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a name server on 127.0.0.1 answering A and AAAA queries from a
// table a test sets and changes (DNS rebinding), with TTL 0 so that every
// lookup asks again. Unknown names are NXDOMAIN. Its Resolver sends every
// query here, so no lookup leaves the machine.
type DNS struct {
	conn net.PacketConn
	wg   sync.WaitGroup

	mu    sync.Mutex
	names map[string][]netip.Addr // guarded by mu; lower case, fully qualified
}

// NewDNS starts a name server answering names with their addresses; it is
// closed by t.Cleanup.
func NewDNS(t testing.TB, names map[string][]netip.Addr) *DNS {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{conn: conn, names: map[string][]netip.Addr{}}
	for name, addrs := range names {
		d.Set(name, addrs...)
	}
	d.wg.Add(1)
	go d.serve()
	t.Cleanup(func() { conn.Close(); d.wg.Wait() })
	return d
}

// Set makes name resolve to addrs from the next lookup on; none makes it
// NXDOMAIN.
func (d *DNS) Set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name = fqdn(name)
	if len(addrs) == 0 {
		delete(d.names, name)
		return
	}
	d.names[name] = addrs
}

// Resolver is a pure-Go resolver whose every query goes to d.
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	defer d.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		if reply, err := d.answer(buf[:n]); err == nil {
			d.conn.WriteTo(reply, from)
		}
	}
}

// answer builds the reply to one query message.
func (d *DNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	addrs, known := d.names[strings.ToLower(q.Name.String())]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// fqdn is name in lower case with its root dot, as queries spell it.
func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

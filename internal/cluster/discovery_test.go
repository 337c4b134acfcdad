package cluster

import (
	"slices"
	"strconv"
	"testing"

	"github.com/switchyard/switchyard/internal/dnstest"
)

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
	d := dnstest.Start(t)
	for i := range 3 {
		d.Set("n"+strconv.Itoa(i+1)+".cluster.test.", []string{"127.0.0.1"}, nil)
	}
	for _, tc := range []struct {
		desc, name, record string
		set                func(recs int)
		want               func(recs int) []string
	}{
		{
			desc: "A records", name: "nodes.cluster.test.:9091", record: "nodes.cluster.test.",
			set: func(n int) {
				d.Set("nodes.cluster.test.", []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}[:n], nil)
			},
			want: func(n int) []string { return []string{"127.0.0.2:9091", "127.0.0.3:9091", "127.0.0.4:9091"}[:n] },
		},
		{
			desc: "SRV records", name: "_api._tcp.cluster.test.", record: "_api._tcp.cluster.test.",
			set: func(n int) {
				srvs := []dnstest.SRV{{Target: "n1.cluster.test.", Port: 7001}, {Target: "n2.cluster.test.", Port: 7002}, {Target: "n3.cluster.test.", Port: 7003}}
				d.Set("_api._tcp.cluster.test.", nil, srvs[:n])
			},
			want: func(n int) []string { return []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}[:n] },
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := newCluster(t, "me", "s3cret", nil, func(o *Options) { o.Resolver = d.Resolver() })
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
			d.Set(tc.record, nil, nil) // the name is gone: NXDOMAIN
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

package cluster

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Resolve resolves cluster.dns once (Lookup) and makes its records the
// peers found by DNS. A failed lookup keeps the last
// answer, so that a DNS outage does not empty the cluster; it is logged
// and returned.
func (c *Cluster) Resolve(ctx context.Context) error {
	c.mu.Lock()
	name := c.dnsName
	c.mu.Unlock()
	if name == "" {
		return nil
	}
	found, err := Lookup(ctx, c.res, name)
	if err != nil {
		c.log.Warn("cluster: DNS discovery failed; the peers it found last stay", "dns", name, "err", err)
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dnsName == name && !slices.Equal(found, c.found) {
		c.found = found
		c.reconcile()
	}
	return nil
}

// Lookup is the API addresses name's records give, as cluster.dns reads
// it: "name:port" by its A and AAAA records, "_service._proto.name" by its
// SRV records, whose targets are resolved by r too, so that one resolver
// answers for the whole list. Sorted; the Go SDK's node list uses it too.
func Lookup(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	var out []string
	if strings.HasPrefix(name, "_") {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, err
		}
		for _, s := range srvs {
			ips, err := r.LookupIPAddr(ctx, s.Target)
			if err != nil {
				return nil, err
			}
			for _, ip := range ips {
				out = append(out, net.JoinHostPort(ip.IP.String(), strconv.Itoa(int(s.Port))))
			}
		}
	} else {
		host, port, err := net.SplitHostPort(name)
		if err != nil {
			return nil, err
		}
		ips, err := r.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip.IP.String(), port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

package cluster

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Resolve resolves cluster.dns once and makes its records the peers found
// by DNS: "name:port" by its A and AAAA records, "_service._proto.name" by
// its SRV records (their own ports). A failed lookup keeps the last
// answer, so that a DNS outage does not empty the cluster; it is logged
// and returned.
func (c *Cluster) Resolve(ctx context.Context) error {
	c.mu.Lock()
	name := c.dnsName
	c.mu.Unlock()
	if name == "" {
		return nil
	}
	found, err := c.lookup(ctx, name)
	if err != nil {
		c.log.Warn("cluster: DNS discovery failed; the peers it found last stay", "dns", name, "err", err)
		return err
	}
	slices.Sort(found)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dnsName == name && !slices.Equal(found, c.found) {
		c.found = found
		c.reconcile()
	}
	return nil
}

// lookup is the peers' addresses name's records give.
func (c *Cluster) lookup(ctx context.Context, name string) ([]string, error) {
	if strings.HasPrefix(name, "_") {
		_, srvs, err := c.res.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(srvs))
		for _, s := range srvs {
			out = append(out, net.JoinHostPort(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port))))
		}
		return out, nil
	}
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return nil, err
	}
	ips, err := c.res.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.IP.String(), port))
	}
	return out, nil
}

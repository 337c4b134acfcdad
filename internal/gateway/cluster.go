package gateway

import "github.com/switchyard/switchyard/internal/admit"

// TargetKey is the target key the gateway judges routes against for a
// request to authority (host, and port when not 80), as the target rules
// in force give it: what a cluster's entry node asks its peers' health
// for (docs/design/011-cluster.md). "" for an authority that does not read.
func (g *Gateway) TargetKey(authority string) string {
	host, _, err := admit.NormalizeHostPort(authority, false)
	if err != nil {
		return ""
	}
	key, _ := g.current.Load().targets.Resolve(host)
	return key
}

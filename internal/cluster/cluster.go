// Package cluster is the membership of a cluster of gateway nodes
// (docs/design/013-cluster.md): who this node is, the tokens nodes prove
// themselves with, the peers found by a static list or DNS, their health
// (grpc.health.v1 with consecutive-count hysteresis, then an authenticated
// Ping), and the pick of the node whose exits fit a request. Forwarding
// itself is the fetch API's (internal/fetchapi), over the connections kept
// here.
package cluster

import (
	"time"
)

// Config is the [cluster] section as the package reads it; each field is
// the key of the same name (snake_case in TOML). node_id is not here: it
// is resolved before (Identify) and given as Options.Self.
type Config struct {
	// Secret is the shared cluster secret (secret) every node token is
	// derived from (Token). Required when the cluster has peers.
	Secret string
	// Peers are the peers' API addresses, host:port (peers). This node's
	// own address may be listed: the same list serves every node.
	Peers []string
	// DNS is a name whose records are peers (dns): "name:port" for its A
	// and AAAA records, or "_service._proto.name" for its SRV records.
	// "" means none.
	DNS string
	// DNSInterval is how often DNS is resolved again (dns_interval).
	// Default 30s.
	DNSInterval time.Duration
	// CheckInterval is how often every peer is checked (check_interval),
	// and CheckTimeout bounds one check (check_timeout). Defaults 5s, 2s.
	CheckInterval, CheckTimeout time.Duration
	// DownAfter consecutive failed checks take an up peer out of rotation
	// (down_after), and UpAfter consecutive passed ones put it back
	// (up_after). Defaults 2 and 2.
	DownAfter, UpAfter int
	// MaxFailover is how many other nodes an idempotent request is sent to
	// after the chosen one failed in transport (max_failover). Default 2.
	MaxFailover int
	// TLSCert and TLSKey are PEM files of this node's certificate and key,
	// and TLSCA of the CA that signs every node's (tls_cert, tls_key,
	// tls_ca): all three or none (Config.TLS).
	TLSCert, TLSKey, TLSCA string
}

// DefaultConfig is the configuration before the file: every default of
// [cluster] in one place (internal/config starts from it).
func DefaultConfig() Config {
	return Config{
		DNSInterval: 30 * time.Second, CheckInterval: 5 * time.Second, CheckTimeout: 2 * time.Second,
		DownAfter: 2, UpAfter: 2, MaxFailover: 2,
	}
}

// Enabled reports whether the configuration makes this node part of a
// cluster: it has peers to find.
func (c Config) Enabled() bool { return len(c.Peers) > 0 || c.DNS != "" }

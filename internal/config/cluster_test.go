package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClusterSection loads [cluster] from the file and the environment,
// SWITCHYARD_NODE_ID above all, and refuses bad values naming the key,
// never quoting the secret.
func TestClusterSection(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef-shared"
	ok := "[cluster]\nsecret = \"env:CLUSTER_SECRET\"\npeers = [\"127.0.0.1:9101\", \"127.0.0.1:9102\"]\n"
	tests := []struct {
		desc   string
		file   string
		env    []string
		nodeID string
		peers  []string
		want   string // an error's substring; "" for none
	}{
		{desc: "off by default", file: ""},
		{desc: "peers and a secret", file: ok, env: []string{"CLUSTER_SECRET=" + secret}, peers: []string{"127.0.0.1:9101", "127.0.0.1:9102"}},
		{desc: "SWITCHYARD_NODE_ID wins", file: ok + "node_id = \"from-file\"\n", env: []string{"CLUSTER_SECRET=" + secret, "SWITCHYARD_CLUSTER_NODE_ID=from-env", "SWITCHYARD_NODE_ID=n2"},
			nodeID: "n2", peers: []string{"127.0.0.1:9101", "127.0.0.1:9102"}},
		{desc: "peers from the environment", env: []string{"SWITCHYARD_CLUSTER_SECRET=" + secret, "SWITCHYARD_CLUSTER_PEERS=127.0.0.1:1,127.0.0.1:2"}, peers: []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{desc: "no secret", file: "[cluster]\npeers = [\"127.0.0.1:9101\"]\n", want: "cluster.secret: required with cluster.peers or cluster.dns"},
		{desc: "secret unset in the environment", file: ok, want: "cluster.secret: environment variable CLUSTER_SECRET is not set"},
		{desc: "short secret", file: ok, env: []string{"CLUSTER_SECRET=short"}, want: "cluster.secret: shorter than 16 bytes"},
		{desc: "bad peer", file: "[cluster]\nsecret = \"env:CLUSTER_SECRET\"\npeers = [\"127.0.0.1:9101\", \"nodeb\"]\n", env: []string{"CLUSTER_SECRET=" + secret}, want: `:5: cluster.peers: peer 2: "nodeb": want host:port`},
		{desc: "bad dns", file: "[cluster]\nsecret = \"env:CLUSTER_SECRET\"\ndns = \"nodes.example\"\n", env: []string{"CLUSTER_SECRET=" + secret}, want: "cluster.dns: \"nodes.example\": want name:port"},
		{desc: "srv dns", file: "[cluster]\nsecret = \"env:CLUSTER_SECRET\"\ndns = \"_api._tcp.nodes.example\"\n", env: []string{"CLUSTER_SECRET=" + secret}},
		{desc: "bad node id", env: []string{"SWITCHYARD_NODE_ID=a b"}, want: `cluster.node_id (environment variable SWITCHYARD_NODE_ID): "a b": 1 to 64 letters`},
		{desc: "zero down_after", file: "[cluster]\ndown_after = 0\n", want: ":4: cluster.down_after: must be positive"},
		{desc: "negative max_failover", file: "[cluster]\nmax_failover = -1\n", want: ":4: cluster.max_failover: must not be negative"},
		{desc: "tls_cert alone", file: "[cluster]\ntls_cert = \"/nonexistent/a\"\n", want: ":4: cluster.tls_cert: set cluster.tls_cert, cluster.tls_key and cluster.tls_ca together, or none"},
		{desc: "tls files missing", file: "[cluster]\ntls_cert = \"/nonexistent/a\"\ntls_key = \"/nonexistent/b\"\ntls_ca = \"/nonexistent/c\"\n",
			want: ":4: cluster.tls_cert: cluster.tls_cert, cluster.tls_key: open /nonexistent/a"},
		{desc: "no api listener", file: ok + "[listen]\napi = \"\"\n", env: []string{"CLUSTER_SECRET=" + secret}, want: "cluster.peers: nodes talk over the fetch API's gRPC: set listen.api"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: writeConfig(t, routesOK+tc.file), Env: append([]string{}, tc.env...)})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), secret) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Cluster.NodeID != tc.nodeID || !slices.Equal(c.Cluster.Peers, tc.peers) {
				t.Errorf("cluster %+v, want node %q peers %v", c.Cluster, tc.nodeID, tc.peers)
			}
			if c.Cluster.CheckInterval != 5*time.Second || c.Cluster.DownAfter != 2 || c.Cluster.MaxFailover != 2 {
				t.Errorf("defaults lost: %+v", c.Cluster)
			}
		})
	}
}

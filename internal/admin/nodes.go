package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/cluster"
)

// Cluster is the node cluster the admin API shows and changes
// (docs/design/013-cluster.md); *cluster.Cluster is one.
type Cluster interface {
	Nodes() []cluster.NodeStatus
	AddPeer(addr string) error
	RemovePeer(addr string) bool
	Test(ctx context.Context, addr string) (cluster.Probe, error)
}

var _ Cluster = (*cluster.Cluster)(nil)

// testTimeout bounds a "test connection": a health check and a Ping.
const testTimeout = 5 * time.Second

// listNodes is GET /api/nodes: every node of the cluster, this one first;
// [] outside a cluster.
func (s *Server) listNodes(w http.ResponseWriter, _ *http.Request) {
	nodes := []cluster.NodeStatus{}
	if s.cluster != nil {
		nodes = s.cluster.Nodes()
	}
	writeJSON(w, http.StatusOK, nodes)
}

// nodeAddress reads {"address": "host:port"}, the body of the node
// actions.
func nodeAddress(r *http.Request) (string, bool) {
	var body struct {
		Address string `json:"address"`
	}
	err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&body)
	return body.Address, err == nil && body.Address != ""
}

// nodeAction is POST /api/nodes/{action} with {"address": "host:port"},
// for holders of the token: add or remove a peer (until the next reload
// lists it again or not), or test the connection to one (health, then an
// authenticated Ping), whose verdict tells "unreachable" from "wrong
// token" from "an older node".
func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != "add" && action != "remove" && action != "test" {
		writeError(w, http.StatusNotFound, "unknown action: want add, remove or test")
		return
	}
	if s.cluster == nil {
		writeError(w, http.StatusNotFound, "this gateway is not a cluster node (no cluster.peers nor cluster.dns)")
		return
	}
	attrs := []slog.Attr{slog.String("action", "node "+action), slog.String("remote", r.RemoteAddr)}
	if !s.mayChange(w, r, "node "+action, attrs...) {
		return
	}
	addr, ok := nodeAddress(r)
	if !ok {
		writeError(w, http.StatusBadRequest, `want {"address": "host:port"}`)
		return
	}
	attrs = append(attrs, slog.String("address", addr))
	switch action {
	case "add":
		if err := s.cluster.AddPeer(addr); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	case "remove":
		if !s.cluster.RemovePeer(addr) {
			writeError(w, http.StatusNotFound, "no such peer: give its address as /api/nodes lists it")
			return
		}
	case "test":
		ctx, cancel := context.WithTimeout(r.Context(), testTimeout)
		defer cancel()
		p, err := s.cluster.Test(ctx, addr)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin node test", append(attrs, slog.String("verdict", p.Verdict))...)
		writeJSON(w, http.StatusOK, probeJSON{
			Verdict: p.Verdict, Reachable: p.Reachable, Node: p.Node, Version: p.Summary.Version,
			Routes: p.Summary.Routes, Usable: p.Summary.Usable, Error: p.Err, LatencyMS: float64(p.Latency.Microseconds()) / 1000,
		})
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "admin node action", attrs...)
	w.WriteHeader(http.StatusNoContent)
}

// probeJSON is a "test connection" answer.
type probeJSON struct {
	// Verdict is ok, unreachable, not_serving, wrong_token, no_ping (an
	// older node), no_auth (it checks no token: open to anyone) or error.
	Verdict   string  `json:"verdict"`
	Reachable bool    `json:"reachable"`
	Node      string  `json:"node,omitempty"`
	Version   string  `json:"version,omitempty"`
	Routes    int     `json:"routes"`
	Usable    int     `json:"routes_usable"`
	Error     string  `json:"error,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
}

// WatchCluster exports the cluster's nodes as the switchyard_cluster_*
// family.
func (m *Metrics) WatchCluster(c Cluster) { m.reg.MustRegister(clusterCollector{c}) }

var (
	clusterNodesDesc = prometheus.NewDesc("switchyard_cluster_nodes", "Cluster nodes in each state, as this node sees them (itself up).", []string{"state"}, nil)
	clusterUpDesc    = prometheus.NewDesc("switchyard_cluster_node_up", "1 while the node is up, as this node sees it.", []string{"node", "address"}, nil)
	clusterInDesc    = prometheus.NewDesc("switchyard_cluster_forwarded_in_total", "Requests entry nodes forwarded to this node.", nil, nil)
	clusterOutDesc   = prometheus.NewDesc("switchyard_cluster_forwarded_out_total", "Requests this node forwarded to each peer.", []string{"node", "address"}, nil)
)

type clusterCollector struct{ c Cluster }

// Describe implements prometheus.Collector.
func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterNodesDesc, clusterUpDesc, clusterInDesc, clusterOutDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[string]int{"up": 0, "down": 0, "unauthenticated": 0, "unknown": 0}
	for _, n := range c.c.Nodes() {
		states[n.State]++
		if n.Self {
			ch <- prometheus.MustNewConstMetric(clusterInDesc, prometheus.CounterValue, float64(n.ForwardedIn))
			continue
		}
		up := 0.0
		if n.State == "up" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(clusterUpDesc, prometheus.GaugeValue, up, n.ID, n.Address)
		ch <- prometheus.MustNewConstMetric(clusterOutDesc, prometheus.CounterValue, float64(n.ForwardedOut), n.ID, n.Address)
	}
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(clusterNodesDesc, prometheus.GaugeValue, float64(n), state)
	}
}

package cluster

import (
	"errors"
	"log/slog"
	"os"
)

// Identity is this node's id and where it came from.
type Identity struct {
	ID string
	// Detected says the id is the host's name, not given: two machines
	// cloned from one image share it, and a restart on another host
	// changes it.
	Detected bool
}

// Identify is this node's id: configured (SWITCHYARD_NODE_ID or
// cluster.node_id, as internal/config resolved them), else the host's
// name, which it warns of loudly on log.
func Identify(configured string, log *slog.Logger) (Identity, error) {
	return identify(configured, os.Hostname, log)
}

func identify(configured string, hostname func() (string, error), log *slog.Logger) (Identity, error) {
	if configured != "" {
		return Identity{ID: configured}, nil
	}
	h, err := hostname()
	if err == nil && h == "" {
		err = errors.New("empty host name")
	}
	if err != nil {
		return Identity{}, errors.New("cluster: no node id: set SWITCHYARD_NODE_ID or cluster.node_id (the host name is unknown: " + err.Error() + ")")
	}
	log.Warn("CLUSTER NODE ID AUTO-DETECTED from the host name: set SWITCHYARD_NODE_ID or cluster.node_id, since two hosts of one name would claim one id and a move to another host changes it",
		"node", h)
	return Identity{ID: h, Detected: true}, nil
}

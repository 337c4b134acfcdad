package server

import (
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/fetchapi"
	"github.com/switchyard/switchyard/internal/gateway"
)

// apiForwarder is the gateway's Forwarder in a cluster: the fetch API's,
// once it exists, since the API is made after the gateway it carries
// requests with (docs/design/013-cluster.md).
type apiForwarder struct {
	api atomic.Pointer[fetchapi.Server]
}

var _ gateway.Forwarder = (*apiForwarder)(nil)

func (f *apiForwarder) Forward(w http.ResponseWriter, r *http.Request, user string, labels engine.Labels) bool {
	api := f.api.Load()
	return api != nil && api.Forward(w, r, user, labels)
}

// portOf is addr's port, 0 when it has none.
func portOf(addr net.Addr) int {
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(port)
	return n
}

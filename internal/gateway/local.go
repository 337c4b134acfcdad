package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// When the gateway runs out of its own resources (descriptors, kernel
// buffers, local ports: route.Error's Local), an attempt fails before
// anything leaves it. That is the gateway's fault, never the route's: the
// attempt reports no evidence (class Canceled), is not retried on another
// route (it would meet the same wall), is counted (Observer) and logged at
// a bounded rate, and the client is answered 503 local_resources with
// Retry-After, so that it backs off instead of reading a 502 as a bad exit.

// localLogEvery is the least time between two log lines about the gateway
// running out of its own resources: at 100,000 routes and thousands of
// requests a second, one line each would flood the log it needs.
const localLogEvery = 5 * time.Second

// localRetryAfter is what a client answered local_resources is told to
// wait: descriptors free up as connections close, within moments.
const localRetryAfter = 1 * time.Second

// localLog bounds the rate of log lines about local resource failures,
// saying in each how many were not logged since the last.
type localLog struct {
	mu         sync.Mutex
	next       time.Time // guarded by mu: when the next line may be written
	suppressed int       // guarded by mu: failures since the last line
}

// localFailure counts an attempt the gateway could not make for want of
// its own resource reason, and logs it unless a line went out within
// localLogEvery.
func (g *Gateway) localFailure(reason, route string, err error) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.ObserveLocalError(reason)
	}
	now := g.cfg.Now()
	g.local.mu.Lock()
	if now.Before(g.local.next) {
		g.local.suppressed++
		g.local.mu.Unlock()
		return
	}
	suppressed := g.local.suppressed
	g.local.next, g.local.suppressed = now.Add(localLogEvery), 0
	g.local.mu.Unlock()
	remedy := "raise the descriptor limit (ulimit -n) or lower the load"
	if reason == "upstream_cap" {
		remedy = "raise server.max_upstream_conns (and the descriptor limit with it) or lower the load"
	}
	g.logger().Error("the gateway is out of local resources: answering 503 local_resources, no route is blamed; "+remedy,
		"reason", reason, "route", route, "err", err.Error(), "not_logged_since_last", suppressed)
}

// localResources answers a request whose attempt failed for want of the
// gateway's own resources.
func localResources(w http.ResponseWriter, reason string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(localRetryAfter/time.Second)))
	fail(w, http.StatusServiceUnavailable, "local_resources", "switchyard: the gateway is out of local resources ("+reason+"); retry after "+localRetryAfter.String())
}

package gateway

import (
	"context"
	"net/http"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admit"
)

// TargetKey is the target key the gateway judges routes against for a
// request to authority (host, and port when not 80), as the target rules
// in force give it: what a cluster's entry node asks its peers' health
// for (docs/design/013-cluster.md). "" for an authority that does not read.
func (g *Gateway) TargetKey(authority string) string {
	host, _, err := admit.NormalizeHostPort(authority, false)
	if err != nil {
		return ""
	}
	key, _ := g.current.Load().targets.Resolve(host)
	return key
}

// PaceForward takes, at a cluster's entry, the pacing slot of target (the
// operator's [[targets]] rate and max_concurrent) for a request another
// node will run, so that a target's limits hold for all that entered here,
// whichever node carries it (docs/design/013-cluster.md); release gives
// it back once the forward has ended. A refusal is a *FetchError, paced.
func (g *Gateway) PaceForward(ctx context.Context, target string) (release func(), err error) {
	release, err = g.pace(ctx, g.current.Load(), target)
	if err != nil {
		return nil, fetchAcquireError(err, &record{}, false)
	}
	return release, nil
}

// Forwarder runs a forward-proxy request on another cluster node when one
// fits it better than this one (docs/design/013-cluster.md). The gateway
// asks it once the request is authenticated and its control read, and
// serves the request itself when Forward returns false, having read
// nothing of its body.
type Forwarder interface {
	Forward(w http.ResponseWriter, r *http.Request, user string, labels engine.Labels) bool
}

// forwardable reports whether the proxy's request r may run on another
// node: a CONNECT this node does not intercept, or an absolute-form
// http:// request (https:// from inside an intercepted tunnel) whose body
// has a known length that fits retry.max_body_bytes (it is sent whole);
// never one with a sticky session, which binds one of this node's exits.
// An intercepted CONNECT stays here: its requests, judged one by one, are
// each forwarded where they fit.
func (g *Gateway) forwardable(r *http.Request, ctl control, intercepted bool) bool {
	scheme := "http"
	if intercepted {
		scheme = "https"
	}
	switch {
	case ctl.session != "":
		return false
	case r.Method == http.MethodConnect:
		return !g.intercepts(hostOnly(r.Host))
	case !r.URL.IsAbs(), r.URL.Scheme != scheme, r.URL.Host == "":
		return false
	case r.Body == nil || r.Body == http.NoBody:
		return true
	}
	return r.ContentLength >= 0 && r.ContentLength <= g.cfg.MaxBodyBytes
}

// toNode runs r on another cluster node when the Forwarder finds one that
// fits it better, and reports whether it did.
func (g *Gateway) toNode(w http.ResponseWriter, r *http.Request, rec *record, ctl control) bool {
	f := g.cfg.Forwarder
	return f != nil && g.forwardable(r, ctl, rec.intercepted) && f.Forward(w, r, rec.user, ctl.labels)
}

// ForwardHeader is what of a proxy request's header goes to the node that
// runs it: the control headers, the proxy's credentials and hop-by-hop
// fields never leave (stripHop), as they never leave toward an exit.
func ForwardHeader(h http.Header) http.Header {
	out := h.Clone()
	stripHop(out)
	return out
}

package cluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata of node-to-node calls (docs/design/013-cluster.md). A user's
// call carries none of them; a call that carries any must carry a valid
// node token, so that no user can pass for a node or for a forward.
const (
	mdNode      = "x-switchyard-node"       // the calling node's id
	mdToken     = "x-switchyard-node-token" // its Token
	mdInstance  = "x-switchyard-instance"   // its process's instance (PingResponse.instance)
	mdEntry     = "x-switchyard-entry"      // a forward: the entry node that took the request
	mdUser      = "x-switchyard-user"       // a forward: the user the entry authenticated
	mdUserLabel = "x-switchyard-user-labels"
)

// healthService is exempt from node auth: orchestrators' probes hold no
// token, and "reachable" must be told apart from "wrong token"
// (docs/design/013-cluster.md).
const healthService = "/grpc.health.v1.Health/"

// Call is what an authenticated node-to-node call says of itself.
type Call struct {
	Node  string // the calling node's id
	Entry string // the entry node, for a forward; "" otherwise
	// User and UserLabels are the caller the entry authenticated, for a
	// forward; the executing node applies the labels again.
	User       string
	UserLabels string
}

type callKey struct{}

// CallFrom is the node call ctx serves, if it is one that passed the
// interceptors.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// Forwarded reports whether ctx serves a forward from an entry node: such
// a request runs here, and is never forwarded again.
func Forwarded(ctx context.Context) bool {
	c, ok := CallFrom(ctx)
	return ok && c.Entry != ""
}

// authenticator checks node calls' tokens on the server side.
type authenticator struct {
	// Immutable.
	self, secret, instance string
	log                    *slog.Logger

	warned sync.Map // node ids claiming ours already warned of
}

// check authenticates the node call in ctx, if it is one: it returns ctx
// carrying the Call, or an UNAUTHENTICATED status naming the node.
func (a *authenticator) check(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, healthService) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	node, token, entry := get(mdNode), get(mdToken), get(mdEntry)
	if node == "" && token == "" && entry == "" && get(mdUser) == "" {
		return ctx, nil // a user's call: the fetch API authenticates it
	}
	if node == "" || !validToken(a.secret, node, token) {
		// Never the token nor the secret in the answer or the log.
		a.log.Warn("cluster: node call refused: wrong or missing node token (is cluster.secret the same on every node?)", "node", clip(node), "method", method)
		return ctx, status.Error(codes.Unauthenticated, "switchyard: cluster: wrong or missing node token for node "+clip(node)+" (is cluster.secret the same on every node?)")
	}
	// This process calling its own address (listed under another
	// spelling) is no second node.
	if node == a.self && get(mdInstance) != a.instance {
		if _, seen := a.warned.LoadOrStore(node, true); !seen {
			a.log.Warn("CLUSTER NODE ID CLAIMED TWICE: a peer calls with this node's own id; give every node its own SWITCHYARD_NODE_ID", "node", node)
		}
	}
	return context.WithValue(ctx, callKey{}, Call{Node: node, Entry: entry, User: get(mdUser), UserLabels: get(mdUserLabel)}), nil
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.check(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.check(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &callStream{ServerStream: ss, ctx: ctx})
}

// callStream is a stream whose context carries its Call.
type callStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *callStream) Context() context.Context { return c.ctx }

// nodeCredentials attach this node's id and token to every call on a
// connection to a peer.
type nodeCredentials struct {
	md     map[string]string
	secure bool // the connection is TLS (cluster.tls_*)
}

func (n nodeCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return n.md, nil
}

// RequireTransportSecurity is true over TLS, so that a token is never sent
// on a connection that fell back to plain; without cluster.tls_* nodes
// speak h2c on a private network (docs/design/013-cluster.md, TLS).
func (n nodeCredentials) RequireTransportSecurity() bool { return n.secure }

// ForwardContext is ctx for a call forwarding a request of user (whose
// labels are userLabels) to a peer: it names this node as the entry.
func (c *Cluster) ForwardContext(ctx context.Context, user, userLabels string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdEntry, c.self, mdUser, user, mdUserLabel, userLabels)
}

// clip cuts what a message quotes of a caller's metadata to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

package fetchapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/cluster"
)

// A CONNECT through another node (docs/design/013-cluster.md): the entry
// sends the CONNECT on to the forward proxy of the node whose exits fit
// it, marked with its id and token, and splices the client to the tunnel
// that node builds. That node runs its own attempt loop; nothing of the
// client's is sent before its tunnel is up, so a node that fails before
// is passed over for another whatever the tunnel will carry.

// The marker of a CONNECT an entry sends to a peer's proxy, as node calls
// carry it in gRPC metadata; the gateway strips X-Switchyard-* headers
// before anything leaves for an exit.
const (
	headerEntry      = "X-Switchyard-Entry"
	headerEntryToken = "X-Switchyard-Entry-Token"
)

// tunnelThere builds r's tunnel through the node that fits labels best,
// and reports whether it answered w; false leaves r to this node.
func (s *Server) tunnelThere(w http.ResponseWriter, r *http.Request, labels engine.Labels) bool {
	cl := s.opts.Cluster
	if _, err := s.fetcher.Admit(r.Context(), r.Host); err != nil {
		return false // refused here, by the local path, with its own code
	}
	target := s.fetcher.TargetKey(r.Host)
	tried := map[string]bool{}
	for n := 0; n <= cl.MaxFailover(); n++ {
		ch := cl.Pick(labels, target, tried)
		if ch.Self {
			return false
		}
		tried[ch.Node] = true
		if ch.Proxy == "" { // an older node: no tunnels through it
			ch.Done(nil)
			continue
		}
		// A tunnel holds its target's pacing slot at the entry for as
		// long as it lives, as a local one does.
		release, perr := s.fetcher.PaceForward(r.Context(), target)
		if perr != nil {
			ch.Done(nil)
			return false // the local path answers the pacing as it does
		}
		upstream, br, resp, err := s.connectVia(r, ch, labels)
		if err != nil {
			release()
			ch.Done(status.Error(codes.Unavailable, err.Error()))
			continue
		}
		defer release()
		defer ch.Done(nil) // the tunnel counts in flight for as long as it lives
		relayTunnel(w, r, ch.Node, cl.Self(), upstream, br, resp)
		return true
	}
	return false
}

// connectVia sends r's CONNECT to ch's forward proxy and reads its answer,
// within retry.request_timeout. The client's credentials go with it: the
// node checks them, and applies the user's labels, as this one did.
func (s *Server) connectVia(r *http.Request, ch cluster.Choice, labels engine.Labels) (net.Conn, *bufio.Reader, *http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", ch.Proxy)
	if err != nil {
		return nil, nil, nil, err
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	id, token := s.opts.Cluster.NodeToken()
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: r.Host}, Host: r.Host, Header: http.Header{}}
	if auth := r.Header.Get("Proxy-Authorization"); auth != "" {
		req.Header.Set("Proxy-Authorization", auth)
	}
	if len(labels) > 0 {
		req.Header.Set("X-Switchyard-Labels", labels.String())
	}
	req.Header.Set(headerEntry, id)
	req.Header.Set(headerEntryToken, token)
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, br, resp, nil
}

// relayTunnel answers the client as the node answered: a refusal as it
// came, or the tunnel, spliced until either side ends. Both name the node
// and the entry.
func relayTunnel(w http.ResponseWriter, r *http.Request, node, entry string, upstream net.Conn, br *bufio.Reader, resp *http.Response) {
	defer upstream.Close()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h := w.Header()
		for name, values := range resp.Header {
			h[name] = values
		}
		h.Set("X-Switchyard-Node", node)
		h.Set("X-Switchyard-Entry", entry)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, io.LimitReader(resp.Body, 64<<10))
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "switchyard: the tunnel cannot be handed over: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer client.Close()
	client.SetDeadline(time.Time{}) // the server's header and idle deadlines are not a tunnel's
	var head strings.Builder
	head.WriteString("HTTP/1.1 200 Connection established\r\n")
	for _, name := range []string{"X-Switchyard-Route", "X-Switchyard-Attempts"} {
		if v := resp.Header.Get(name); v != "" {
			fmt.Fprintf(&head, "%s: %s\r\n", name, v)
		}
	}
	fmt.Fprintf(&head, "X-Switchyard-Node: %s\r\nX-Switchyard-Entry: %s\r\n\r\n", node, entry)
	if _, err := buf.WriteString(head.String()); err != nil || buf.Flush() != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The client's bytes, those it sent behind the CONNECT first.
		io.Copy(upstream, buf.Reader)
		closeWrite(upstream)
	}()
	io.Copy(client, br) // the node's bytes, what came behind its answer first
	closeWrite(client)
	<-done
}

// closeWrite ends the sending side of c, so that the other end sees EOF
// while its own side may still send.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

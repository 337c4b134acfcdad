// Command floorproxy is the least a forward proxy written in Go on
// net/http does: LiveCost's go-floor contender. It passes absolute-form
// requests and CONNECT tunnels to its exits in rotation through one
// shared http.Transport and a spliced copy, with no choice of exit, no
// retry, no judging and no log. Beside HAProxy it measures what Go's
// net/http costs; beside switchyard, what the gateway adds to it.
//
//	floorproxy -listen 127.0.0.1:8080 -exits 127.0.0.1:3128,127.0.0.1:3129
//
// It dials nothing but its exits, which must be loopback addresses.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	list := flag.String("exits", "", "comma-separated host:port of the HTTP proxies to rotate over (loopback only)")
	flag.Parse()
	p, err := newProxy(strings.Split(*list, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floorproxy:", err)
		os.Exit(2)
	}
	log.Fatal((&http.Server{Addr: *listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}

// proxy rotates over exits: HTTP proxies on the loopback.
type proxy struct {
	exits     []*url.URL
	next      atomic.Uint64
	transport *http.Transport
}

type exitKey struct{}

func newProxy(exits []string) (*proxy, error) {
	p := &proxy{}
	for _, e := range exits {
		host, _, err := net.SplitHostPort(e)
		if err != nil {
			return nil, fmt.Errorf("exit %q: %v", e, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("exit %q: not a loopback address", e)
		}
		p.exits = append(p.exits, &url.URL{Scheme: "http", Host: e})
	}
	p.transport = &http.Transport{
		Proxy:               func(r *http.Request) (*url.URL, error) { return r.Context().Value(exitKey{}).(*url.URL), nil },
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return p, nil
}

func (p *proxy) exit() *url.URL { return p.exits[(p.next.Add(1)-1)%uint64(len(p.exits))] }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "absolute-form requests or CONNECT only", http.StatusBadRequest)
		return
	}
	out := r.Clone(context.WithValue(r.Context(), exitKey{}, p.exit()))
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// tunnel asks the next exit for a tunnel to r's authority and splices it
// to the client's connection.
func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := net.DialTimeout("tcp", p.exit().Host, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	fmt.Fprintf(up, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", r.Host, r.Host)
	br := bufio.NewReader(up)
	resp, err := http.ReadResponse(br, r)
	if err != nil || resp.StatusCode != http.StatusOK {
		http.Error(w, "the exit refused the tunnel", http.StatusBadGateway)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := brw.Reader.Buffered(); n > 0 { // what the client sent after its CONNECT
			b, _ := brw.Reader.Peek(n)
			up.Write(b)
		}
		io.Copy(up, client)
		up.(*net.TCPConn).CloseWrite()
	}()
	if n := br.Buffered(); n > 0 { // what the exit sent after its 200
		b, _ := br.Peek(n)
		client.Write(b)
	}
	io.Copy(client, up)
	client.(*net.TCPConn).CloseWrite()
	<-done
}

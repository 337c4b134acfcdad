package livebench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// proxyClient is a keep-alive client sending everything through proxy,
// with room for every worker's connection, verifying HTTPS sites against
// roots (nil: the system's).
func proxyClient(proxy *url.URL, workers int, roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		MaxIdleConns:        workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
	}}
}

// closeClients drops the clients' idle connections.
func closeClients(clients ...*http.Client) {
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}

// directClients are one proxyClient per exit of f, for the contenders
// that pick exits themselves.
func directClients(f *fleet, workers int) []*http.Client {
	urls := f.urls()
	clients := make([]*http.Client, len(urls))
	for i, u := range urls {
		clients[i] = proxyClient(u, workers, f.roots)
	}
	return clients
}

// gateway sends every attempt through one proxy that chooses the exit.
type gateway struct{ client *http.Client }

var _ router = gateway{}

func (g gateway) route(ctx context.Context, _ string, _ []int) (*http.Client, int, error) {
	return g.client, -1, ctx.Err()
}

// roundRobin is blind client-side rotation over every exit: what users
// do today. Retries take the next exit in the rotation, like any request.
type roundRobin struct {
	clients []*http.Client // immutable
	next    atomic.Uint64
}

var _ router = (*roundRobin)(nil)

func (r *roundRobin) route(ctx context.Context, _ string, _ []int) (*http.Client, int, error) {
	i := int((r.next.Add(1) - 1) % uint64(len(r.clients)))
	return r.clients[i], i, ctx.Err()
}

// directContender is a contender that picks exits itself, in the
// benchmark's process: router builds its routing over one client per exit.
func directContender(name string, router func(f *fleet, clients []*http.Client, opts Options) router) contender {
	return contender{name: name, missing: always, start: func(_ context.Context, f *fleet, opts Options, _ string) (*session, error) {
		clients := directClients(f, opts.Workers)
		return &session{
			router:  router(f, clients, opts),
			proxies: f.urls(),
			stop:    func() { closeClients(clients...) },
		}, nil
	}}
}

// oracleContender runs the ground-truth oracle.
func oracleContender() contender {
	return directContender("oracle", func(f *fleet, clients []*http.Client, opts Options) router {
		return newOracle(f.world, clients, opts.Workers, opts.Seed)
	})
}

// roundRobinContender runs blind client-side rotation.
func roundRobinContender() contender {
	return directContender("round_robin", func(_ *fleet, clients []*http.Client, _ Options) router {
		return &roundRobin{clients: clients}
	})
}

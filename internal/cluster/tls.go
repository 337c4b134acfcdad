package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLS is the nodes' TLS (cluster.tls_cert, tls_key, tls_ca): the server
// side, for the API listener, presents this node's certificate and checks
// a client's against the CA when one is shown (users of the API may show
// none: node calls are proven by their token); the client side, for calls
// to peers, presents the same certificate and checks the peer's against
// the CA. Both nil when the three keys are "": nodes then speak h2c.
func (c Config) TLS() (server, client *tls.Config, err error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return nil, nil, errors.New("cluster: cluster.tls_cert, cluster.tls_key and cluster.tls_ca go together")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: cluster.tls_cert, cluster.tls_key: %w", err)
	}
	pem, err := os.ReadFile(c.TLSCA)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: cluster.tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, errors.New("cluster: cluster.tls_ca: no PEM certificate in " + c.TLSCA)
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven,
		NextProtos: []string{"h2", "http/1.1"}, // gRPC needs h2; the JSON API takes either
	}
	client = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return server, client, nil
}

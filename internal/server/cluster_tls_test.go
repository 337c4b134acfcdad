package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// nodeCerts writes a CA and a certificate it signs for 127.0.0.1 to dir,
// and returns their paths and the CA's pool.
func nodeCerts(t testing.TB, dir string) (cert, key, ca string, pool *x509.CertPool) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test nodes CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return write("node.pem", "CERTIFICATE", der), write("node.key", "EC PRIVATE KEY", keyDER), write("ca.pem", "CERTIFICATE", caDER), pool
}

// TestClusterOverTLS runs two nodes with cluster.tls_*: they come up and
// forward to each other over TLS, and a user reaches the API over TLS.
func TestClusterOverTLS(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		cert, key, ca, pool := nodeCerts(t, t.TempDir())
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra", tls: [3]string{cert, key, ca}}, nodeSpec{id: "b", region: "rb", tls: [3]string{cert, key, ca}})
		cc, err := grpc.NewClient("passthrough:///"+nodes[0].api, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		out, err := pb.NewFetcherClient(cc).Fetch(t.Context(), &pb.FetchRequest{Url: site.URL, Labels: region("rb")})
		if err != nil || out.GetNode() != "b" || out.GetEntry() != "a" || out.GetStatus() != 200 {
			t.Fatalf("over TLS: %v, %v", out, err)
		}
	})
}

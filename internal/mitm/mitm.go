// Package mitm is the local certificate authority behind TLS interception
// (docs/design/012-mitm.md): a CA generated once and kept on disk, or
// loaded from files the operator gives, and the leaf certificates it
// mints on demand for the hosts clients CONNECT to, kept in a bounded
// cache.
//
// The CA's key is a secret: it is written 0600, never logged, never
// served; what leaves the package is the CA's certificate.
package mitm

import (
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The files of a generated CA, in its state directory.
const (
	CertFile = "mitm-ca.pem"
	KeyFile  = "mitm-ca-key.pem"
)

const (
	// caValidity is a generated CA's lifetime: ten years, as mitmproxy's,
	// so that the trust a user set up once lasts.
	caValidity = 10 * 365 * 24 * time.Hour
	// leafValidity is a minted certificate's: short, since minting is
	// cheap, and under the 398 days clients accept of a leaf.
	leafValidity = 30 * 24 * time.Hour
	// leafBackdate covers clients whose clock runs behind.
	leafBackdate = 24 * time.Hour
	// leafRenew is how long before its expiry a cached leaf is minted
	// again, so that no handshake is served a certificate about to lapse.
	leafRenew = 24 * time.Hour
	// DefaultCacheSize is how many hosts' leaves are kept.
	DefaultCacheSize = 4096
)

// DefaultStateDir is where a generated CA is kept unless configured:
// switchyard/ under the user's config directory; "" when there is none
// (no $HOME).
func DefaultStateDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "switchyard")
}

// Authority mints leaf certificates for intercepted hosts. Safe for
// concurrent use.
type Authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	// leafKey signs every leaf's handshakes: one key, as mitmproxy does,
	// so that minting is one signature, not a key generation.
	leafKey *ecdsa.PrivateKey
	now     func() time.Time
	path    string // the CA certificate's file

	mu    sync.Mutex
	limit int
	hosts map[string]*list.Element // of *leaf
	order *list.List               // front: most recently used
}

// leaf is a host's certificate, or the minting of it under way.
type leaf struct {
	host  string
	ready chan struct{} // closed once cert and err are set
	cert  *tls.Certificate
	err   error
}

// Options tune an Authority; the zero value is the defaults.
type Options struct {
	CacheSize int              // hosts whose leaves are kept; default DefaultCacheSize
	Now       func() time.Time // default time.Now
}

func (o Options) withDefaults() Options {
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// LoadOrCreate loads the CA kept in dir, generating it (and dir, 0700)
// on first use. created reports a new CA, for the caller to tell the user
// how to trust it.
func LoadOrCreate(dir string, o Options) (a *Authority, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		a, err := Load(certPath, keyPath, o)
		return a, false, err
	case !errors.Is(certErr, os.ErrNotExist) && certErr != nil:
		return nil, false, fmt.Errorf("mitm: %w", certErr)
	case !errors.Is(keyErr, os.ErrNotExist) && keyErr != nil:
		return nil, false, fmt.Errorf("mitm: %w", keyErr)
	case certErr == nil || keyErr == nil:
		// One without the other: never overwrite half of a CA that
		// clients may trust.
		return nil, false, fmt.Errorf("mitm: %s holds one of %s and %s without the other: restore it or remove it", dir, CertFile, KeyFile)
	}
	if err := create(dir, certPath, keyPath, o.withDefaults().Now()); err != nil {
		return nil, false, err
	}
	a, err = Load(certPath, keyPath, o)
	return a, err == nil, err
}

// create generates a CA: an ECDSA P-256 key and a self-signed certificate
// for caValidity, the key written 0600 before the certificate, so that a
// crash leaves no certificate without its key.
func create(dir, certPath, keyPath string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mitm: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("mitm: generating the CA key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("mitm: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: strings.TrimSpace("Switchyard local CA " + host), Organization: []string{"Switchyard"}},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("mitm: signing the CA certificate: %w", err)
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o644)
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("mitm: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("mitm: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("mitm: writing %s: %w", path, err)
	}
	return nil
}

// Load reads a CA from a PEM certificate file and a PEM key file (PKCS#8,
// EC or PKCS#1); the certificate must be a CA's and match the key.
// Errors name the file, never quote the key.
func Load(certPath, keyPath string, o Options) (*Authority, error) {
	o = o.withDefaults()
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("mitm: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("mitm: %s: no PEM CERTIFICATE block", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mitm: %s: %w", certPath, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("mitm: %s is not a CA certificate (basic constraints CA and key usage cert sign)", certPath)
	}
	if now := o.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("mitm: %s expired on %s", certPath, cert.NotAfter.Format(time.DateOnly))
	}
	key, err := loadKey(keyPath)
	if err != nil {
		return nil, err
	}
	if !publicEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("mitm: %s is not the key of %s", keyPath, certPath)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mitm: generating the leaf key: %w", err)
	}
	abs, err := filepath.Abs(certPath)
	if err != nil {
		abs = certPath
	}
	return &Authority{
		cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key: key, leafKey: leafKey, now: o.Now, path: abs,
		limit: o.CacheSize, hosts: make(map[string]*list.Element), order: list.New(),
	}, nil
}

func loadKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mitm: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("mitm: %s: no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("mitm: %s: a %q PEM block is not a private key", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("mitm: %s: the private key does not parse", path)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("mitm: %s: unsupported key type %T", path, key)
	}
	return signer, nil
}

func publicEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// CertPEM is the CA's certificate, PEM-encoded: what clients trust.
func (a *Authority) CertPEM() []byte { return a.certPEM }

// CertPath is the CA certificate's file, absolute.
func (a *Authority) CertPath() string { return a.path }

// SPKIHash is the base64 SHA-256 of the CA's SubjectPublicKeyInfo, the
// form Chromium's --ignore-certificate-errors-spki-list takes.
func (a *Authority) SPKIHash() string {
	sum := sha256.Sum256(a.cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Leaf is the certificate for host (a DNS name or an IP literal, without
// port), from the cache or minted now. Concurrent first requests for one
// host mint once; the least recently used host leaves the cache when it is
// full, and a leaf near its expiry is minted again.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkHost(host); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if e, ok := a.hosts[host]; ok {
		l := e.Value.(*leaf)
		select {
		case <-l.ready:
			if l.err == nil && a.now().Before(l.cert.Leaf.NotAfter.Add(-leafRenew)) {
				a.order.MoveToFront(e)
				a.mu.Unlock()
				return l.cert, nil
			}
			a.remove(e) // stale or failed: mint afresh
		default:
			a.order.MoveToFront(e)
			a.mu.Unlock()
			<-l.ready
			return l.cert, l.err
		}
	}
	l := &leaf{host: host, ready: make(chan struct{})}
	a.hosts[host] = a.order.PushFront(l)
	for a.order.Len() > a.limit {
		a.remove(a.order.Back())
	}
	a.mu.Unlock()

	l.cert, l.err = a.mint(host)
	close(l.ready)
	return l.cert, l.err
}

// remove drops e from the cache. Callers hold mu.
func (a *Authority) remove(e *list.Element) {
	l := a.order.Remove(e).(*leaf)
	if a.hosts[l.host] == e {
		delete(a.hosts, l.host)
	}
}

// Cached is how many hosts' leaves the cache holds, minted or minting.
func (a *Authority) Cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.order.Len()
}

// checkHost refuses what no certificate can name.
func checkHost(host string) error {
	switch {
	case host == "":
		return errors.New("mitm: no host to mint a certificate for")
	case len(host) > 253:
		return errors.New("mitm: host name longer than 253 bytes")
	case strings.ContainsAny(host, " /\\*:") && net.ParseIP(host) == nil:
		return fmt.Errorf("mitm: %q is not a host name", host)
	}
	return nil
}

// mint signs a leaf for host: its name (or address) as the only subject
// alternative name, valid from leafBackdate ago for leafValidity, never
// past the CA's own expiry, with a random serial.
func (a *Authority) mint(host string) (*tls.Certificate, error) {
	now := a.now()
	end := now.Add(leafValidity)
	if end.After(a.cert.NotAfter) {
		end = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: host, Organization: []string{"Switchyard interception"}},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("mitm: minting a certificate for %s: %w", host, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mitm: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: parsed}, nil
}

// serial is a random 128-bit positive serial number, as RFC 5280 §4.1.2.2
// allows (at most 20 octets) and CAs are asked to use (at least 64 bits
// of randomness).
func serial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f // positive
	b[0] |= 0x40 // and never short
	return new(big.Int).SetBytes(b)
}

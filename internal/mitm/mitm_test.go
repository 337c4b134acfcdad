package mitm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newAuthority(t testing.TB, o Options) *Authority {
	t.Helper()
	a, created, err := LoadOrCreate(t.TempDir(), o)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate: created %v, %v", created, err)
	}
	return a
}

func TestLoadOrCreateKeepsTheCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a, created, err := LoadOrCreate(dir, Options{})
	if err != nil || !created {
		t.Fatalf("first use: created %v, %v", created, err)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, KeyFile): 0o600, filepath.Join(dir, CertFile): 0o644} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", name, got, want)
		}
	}
	if a.cert.NotAfter.Sub(a.cert.NotBefore) < 9*365*24*time.Hour || !a.cert.IsCA {
		t.Errorf("CA valid %v..%v, IsCA %v", a.cert.NotBefore, a.cert.NotAfter, a.cert.IsCA)
	}
	if _, ok := a.key.(*ecdsa.PrivateKey); !ok || a.key.(*ecdsa.PrivateKey).Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", a.key)
	}
	b, created, err := LoadOrCreate(dir, Options{})
	if err != nil || created {
		t.Fatalf("second use: created %v, %v", created, err)
	}
	if string(b.CertPEM()) != string(a.CertPEM()) {
		t.Error("the second start made another CA")
	}
	if b.CertPath() != filepath.Join(dir, CertFile) || a.SPKIHash() != b.SPKIHash() || len(a.SPKIHash()) != 44 {
		t.Errorf("CertPath %q, SPKI %q vs %q", b.CertPath(), a.SPKIHash(), b.SPKIHash())
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	a := newAuthority(t, Options{})
	caCert, caKey := a.CertPath(), filepath.Join(filepath.Dir(a.CertPath()), KeyFile)
	other := newAuthority(t, Options{})
	otherKey := filepath.Join(filepath.Dir(other.CertPath()), KeyFile)

	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "not a CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &leafKey.PublicKey, leafKey)
	notCA := filepath.Join(dir, "leaf.pem")
	os.WriteFile(notCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	leafKeyDER, _ := x509.MarshalECPrivateKey(leafKey)
	notCAKey := filepath.Join(dir, "leaf-key.pem")
	os.WriteFile(notCAKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: leafKeyDER}), 0o600)
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"), 0o600)

	for _, c := range []struct{ desc, cert, key, want string }{
		{"key of another CA", caCert, otherKey, "is not the key of"},
		{"not a CA", notCA, notCAKey, "is not a CA certificate"},
		{"no certificate", caKey, caKey, "no PEM CERTIFICATE block"},
		{"garbage key", caCert, garbage, "does not parse"},
		{"missing", filepath.Join(dir, "none.pem"), caKey, "no such file"},
	} {
		_, err := Load(c.cert, c.key, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.desc, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("%s: the error quotes the key: %v", c.desc, err)
		}
	}

	half := t.TempDir()
	os.WriteFile(filepath.Join(half, CertFile), a.CertPEM(), 0o644)
	if _, _, err := LoadOrCreate(half, Options{}); err == nil || !strings.Contains(err.Error(), "without the other") {
		t.Errorf("half a CA: %v", err)
	}
	if _, err := os.Stat(filepath.Join(half, KeyFile)); err == nil {
		t.Error("half a CA was completed with a new key")
	}
}

func TestLeafVerifies(t *testing.T) {
	a := newAuthority(t, Options{})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	for _, host := range []string{"example.com", "Shop.Example.COM.", "127.0.0.1", "::1", "xn--bcher-kva.example"} {
		c, err := a.Leaf(host)
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		name := strings.ToLower(strings.TrimSuffix(host, "."))
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if len(c.Certificate) != 2 {
			t.Errorf("%s: chain of %d, want the leaf and the CA", host, len(c.Certificate))
		}
	}
	for _, bad := range []string{"", "a b", "*.example.com", "x/y", strings.Repeat("a", 254)} {
		if _, err := a.Leaf(bad); err == nil {
			t.Errorf("Leaf(%q) minted", bad)
		}
	}
}

func TestLeafSerialsAndValidity(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	a := newAuthority(t, Options{Now: func() time.Time { return *clock.Load() }})
	serials := map[string]bool{}
	for i := range 50 {
		c, err := a.Leaf(strings.Repeat("x", i+1) + ".example")
		if err != nil {
			t.Fatal(err)
		}
		s := c.Leaf.SerialNumber
		if s.Sign() <= 0 || s.BitLen() > 127 || serials[s.String()] {
			t.Fatalf("serial %v: not positive, too long or repeated", s)
		}
		serials[s.String()] = true
		if !c.Leaf.NotBefore.Equal(now.Add(-leafBackdate)) || !c.Leaf.NotAfter.Equal(now.Add(leafValidity)) {
			t.Errorf("valid %v..%v", c.Leaf.NotBefore, c.Leaf.NotAfter)
		}
	}
	first, _ := a.Leaf("renew.example")
	later := now.Add(leafValidity - leafRenew/2)
	clock.Store(&later)
	again, _ := a.Leaf("renew.example")
	if again == first || !again.Leaf.NotAfter.Equal(later.Add(leafValidity)) {
		t.Error("a leaf about to expire was served again")
	}

	// Never past the CA's own expiry.
	end := a.cert.NotAfter.Add(-time.Hour)
	clock.Store(&end)
	c, _ := a.Leaf("late.example")
	if !c.Leaf.NotAfter.Equal(a.cert.NotAfter) {
		t.Errorf("leaf ends %v, CA %v", c.Leaf.NotAfter, a.cert.NotAfter)
	}
}

func TestLeafCache(t *testing.T) {
	a := newAuthority(t, Options{CacheSize: 2})
	one, _ := a.Leaf("one.example")
	a.Leaf("two.example")
	if c, _ := a.Leaf("one.example"); c != one {
		t.Error("a cached leaf was minted again")
	}
	a.Leaf("three.example") // two is the least recently used
	if a.Cached() != 2 {
		t.Errorf("cache holds %d, want 2", a.Cached())
	}
	if c, _ := a.Leaf("one.example"); c != one {
		t.Error("the recently used leaf was evicted")
	}

	// Concurrent first requests for one host mint once.
	var wg sync.WaitGroup
	got := make([]any, 32)
	for i := range got {
		wg.Go(func() {
			c, err := a.Leaf("burst.example")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for _, c := range got[1:] {
		if c != got[0] {
			t.Fatal("one host minted more than once under concurrent first requests")
		}
	}
}

func BenchmarkLeaf(b *testing.B) {
	a := newAuthority(b, Options{})
	b.Run("warm", func(b *testing.B) {
		a.Leaf("warm.example")
		for b.Loop() {
			a.Leaf("warm.example")
		}
	})
	b.Run("mint", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.mint("cold.example"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzLeaf mints for any host a client could name: either a clear error,
// or a certificate naming exactly that host, which verifies under the CA.
func FuzzLeaf(f *testing.F) {
	a := newAuthority(f, Options{CacheSize: 64})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	for _, h := range []string{"example.com", "127.0.0.1", "::1", "[::1]", "", ".", "a..b", "xn--", "é.example", "*.x", "1.2.3.4.5", "a b"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, host string) {
		c, err := a.Leaf(host)
		if err != nil {
			return
		}
		name := strings.ToLower(strings.TrimSuffix(host, "."))
		names := append(c.Leaf.DNSNames, func() (s []string) {
			for _, ip := range c.Leaf.IPAddresses {
				s = append(s, ip.String())
			}
			return s
		}()...)
		if len(names) != 1 {
			t.Fatalf("%q: a certificate naming %v", host, names)
		}
		if c.Leaf.DNSNames != nil && c.Leaf.DNSNames[0] != name {
			t.Fatalf("%q: minted for %q", host, c.Leaf.DNSNames[0])
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
			t.Fatalf("%q: %v", host, err)
		}
	})
}

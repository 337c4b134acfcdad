package livebench

import (
	"crypto/x509"
	"net/url"
	"time"

	"github.com/switchyard/switchyard/internal/mitm"
)

// fleet is a running pool: the site server and one fake exit per shape,
// all on 127.0.0.1, sharing one world. Each contender gets a fresh fleet
// from the same shapes and seed, so none inherits another's bans.
type fleet struct {
	// Immutable after startFleet.
	world *world
	sites *siteServer
	exits []*exit
	// roots trust the sites' certificates, and caFile holds them, when
	// the sites speak TLS; nil and "" otherwise.
	roots  *x509.CertPool
	caFile string
}

// startFleet starts the sites and an exit per shape. marker is what the
// captcha page carries ("" for DefaultCaptchaMarker). With a caDir the
// sites speak TLS, with certificates of a CA made there.
func startFleet(shapes []Shape, sites []string, seed uint64, marker, caDir string) (*fleet, error) {
	if marker == "" {
		marker = DefaultCaptchaMarker
	}
	w, err := newWorld(shapes, sites, seed)
	if err != nil {
		return nil, err
	}
	f := &fleet{world: w}
	var ca *mitm.Authority
	if caDir != "" {
		if ca, _, err = mitm.LoadOrCreate(caDir, mitm.Options{}); err != nil {
			return nil, err
		}
		f.caFile, f.roots = ca.CertPath(), x509.NewCertPool()
		f.roots.AppendCertsFromPEM(ca.CertPEM())
	}
	if f.sites, err = startSites(w, marker, ca); err != nil {
		return nil, err
	}
	for i := range shapes {
		x, err := startExit(i, w, f.sites)
		if err != nil {
			f.close()
			return nil, err
		}
		f.exits = append(f.exits, x)
	}
	return f, nil
}

// close stops every exit, then the sites; it returns once all their
// goroutines have.
func (f *fleet) close() {
	for _, x := range f.exits {
		x.close()
	}
	f.sites.close()
}

// urls are the exits' proxy URLs, in shape order.
func (f *fleet) urls() []*url.URL {
	u := make([]*url.URL, len(f.exits))
	for i, x := range f.exits {
		u[i] = x.url
	}
	return u
}

// begin starts the run's timeline (blackhole windows are placed on it).
func (f *fleet) begin(start time.Time, run time.Duration) { f.world.begin(start, run) }

// perExit is how many requests each exit has received so far.
func (f *fleet) perExit() []int64 {
	n := make([]int64, len(f.exits))
	for i, x := range f.exits {
		n[i] = x.requests.Load()
	}
	return n
}

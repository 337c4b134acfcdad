// Package lookalike finds soft bans that no signature knows: a route whose
// answers for a target are one page for different URLs, or pages far from
// the sizes the target's other routes get, while the other routes' pages
// differ. The other routes are the guard: a site that answers everyone
// with the same page (an API's fixed JSON, a page the site changed for
// all) is never judged against one route (docs/design/011-lookalike.md).
package lookalike

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Answer is what the detector knows of one answer a route relayed for a
// target: which URL was asked for and which page came back, by digest.
type Answer struct {
	URL  uint64 // the URL asked for (URLDigest)
	Body uint64 // the page (BodyDigest of its decoded start)
	Size int    // bytes of the page as digested
}

// Verdict is the detector's reading of one answer.
type Verdict uint8

const (
	// Valid: nothing says the answer is not the page asked for.
	Valid Verdict = iota
	// Repeated: the route answered one page for different URLs while the
	// target's other routes got different pages.
	Repeated
	// Outsized: the route's recent pages are mostly of sizes the
	// target's other routes rarely get, and this one is too.
	Outsized
)

func (v Verdict) String() string {
	switch v {
	case Repeated:
		return "one page for different URLs"
	case Outsized:
		return "pages far from the target's usual sizes"
	}
	return "valid"
}

// The evidence thresholds, fixed: docs/design/011-lookalike.md says why
// each is where it is.
const (
	pairRing   = 8  // answers kept per route×target
	targetRing = 64 // valid answers kept per target, across its routes
	// minRepeats is how many different URLs one page must have answered
	// on a route before it counts as repeated.
	minRepeats = 3
	// minSizeRun is how many of a route's recent answers must be of rare
	// sizes.
	minSizeRun = 4
	// minOthers is how many answers of the target's other routes (two at
	// least) must have come since the route's suspect answers began: with
	// fewer, the detector cannot tell the route from the site.
	minOthers = 16
	// A page that one in sameShare of the other routes' answers also got
	// is the site's, not the route's.
	sameShare = 16
	// rareShare: a size bucket (with its neighbours) that fewer than one
	// in rareShare of the other routes' answers fall in is rare.
	rareShare = 16
	// foundRing ban pages found out by rule 1 are kept per target.
	foundRing = 4
)

// Config bounds the detector's memory and the age of its evidence.
type Config struct {
	// MaxTargets is how many targets are remembered (targetRing answers
	// each); the least recently judged is forgotten first. Default
	// DefaultMaxTargets.
	MaxTargets int
	// MaxPairs is how many route×target pairs are remembered (pairRing
	// answers each); the least recently judged is forgotten first.
	// Default DefaultMaxPairs.
	MaxPairs int
	// Window is how long an answer counts as evidence; default
	// DefaultWindow.
	Window time.Duration
	// Now is the clock answers are timed by; default time.Now.
	Now func() time.Time
}

// The defaults of Config: about 2.6 KiB per target and 0.4 KiB per pair,
// some 9 MiB in all when full.
const (
	DefaultMaxTargets = 1024
	DefaultMaxPairs   = 16384
	DefaultWindow     = 10 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.MaxTargets <= 0 {
		c.MaxTargets = DefaultMaxTargets
	}
	if c.MaxPairs <= 0 {
		c.MaxPairs = DefaultMaxPairs
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Detector judges answers by what the same target's routes answered
// recently. Safe for concurrent use; a judgement is a bounded scan of
// fixed rings, and allocates only when a target or pair is first seen
// (and not then once the caps are reached: the forgotten one is reused).
type Detector struct {
	cfg Config // immutable

	mu      sync.Mutex
	targets lru[string, targetLog] // guarded by mu
	pairs   lru[pairKey, pairLog]  // guarded by mu
}

type pairKey struct{ target, route string }

// sighting is one answer as the rings keep it.
type sighting struct {
	url, body uint64
	route     uint64 // routeDigest; in a target's ring only
	at        int64  // Unix nanoseconds
	bucket    uint8  // sizeBucket
}

// targetLog is a target's latest valid answers, from all its routes.
type targetLog struct {
	ring [targetRing]sighting
	next int // the slot the next answer takes
	n    int // answers kept, up to targetRing
	// found are the pages rule 1 found out here, with when they were last
	// found out (body and at of a sighting; again as known, too), newest
	// replacing oldest: a site's ban page is one page for every route it
	// bans, known from its first answer on any of them.
	found     [foundRing]sighting
	foundNext int
}

// pairLog is a route×target's latest answers, valid or not: a route that
// keeps answering the ban page keeps being judged by it.
type pairLog struct {
	ring [pairRing]sighting
	next int
	n    int
}

// New returns a detector with cfg's bounds (zero fields take defaults).
func New(cfg Config) *Detector {
	cfg = cfg.withDefaults()
	return &Detector{
		cfg:     cfg,
		targets: newLRU[string, targetLog](cfg.MaxTargets),
		pairs:   newLRU[pairKey, pairLog](cfg.MaxPairs),
	}
}

// Judge reads answer a, which route relayed for target and the rule table
// took for ok, against the target's recent answers, and remembers it: any
// answer joins the pair's, a valid one the target's evidence unless the
// route keeps answering its page (docs/design/011-lookalike.md).
func (d *Detector) Judge(target, route string, a Answer) Verdict {
	s := d.sighting(route, a)
	cutoff := s.at - int64(d.cfg.Window)

	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.targets.get(target)
	p := d.pairs.get(pairKey{target, route})
	p.add(s)
	v, r := t.verdict(s, p, cutoff)
	if v == Repeated {
		t.noteFound(s)
	}
	if v == Valid && r.urls < minRepeats {
		// A page the route keeps answering for different URLs is no
		// evidence of the site's pages, even while it cannot be judged
		// yet: the ban pages that pass in the cold start would otherwise
		// make the ban page look like the site's to the other routes'.
		t.add(s)
	}
	return v
}

// Recheck reads answer a as Judge would, as the pair's newest answer,
// and remembers nothing: a probe, which fetches one page again and
// again, must not teach the detector, but the page that got a pair
// cooled must not restore it either. A pair or target with no evidence
// is Valid.
func (d *Detector) Recheck(target, route string, a Answer) Verdict {
	s := d.sighting(route, a)
	d.mu.Lock()
	defer d.mu.Unlock()
	cutoff := s.at - int64(d.cfg.Window)
	t, p := d.targets.peek(target), d.pairs.peek(pairKey{target, route})
	switch {
	case t == nil:
		return Valid
	case p == nil:
		// Forgotten, or never seen: a page found out elsewhere is still
		// known.
		if t.known(s, cutoff) {
			return Repeated
		}
		return Valid
	}
	with := *p
	with.add(s)
	v, _ := t.verdict(s, &with, cutoff)
	return v
}

// sighting is answer a through route, seen now.
func (d *Detector) sighting(route string, a Answer) sighting {
	return sighting{url: a.URL, body: a.Body, route: routeDigest(route), at: d.cfg.Now().UnixNano(), bucket: sizeBucket(a.Size)}
}

// verdict judges s, the newest of p's answers, against t's evidence.
func (t *targetLog) verdict(s sighting, p *pairLog, cutoff int64) (Verdict, repetition) {
	r := p.repeats(s, cutoff)
	switch {
	case r.urls >= minRepeats && r.same*2 >= r.recent && t.othersDiffer(s, r.since):
		return Repeated, r
	case t.othersElsewhere(s, p, cutoff):
		return Outsized, r
	case t.known(s, cutoff):
		return Repeated, r
	}
	return Valid, r
}

// noteFound keeps s's page as one rule 1 found out at the target.
func (t *targetLog) noteFound(s sighting) {
	for i := range t.found {
		if f := &t.found[i]; f.at != 0 && f.body == s.body {
			f.at = s.at
			return
		}
	}
	t.found[t.foundNext] = sighting{body: s.body, at: s.at}
	t.foundNext = (t.foundNext + 1) % foundRing
}

// known reports whether s's page was found out at the target within the
// window, on any route, and the target's other routes still get pages
// that differ from it: a route's first answers of the site's ban page
// are found out without waiting for three of them, as are a probe's of a
// pair the detector has forgotten (in a pool of many routes, before its
// next answer comes, the pair has often been forgotten at the cap). The
// guard stands: without enough of the others' answers in the window, or
// with them getting the page too, it is not known.
func (t *targetLog) known(s sighting, cutoff int64) bool {
	for _, f := range t.found {
		if f.at != 0 && f.at >= cutoff && f.body == s.body {
			return t.othersDiffer(s, cutoff)
		}
	}
	return false
}

// add keeps s as the pair's newest answer.
func (p *pairLog) add(s sighting) {
	p.ring[p.next] = s
	p.next = (p.next + 1) % pairRing
	p.n = min(p.n+1, pairRing)
}

// latest returns the pair's i-th newest answer (0 the newest).
func (p *pairLog) latest(i int) sighting {
	return p.ring[(p.next-1-i+2*pairRing)%pairRing]
}

// repetition is how a pair has answered one page within the window.
type repetition struct {
	urls   int   // different URLs it answered
	same   int   // answers of it
	recent int   // answers of any page
	since  int64 // its first answer of it
}

// repeats is how the pair has answered s's page within the window. One
// the site serves for some of its URLs (an out-of-stock page) comes back
// now and then; one in place of at least half the pages is the route's.
func (p *pairLog) repeats(s sighting, cutoff int64) repetition {
	var urls [pairRing]uint64
	r := repetition{since: s.at}
	for i := range p.n {
		e := p.latest(i)
		if e.at < cutoff {
			continue
		}
		r.recent++
		if e.body != s.body || e.bucket != s.bucket {
			continue
		}
		r.same++
		if !slices.Contains(urls[:r.urls], e.url) {
			urls[r.urls] = e.url
			r.urls++
		}
		r.since = min(r.since, e.at)
	}
	return r
}

// add keeps s as the target's newest valid answer.
func (t *targetLog) add(s sighting) {
	t.ring[t.next] = s
	t.next = (t.next + 1) % targetRing
	t.n = min(t.n+1, targetRing)
}

// others is what the target's other routes answered from since on.
type others struct {
	n       int
	routes  bool                 // from two routes or more
	bodies  [targetRing]uint64   // the first n are theirs
	buckets [maxBucket + 2]int32 // answers per size bucket, one spare on each side
}

// enough reports whether the others' answers can stand for the site.
func (o *others) enough() bool { return o.n >= minOthers && o.routes }

// rare reports whether fewer than one in rareShare of the others'
// answers are within a bucket of b.
func (o *others) rare(b uint8) bool {
	return (o.buckets[b]+o.buckets[b+1]+o.buckets[b+2])*rareShare < int32(o.n)
}

// othersFrom gathers the valid answers of routes other than route since
// since, within the window.
func (t *targetLog) othersFrom(route uint64, since int64, o *others) {
	var first uint64
	for i := range t.n {
		e := &t.ring[i]
		if e.route == route || e.at < since {
			continue
		}
		switch {
		case o.n == 0:
			first = e.route
		case e.route != first:
			o.routes = true
		}
		o.bodies[o.n] = e.body
		o.n++
		o.buckets[e.bucket+1]++
	}
}

// othersDiffer reports whether, since the pair's repeated page began
// (since, within the window; -1 when it has not repeated), the target's other routes got
// pages that differ from it and from each other: then the one page is
// the route's, not the site's.
func (t *targetLog) othersDiffer(s sighting, since int64) bool {
	if since < 0 {
		return false
	}
	var o others
	t.othersFrom(s.route, since, &o)
	if !o.enough() {
		return false
	}
	bodies := o.bodies[:o.n]
	same := 0
	for _, b := range bodies {
		if b == s.body {
			same++
		}
	}
	if same*sameShare >= o.n {
		return false
	}
	slices.Sort(bodies)
	distinct := len(slices.Compact(bodies))
	return distinct*2 >= o.n
}

// othersElsewhere reports whether s, the pair's newest answer, and at
// least three in four of the pair's answers within the window (minSizeRun
// of them, for minRepeats different URLs) are of sizes rare among what the
// target's other routes got since the first of those answers.
func (t *targetLog) othersElsewhere(s sighting, p *pairLog, cutoff int64) bool {
	recent, since := 0, s.at
	for i := range p.n {
		if e := p.latest(i); e.at >= cutoff {
			recent++
			since = min(since, e.at)
		}
	}
	if recent < minSizeRun {
		return false
	}
	var o others
	t.othersFrom(s.route, since, &o)
	if !o.enough() || !o.rare(s.bucket) {
		return false
	}
	var urls [pairRing]uint64
	rare, distinct := 0, 0
	for i := range p.n {
		e := p.latest(i)
		if e.at < cutoff || !o.rare(e.bucket) {
			continue
		}
		rare++
		if !slices.Contains(urls[:distinct], e.url) {
			urls[distinct] = e.url
			distinct++
		}
	}
	return rare >= minSizeRun && distinct >= minRepeats && rare*4 >= recent*3
}

// maxBucket is the largest size bucket.
const maxBucket = 40

// sizeBucket is the order of magnitude, in bits, of size: pages within a
// factor of two share a bucket.
func sizeBucket(size int) uint8 {
	return uint8(min(bits.Len(uint(max(size, 0))), maxBucket))
}

// seed keys the digests: they are compared within one process only.
var seed = maphash.MakeSeed()

func routeDigest(route string) uint64 { return maphash.String(seed, route) }

// URLDigest identifies a URL by its path and query, the part that names
// the page within a target.
func URLDigest(path, rawQuery string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(path)
	h.WriteByte('?')
	h.WriteString(rawQuery)
	return h.Sum64()
}

// BodyDigest identifies a page by its decoded start, ASCII digits left
// out: a ban page that differs only by a ray id, a timestamp or a counter
// is one page, while pages of different content differ in their words.
func BodyDigest(body []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for len(body) > 0 {
		i := 0
		for i < len(body) && !isDigit(body[i]) {
			i++
		}
		h.Write(body[:i])
		for i < len(body) && isDigit(body[i]) {
			i++
		}
		body = body[i:]
	}
	return h.Sum64()
}

func isDigit(c byte) bool { return c-'0' < 10 }

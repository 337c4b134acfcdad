package livebench

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// world is a fleet's ground truth: every exit's shape and how each site is
// treating each exit right now. Exits and sites ask it what to do with a
// request as it arrives; the oracle asks it what would happen. Time is
// passed in, so its tests need no clock.
type world struct {
	// Immutable after newWorld.
	shapes []Shape
	sites  []string

	mu    sync.Mutex
	start time.Time     // guarded by mu: the run's start, zero before begin
	run   time.Duration // guarded by mu: the run's length
	holes []bool        // guarded by mu: blackholes switched on at runtime
	rngs  []*rand.Rand  // guarded by mu: one per exit, seeded
	pairs map[pair]*pairState
}

// pair names one exit as seen by one site.
type pair struct {
	exit int
	site string
}

// pairState is a site's memory of one exit. Guarded by world.mu.
type pairState struct {
	bucket       *bucket      // nil without a rate limit
	burst        *burstWindow // nil without a burst ban
	limitedUntil time.Time    // 429s until then
	bannedUntil  time.Time    // 403s until then
}

// newWorld validates shapes against the sites they name and seeds every
// exit's randomness from seed.
func newWorld(shapes []Shape, sites []string, seed uint64) (*world, error) {
	w := &world{
		shapes: slices.Clone(shapes),
		sites:  slices.Clone(sites),
		holes:  make([]bool, len(shapes)),
		rngs:   make([]*rand.Rand, len(shapes)),
		pairs:  make(map[pair]*pairState),
	}
	for i, s := range shapes {
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("exit %d: %w", i, err)
		}
		for site, r := range s.Sites {
			if !slices.Contains(sites, site) {
				return nil, fmt.Errorf("exit %d: rule for unknown site %s", i, site)
			}
			st := &pairState{}
			if l := r.RateLimit; l != nil {
				st.bucket = newBucket(float64(l.PerSecond), l.PerSecond)
			}
			if b := r.BurstBan; b != nil {
				st.burst = newBurstWindow(b.Requests, b.Window)
			}
			w.pairs[pair{i, site}] = st
		}
		w.rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	return w, nil
}

// begin starts the run's timeline, against which blackhole windows are
// placed.
func (w *world) begin(start time.Time, run time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.start, w.run = start, run
}

// setBlackhole switches exit i's runtime blackhole on or off.
func (w *world) setBlackhole(i int, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holes[i] = on
}

// blackholed reports whether exit i swallows what arrives at now.
func (w *world) blackholed(i int, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blackholedLocked(i, now)
}

// blackholedLocked is blackholed; the caller must hold mu.
func (w *world) blackholedLocked(i int, now time.Time) bool {
	s := w.shapes[i]
	if s.Blackhole || w.holes[i] {
		return true
	}
	if s.BlackholeFrom == s.BlackholeTo || w.start.IsZero() {
		return false
	}
	at := float64(now.Sub(w.start)) / float64(w.run)
	return at >= s.BlackholeFrom && at < s.BlackholeTo
}

// exitAct is what an exit does with a request.
type exitAct uint8

const (
	actForward exitAct = iota // wait the delay, then forward or tunnel
	actHold                   // answer nothing, ever
	act407                    // refuse with 407
)

// atExit decides what exit i does with a request arriving at now, and the
// latency it adds before forwarding.
func (w *world) atExit(i int, now time.Time) (exitAct, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.shapes[i]
	switch {
	case w.blackholedLocked(i, now):
		return actHold, 0
	case s.Auth407:
		return act407, 0
	}
	d := s.Latency
	if s.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + s.Jitter*(2*w.rngs[i].Float64()-1)))
	}
	return actForward, d
}

// siteAnswer is what a site answers one request from one exit.
type siteAnswer struct {
	status     int
	retryAfter time.Duration // with 429
	captcha    bool          // with 200: the captcha page instead of the real one
}

// atSite decides how site answers a request from exit i arriving at now,
// updating the site's memory of the exit. Standing bans and penalties come
// first; then the arrival counts toward the burst window and the rate
// limit, either of which may start a penalty; then the exit's flakiness;
// then the page, or the captcha in its place.
func (w *world) atSite(i int, site string, now time.Time) siteAnswer {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.shapes[i]
	r := s.Sites[site]
	st := w.pairs[pair{i, site}]
	switch {
	case r.Banned:
		return siteAnswer{status: http.StatusForbidden}
	case st != nil && now.Before(st.bannedUntil):
		return siteAnswer{status: http.StatusForbidden}
	case st != nil && now.Before(st.limitedUntil):
		return siteAnswer{status: http.StatusTooManyRequests, retryAfter: st.limitedUntil.Sub(now)}
	}
	if st != nil && st.burst != nil && st.burst.arrive(now) {
		st.bannedUntil = now.Add(r.BurstBan.Penalty)
		return siteAnswer{status: http.StatusForbidden}
	}
	if st != nil && st.bucket != nil && !st.bucket.take(now) {
		st.limitedUntil = now.Add(r.RateLimit.Penalty)
		return siteAnswer{status: http.StatusTooManyRequests, retryAfter: r.RateLimit.Penalty}
	}
	if s.Flaky > 0 {
		if rng := w.rngs[i]; rng.Float64() < s.Flaky {
			return siteAnswer{status: []int{http.StatusBadGateway, http.StatusServiceUnavailable}[rng.IntN(2)]}
		}
	}
	return siteAnswer{status: http.StatusOK, captcha: r.Captcha}
}

// truth is what the oracle may know of exit i toward site at now.
type truth struct {
	usable  bool          // a request sent now would get the real page (flakiness aside)
	latency time.Duration // the exit's nominal added latency
	success float64       // the chance the site's answer is not a flaky 5xx
}

// truthAt tells the oracle the ground truth of exit i toward site at now.
func (w *world) truthAt(i int, site string, now time.Time) truth {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.shapes[i]
	r := s.Sites[site]
	t := truth{latency: s.Latency, success: 1 - s.Flaky}
	t.usable = !s.Dead && !s.Auth407 && !w.blackholedLocked(i, now) && !r.Banned && !r.Captcha
	if st := w.pairs[pair{i, site}]; st != nil && (now.Before(st.bannedUntil) || now.Before(st.limitedUntil)) {
		t.usable = false
	}
	return t
}

package livebench

import (
	"math/rand/v2"
	"slices"
	"time"
)

// siteMix is the weighted mix of sites the load draws from: distinct
// targets, so a gateway's per-target evidence matters.
var siteMix = []siteWeight{
	{"shop.test", 40},
	{"search.test", 35},
	{"news.test", 25},
}

// siteWeight is one site of the mix and its share of tasks.
type siteWeight struct {
	host   string
	weight int
}

// siteNames are the hosts of the mix.
func siteNames() []string {
	names := make([]string, len(siteMix))
	for i, s := range siteMix {
		names[i] = s.host
	}
	return names
}

// pool is one named case of the benchmark: a small fleet shaped as a
// situation users meet.
type pool struct {
	name   string // sub-benchmark name
	about  string // one line for the report
	shapes []Shape
}

// copies returns count copies of shape.
func copies(count int, shape Shape) []Shape {
	s := make([]Shape, count)
	for i := range s {
		s[i] = shape
	}
	return s
}

// shuffled concatenates groups and interleaves them in an order fixed by
// seed, so blind rotation meets bad exits spread out, the same every run.
func shuffled(seed uint64, groups ...[]Shape) []Shape {
	all := slices.Concat(groups...)
	rng := rand.New(rand.NewPCG(seed, 0x6c62))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all
}

// each applies f to every shape of group.
func each(group []Shape, f func(Shape) Shape) []Shape {
	out := make([]Shape, len(group))
	for i, s := range group {
		out[i] = f(s)
	}
	return out
}

// pools are the benchmark's cases (a–f, h and i), 3 to 20 exits each,
// and a healthy reference (g): with nothing to avoid, a gateway's ratio
// there is what its hop costs at this load, not what its choices cost.
func pools() []pool {
	// limitedEverywhere is a mixed fleet whose every exit the sites limit
	// to perSecond requests/s each (429, Retry-After 5 s).
	limitedEverywhere := func(perSecond int) []Shape {
		limit := rateLimited(perSecond, 5*time.Second)
		return each(shuffled(4,
			copies(9, fast()), copies(3, slow()), copies(2, dead()), copies(2, blackholed()),
			copies(2, fast().on("shop.test", banned)), copies(2, fast().on("search.test", captcha))),
			func(s Shape) Shape {
				for _, site := range siteNames() {
					s = s.on(site, limit)
				}
				return s
			})
	}
	onSite := func(site string, rule func(*SiteRule)) func(Shape) Shape {
		return func(s Shape) Shape { return s.on(site, rule) }
	}
	return []pool{
		{
			name:  "a_everyday_bad",
			about: "20 exits: 10 fast (~100 ms), 3 slow (~1 s), 3 dead, 2 blackholed, 2 flaky (30% 502/503)",
			shapes: shuffled(1,
				copies(10, fast()), copies(3, slow()), copies(3, dead()), copies(2, blackholed()), copies(2, flaky())),
		},
		{
			name:   "b_auth_slow",
			about:  "20 exits: 4 answer 407, 6 slow (~1 s), 10 fast (~100 ms)",
			shapes: shuffled(2, copies(4, auth407()), copies(6, slow()), copies(10, fast())),
		},
		{
			name:  "c_blackhole_window",
			about: "16 fast exits, 8 of them blackholed from 20% to 60% of the run",
			shapes: shuffled(3,
				copies(8, fast()), copies(8, fast().blackholedDuring(0.2, 0.6))),
		},
		{
			name: "d_rate_limited",
			about: "20 exits, each limited to 4 req/s per site (429, Retry-After 5 s): " +
				"9 fast, 3 slow, 2 dead, 2 blackholed, 2 banned on shop.test, 2 captcha on search.test",
			shapes: limitedEverywhere(4),
		},
		{
			name: "e_ban_and_limit",
			about: "20 fast exits: 5 banned on shop.test, 5 limited to 3 req/s on search.test (Retry-After 10 s); " +
				"news.test bans any exit for 20 s after 40 requests in 10 s",
			shapes: each(shuffled(5,
				copies(5, fast().on("shop.test", banned)),
				copies(5, fast().on("search.test", rateLimited(3, 10*time.Second))),
				copies(10, fast())), onSite("news.test", burstBanned(40, 10*time.Second, 20*time.Second))),
		},
		{
			name:   "f_three_exits",
			about:  "3 exits: 2 fast, 1 blackholed",
			shapes: []Shape{fast(), blackholed(), fast()},
		},
		{
			name:   "g_healthy_reference",
			about:  "16 fast exits (~100 ms), nothing wrong: the cost of a hop at this load",
			shapes: copies(16, fast()),
		},
		{
			name:   "h_most_banned",
			about:  "20 fast exits: 16 banned on shop.test (a site refusing a provider's ranges), 4 it still serves",
			shapes: shuffled(8, copies(16, fast().on("shop.test", banned)), copies(4, fast())),
		},
		{
			name: "i_roomy_limits",
			about: "d's 20 exits, each limited to 12 req/s per site (429, Retry-After 5 s): " +
				"the fast exits can carry the load alone",
			shapes: limitedEverywhere(12),
		},
	}
}

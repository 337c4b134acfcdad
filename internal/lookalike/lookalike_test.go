package lookalike

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a test clock the detector reads through Config.Now.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// site answers URL u through route r at step i: what the test's target
// and its routes do.
type site func(r, u, i int) Answer

// page is URL u's own page, of size bytes.
func page(u, size int) Answer {
	return Answer{URL: uint64(u), Body: uint64(1000 + u), Size: size}
}

// decoy is one ban page for every URL.
func decoy(u int) Answer { return Answer{URL: uint64(u), Body: 7, Size: 5 << 10} }

// firstBanned is a site that serves route 0 the ban page for every URL
// and the other routes their pages.
func firstBanned(r, u, _ int) Answer {
	if r == 0 {
		return decoy(u)
	}
	return page(u, 16<<10)
}

// run sends steps answers round-robin over routes, each step a new URL
// and a second later, and counts the verdicts other than Valid per route.
func run(d *Detector, c *clock, routes, steps int, s site) map[int]int {
	fired := map[int]int{}
	for i := range steps {
		r := i % routes
		c.now = c.now.Add(time.Second)
		if d.Judge("shop.example", fmt.Sprint("r", r), s(r, i, i)) != Valid {
			fired[r]++
		}
	}
	return fired
}

func TestJudge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		desc   string
		routes int
		steps  int
		site   site
		want   map[int]int // route → verdicts not Valid, at least; a route not listed gets none
	}{
		{
			desc: "a route answering one ban page for every URL", routes: 6, steps: 600,
			site: firstBanned,
			want: map[int]int{0: 90},
		},
		{
			desc: "a route answering varied small pages where the others get big ones", routes: 6, steps: 600,
			site: func(r, u, _ int) Answer {
				if r == 0 {
					return page(u, 300)
				}
				return page(u, 16<<10)
			},
			want: map[int]int{0: 90},
		},
		{
			desc: "an API answering the same small JSON to everyone", routes: 6, steps: 600,
			site: func(_, u, _ int) Answer { return Answer{URL: uint64(u), Body: 42, Size: 17} },
			want: map[int]int{},
		},
		{
			desc: "every URL its own page, sizes spread", routes: 6, steps: 600,
			site: func(_, u, _ int) Answer { return page(u, 1<<(6+u%10)) },
			want: map[int]int{},
		},
		{
			desc: "a page a quarter of the site's URLs answer (out of stock)", routes: 6, steps: 600,
			site: func(_, u, _ int) Answer {
				// 4 in 17 URLs, as many for each route (6 and 17 are coprime).
				if u%17 < 4 {
					return Answer{URL: uint64(u), Body: 9, Size: 16 << 10}
				}
				return page(u, 16<<10)
			},
			want: map[int]int{},
		},
		{
			desc: "the site changes its page for everyone", routes: 6, steps: 600,
			site: func(_, u, i int) Answer {
				if i >= 300 {
					return Answer{URL: uint64(u), Body: 5, Size: 2 << 10} // maintenance
				}
				return page(u, 16<<10)
			},
			want: map[int]int{},
		},
		{
			desc: "two routes: the other one alone cannot stand for the site", routes: 2, steps: 600,
			site: func(r, u, _ int) Answer {
				if r == 0 {
					return decoy(u)
				}
				return page(u, 16<<10)
			},
			want: map[int]int{},
		},
		{
			desc: "a ban page served once in a while, not in place of most pages", routes: 6, steps: 600,
			site: func(r, u, i int) Answer {
				if r == 0 && i%(6*3) == 0 {
					return decoy(u)
				}
				return page(u, 16<<10)
			},
			want: map[int]int{},
		},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			c := &clock{now: t0}
			d := New(Config{Now: c.Now})
			got := run(d, c, tt.routes, tt.steps, tt.site)
			for r := range tt.routes {
				if w := tt.want[r]; got[r] < w || w == 0 && got[r] != 0 {
					t.Errorf("route r%d: %d answers judged not valid, want %d", r, got[r], tt.want[r])
				}
			}
		})
	}
}

// TestColdStart: a ban page is judged only once its route has answered it
// for minRepeats URLs and the other routes have answered minOthers
// times since, from two routes at least.
func TestColdStart(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now})
	judge := func(route string, a Answer) Verdict {
		c.now = c.now.Add(time.Second)
		return d.Judge("shop.example", route, a)
	}
	u := 0
	for range minRepeats - 1 {
		if v := judge("bad", decoy(u)); v != Valid {
			t.Fatalf("ban page %d: %v before %d repeats", u, v, minRepeats)
		}
		u++
	}
	for i := range minOthers - 1 {
		judge(fmt.Sprint("good", i%2), page(u, 16<<10))
		u++
	}
	if v := judge("bad", decoy(u)); v != Valid {
		t.Fatalf("judged %v with %d answers of the others", v, minOthers-1)
	}
	u++
	judge("good0", page(u, 16<<10))
	u++
	if v := judge("bad", decoy(u)); v != Repeated {
		t.Fatalf("judged %v with %d answers of the others, want %v", v, minOthers, Repeated)
	}
}

// TestRecheck: a probe's page is read as the pair's newest answer, and
// nothing is learned from it.
func TestRecheck(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now})
	const probe = 1 << 40 // the probe's URL, never a user's
	if v := d.Recheck("shop.example", "bad", decoy(probe)); v != Valid {
		t.Fatalf("no evidence at all: %v", v)
	}
	if len(d.pairs.m) != 0 || len(d.targets.m) != 0 {
		t.Fatal("a recheck without evidence made a record")
	}
	fired := run(d, c, 4, 400, firstBanned)
	if fired[0] == 0 {
		t.Fatal("the banned route was never found out")
	}
	pair, target := *d.pairs.peek(pairKey{"shop.example", "r0"}), *d.targets.peek("shop.example")
	for range 20 {
		c.now = c.now.Add(time.Second)
		if v := d.Recheck("shop.example", "r0", decoy(probe)); v != Repeated {
			t.Fatalf("the ban page that cooled the pair, probed: %v", v)
		}
		if v := d.Recheck("shop.example", "r1", page(probe, 16<<10)); v != Valid {
			t.Fatalf("a clean route's page, probed: %v", v)
		}
	}
	if *d.pairs.peek(pairKey{"shop.example", "r0"}) != pair || *d.targets.peek("shop.example") != target {
		t.Fatal("rechecks changed the evidence")
	}
	// Two ban pages are not yet a repeat; two rechecks of it at other URLs
	// would make one if they were remembered. (Another ban page: the one
	// found out on r0 is known on every route.)
	other := func(u int) Answer { return Answer{URL: uint64(u), Body: 8, Size: 5 << 10} }
	d.Judge("shop.example", "new", other(1<<41))
	d.Recheck("shop.example", "new", other(1<<42))
	d.Recheck("shop.example", "new", other(1<<43))
	if v := d.Judge("shop.example", "new", other(1<<44)); v != Valid {
		t.Fatalf("rechecks were remembered: %v", v)
	}
}

// TestFoundPageKnownEverywhere: a ban page found out on one route is
// known at the target on every route, from its first answer of it and in
// a probe of a pair the detector has no evidence of (forgotten at the
// cap), for the window; not at another target.
func TestFoundPageKnownEverywhere(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now})
	fired := run(d, c, 4, 200, firstBanned)
	if fired[0] == 0 {
		t.Fatal("the banned route was never found out")
	}
	const u = 1 << 40
	if v := d.Judge("shop.example", "fresh", decoy(u)); v != Repeated {
		t.Errorf("a new route's first answer of the ban page: %v", v)
	}
	if v := d.Judge("shop.example", "fresh2", page(u, 16<<10)); v != Valid {
		t.Errorf("a new route's page: %v", v)
	}
	if v := d.Recheck("shop.example", "never-seen", decoy(u+1)); v != Repeated {
		t.Errorf("a probe of a pair without evidence served the ban page: %v", v)
	}
	if v := d.Judge("news.example", "fresh", decoy(u+2)); v != Valid {
		t.Errorf("the ban page at another target: %v", v)
	}
	// Past the window, nothing is known.
	d2 := New(Config{Now: c.Now})
	run(d2, c, 4, 200, firstBanned)
	c.now = c.now.Add(DefaultWindow + time.Second)
	if v := d2.Recheck("shop.example", "never-seen", decoy(u)); v != Valid {
		t.Errorf("a probe after the window: %v", v)
	}
}

// TestWindow: answers older than the window are no evidence.
func TestWindow(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now, Window: time.Minute})
	u := 0
	// The others answer plenty; the ban page comes every 40 s, so that
	// no more than two of it are ever within a minute.
	for i := range 400 {
		c.now = c.now.Add(time.Second)
		route := fmt.Sprint("good", i%3)
		a := page(u, 16<<10)
		if i%40 == 0 {
			route, a = "bad", decoy(u)
		}
		if v := d.Judge("shop.example", route, a); v != Valid {
			t.Fatalf("step %d, %s: %v", i, route, v)
		}
		u++
	}
}

// TestTargetsApart: one target's evidence says nothing of another's.
func TestTargetsApart(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now})
	for i := range 200 {
		c.now = c.now.Add(time.Second)
		// The good routes only answer for shop.example; the ban page's
		// route for api.example, whose only answers it has.
		if v := d.Judge("api.example", "bad", decoy(i)); v != Valid {
			t.Fatalf("step %d: %v on a target no other route answered", i, v)
		}
		d.Judge("shop.example", fmt.Sprint("good", i%3), page(i, 16<<10))
	}
}

// TestBounded: past MaxTargets and MaxPairs, the least recently judged are
// forgotten, and the caps hold.
func TestBounded(t *testing.T) {
	t.Parallel()
	c := &clock{now: t0}
	d := New(Config{Now: c.Now, MaxTargets: 4, MaxPairs: 8})
	for i := range 1000 {
		d.Judge(fmt.Sprint("t", i%7), fmt.Sprint("r", i%5), page(i, 100))
		if n := len(d.targets.m); n > 4 {
			t.Fatalf("%d targets kept, cap 4", n)
		}
		if n := len(d.pairs.m); n > 8 {
			t.Fatalf("%d pairs kept, cap 8", n)
		}
	}
	// The most recent is kept; one not judged for long is gone.
	d.Judge("recent", "r", page(1, 100))
	for i := range 3 {
		d.Judge(fmt.Sprint("other", i), "r", page(1, 100))
	}
	if _, ok := d.targets.m["recent"]; !ok {
		t.Error("the target judged 4th most recently was forgotten")
	}
	if _, ok := d.targets.m["t0"]; ok {
		t.Error("a target not judged since 4 others kept")
	}
}

// TestNoAllocation: judging the answers of known pairs allocates nothing.
func TestNoAllocation(t *testing.T) {
	c := &clock{now: t0}
	d := New(Config{Now: c.Now})
	routes := []string{"r0", "r1", "r2", "r3"}
	i := 0
	judge := func() {
		c.now = c.now.Add(time.Second)
		a := page(i, 16<<10)
		if i%4 == 0 {
			a = decoy(i)
		}
		d.Judge("shop.example", routes[i%4], a)
		i++
	}
	for range 100 {
		judge()
	}
	if n := testing.AllocsPerRun(1000, judge); n != 0 {
		t.Errorf("%v allocations per answer", n)
	}
}

// TestConcurrent judges from many goroutines at once, for the race
// detector.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	d := New(Config{MaxTargets: 3, MaxPairs: 10})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				d.Judge(fmt.Sprint("t", i%5), fmt.Sprint("r", g), page(i, 100+i))
			}
		})
	}
	wg.Wait()
}

func TestBodyDigest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		desc string
		a, b string
		same bool
	}{
		{"only a ray id differs", "<p>Ray ID: 8a1b2c3d4e5f6071</p>", "<p>Ray ID: 9f8e7d6c5b4a3921</p>", false},
		{"only digits differ", "<p>incident 123456 at 1700000000</p>", "<p>incident 987 at 1800000001</p>", true},
		{"different words", "<h1>Red shoes</h1>", "<h1>Blue shoes</h1>", false},
		{"empty against digits", "", "123", true},
		{"a digit against a letter", "a1b", "aab", false},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if same := BodyDigest([]byte(tt.a)) == BodyDigest([]byte(tt.b)); same != tt.same {
				t.Errorf("BodyDigest(%q) == BodyDigest(%q) is %v, want %v", tt.a, tt.b, same, tt.same)
			}
		})
	}
}

// FuzzSameForEveryRoute: whatever the order and timing of answers, a site
// that answers each URL with the same page through every route (each its
// own page, or one page for all) is never judged against a route.
func FuzzSameForEveryRoute(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, false, uint16(16<<10))
	f.Add([]byte{1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0}, true, uint16(17))
	f.Add([]byte{0xff, 0x10, 0x21, 0x32, 0x43}, true, uint16(0))
	f.Fuzz(func(t *testing.T, steps []byte, onePage bool, size uint16) {
		c := &clock{now: t0}
		d := New(Config{Now: c.Now, MaxTargets: 2, MaxPairs: 8})
		for i, b := range steps {
			// Each byte: the route (low 3 bits), whether the URL is
			// new (bit 3) and the seconds since the last (high bits).
			c.now = c.now.Add(time.Duration(b>>4) * 10 * time.Second)
			u := i
			if b&8 == 0 {
				u = i / 2
			}
			a := Answer{URL: uint64(u), Body: uint64(u), Size: int(size)}
			if onePage {
				a.Body = 1
			}
			if v := d.Judge(fmt.Sprint("t", b%2), fmt.Sprint("r", b&7), a); v != Valid {
				t.Fatalf("step %d: %v", i, v)
			}
		}
	})
}

// BenchmarkJudge is the cost of one answer on a busy target: 64 routes,
// one of them answering a ban page; judged on the benchmark's goroutine,
// and on a goroutine of its own, as the gateway judges each attempt's
// answer on the attempt's goroutine: what Judge's frames cost a new,
// small stack (a large one made every attempt copy its stack to grow).
func BenchmarkJudge(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		b.Run(fmt.Sprintf("fresh_goroutine=%v", fresh), func(b *testing.B) {
			c := &clock{now: t0}
			d := New(Config{Now: c.Now})
			routes := make([]string, 64)
			for i := range routes {
				routes[i] = fmt.Sprint("r", i)
			}
			done := make(chan struct{})
			b.ReportAllocs()
			for i := range b.N {
				c.now = c.now.Add(time.Millisecond)
				a := page(i, 16<<10)
				if i%64 == 0 {
					a = decoy(i)
				}
				if !fresh {
					d.Judge("shop.example", routes[i%64], a)
					continue
				}
				go func() {
					d.Judge("shop.example", routes[i%64], a)
					done <- struct{}{}
				}()
				<-done
			}
		})
	}
}

// BenchmarkBodyDigest is the cost of digesting the 16 KiB a gateway reads.
func BenchmarkBodyDigest(b *testing.B) {
	body := []byte(strings.Repeat("<p>Price: 1234 EUR, item 42</p>\n", 16<<10/32))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		BodyDigest(body)
	}
}

// FuzzBodyDigest: the digest is the hash of the body's bytes but its
// ASCII digits, however the digits cut it.
func FuzzBodyDigest(f *testing.F) {
	f.Add([]byte("<p>Price: 1234 EUR, item 42</p>"))
	f.Add([]byte("0123456789/:\x80\xb0\xb9\xff09"))
	f.Add([]byte(strings.Repeat("abcdefgh", 70) + "7"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var kept []byte
		for _, c := range body {
			if c < '0' || c > '9' {
				kept = append(kept, c)
			}
		}
		var h maphash.Hash
		h.SetSeed(seed)
		h.Write(kept)
		if got, want := BodyDigest(body), h.Sum64(); got != want {
			t.Fatalf("BodyDigest(%q) = %x, want the hash of %q, %x", body, got, kept, want)
		}
	})
}

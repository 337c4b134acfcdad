package livebench

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// oracleTie is how close to the best cost a choice counts as equal to it:
// equals share the load at random instead of one exit taking it all.
const oracleTie = 0.05

// oracleGiveUp is how long the oracle takes to give a task up: about what
// a gateway's own refusal costs a client on the loopback.
const oracleGiveUp = time.Millisecond

// errGiveUp is a router's answer for a task it will not attempt: no exit
// could carry it soon enough to be worth a worker's time.
var errGiveUp = errors.New("livebench: task given up without an attempt")

var _ router = (*oracle)(nil)

// oracle is the bound: a client that reads the world's ground truth and
// sends each attempt straight to the exit with the lowest expected time to
// the real page. It never sends to an exit that is dead, blackholed, 407,
// banned or serving a captcha for the site, or serving a penalty there.
// For rate limits and burst bans it keeps a mirror of each of the site's
// limiters, a token smaller so that its picks never trip the real ones,
// and waits for room rather than earn a 429: an exit's cost is the wait
// for room plus its latency, divided by its chance of a non-flaky answer.
//
// Throughput at a fixed number of workers is the score, and other clients
// fail a task they cannot serve in a few milliseconds and move on (a
// gateway's 503 when every route is paced, a refused connection), so the
// bound must be allowed to give up too: when the best cost is above what a
// worker's time is worth — the worker-time per attempt it has sent so far,
// the ratio-optimal threshold — it gives the task up without sending
// anything, after oracleGiveUp (about the fastest failure any client could
// have; it also keeps workers from spinning). That delay is not the fleet's
// latency: at ~100 ms a give-up would cost the oracle as much as an attempt,
// and another client's instant failure far less.
//
// That threshold prices a worker's time at its average, which is right
// while workers are what limits throughput. When the fleet's room is
// (every fast exit at its rate limit), workers are left over, giving tasks
// up one after the other, and the time of one that would only give up
// again is worth nothing: while at least oracleReserve of them are giving
// up, the oracle sends a task through the best exit that has room now,
// whatever it costs (a slow exit), and the workers still giving up are
// enough to take any room that comes free within a millisecond. It does
// not park a spare worker on room to come: that room would carry a task
// anyway.
type oracle struct {
	// Immutable after newOracle.
	world    *world
	clients  []*http.Client // one per exit
	workers  int
	quickest time.Duration // the lowest latency of a live exit, at least 1ms: worth's start

	mu      sync.Mutex
	rng     *rand.Rand       // guarded by mu
	mirrors map[pair]*mirror // guarded by mu
	start   time.Time        // guarded by mu: the first choice
	taken   int              // guarded by mu: attempts sent
	idle    int              // guarded by mu: workers waiting out a give-up
}

// oracleReserve is how many workers giving tasks up make the others'
// time worth nothing: a share of the workers, at least 2.
func oracleReserve(workers int) int { return max(2, workers/8) }

// mirror is the oracle's copy of one site's limiters for one exit.
type mirror struct {
	bucket *bucket      // nil without a rate limit
	burst  *burstWindow // nil without a burst ban
}

// newOracle is the oracle over w for a load of workers, sending through
// clients (one per exit).
func newOracle(w *world, clients []*http.Client, workers int, seed uint64) *oracle {
	o := &oracle{
		world: w, clients: clients, workers: workers, quickest: time.Hour,
		rng: rand.New(rand.NewPCG(seed, 0x0AC1E)), mirrors: make(map[pair]*mirror),
	}
	for i, s := range w.shapes {
		if !s.Dead && !s.Blackhole {
			o.quickest = min(o.quickest, max(time.Millisecond, s.Latency))
		}
		for site, r := range s.Sites {
			m := &mirror{}
			if l := r.RateLimit; l != nil {
				m.bucket = newBucket(float64(l.PerSecond), l.PerSecond-1)
			}
			if b := r.BurstBan; b != nil {
				m.burst = newBurstWindow(b.Requests-1, b.Window)
			}
			if m.bucket != nil || m.burst != nil {
				o.mirrors[pair{i, site}] = m
			}
		}
	}
	return o
}

// route implements router: the best exit, after waiting for its room, or
// errGiveUp after oracleGiveUp.
func (o *oracle) route(ctx context.Context, site string, tried []int) (*http.Client, int, error) {
	exit, wait, ok := o.choose(site, tried, time.Now())
	if !ok {
		wait = oracleGiveUp
		o.mu.Lock()
		o.idle++
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.idle--
			o.mu.Unlock()
		}()
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	if !ok {
		return nil, 0, errGiveUp
	}
	return o.clients[exit], exit, ctx.Err()
}

// worth is the most a task may cost at now: the worker-time per attempt
// sent so far. It starts as if one attempt had been sent a quickest
// latency before the first choice, so that it is finite from the start
// (an oracle that waited for anything at first would park its workers on
// far-off room) and converges within a few hundred attempts. The attempts
// in flight, one at most per worker, have spent about half their time so
// far: they count as half an attempt each, or worth would sit below the
// time an attempt takes (by a twentieth a second into the run, at 32
// workers and 100 ms) and the oracle would give up tasks a healthy exit
// could carry.
func (o *oracle) worth(now time.Time) float64 {
	if o.start.IsZero() {
		o.start = now
	}
	sent := float64(o.taken) - float64(min(o.taken, o.workers))/2
	return float64(now.Sub(o.start)+o.quickest) * float64(o.workers) / (sent + 1)
}

// choose picks the exit for the next attempt to site at now and how long
// to wait before sending, and reserves that room in the mirrors; ok is
// false when the task is better given up: its best option costs more than
// a worker's time is worth, and too few workers are idle to spare one.
// Exits already tried by the task are passed over while any other will do
// (only a flaky answer makes the oracle retry).
func (o *oracle) choose(site string, tried []int, now time.Time) (exit int, wait time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	type option struct {
		exit int
		wait time.Duration
		cost float64
	}
	var options []option
	for _, fresh := range []bool{true, false} {
		for i := range o.world.shapes {
			if fresh && slices.Contains(tried, i) {
				continue
			}
			t := o.world.truthAt(i, site, now)
			if !t.usable {
				continue
			}
			w := o.mirrors[pair{i, site}].wait(now)
			options = append(options, option{i, w, float64(w+t.latency) / t.success})
		}
		if len(options) > 0 {
			break
		}
	}
	if len(options) == 0 {
		return 0, 0, false
	}
	best := slices.MinFunc(options, func(a, b option) int { return cmp.Compare(a.cost, b.cost) }).cost
	// Within oracleTie of the worth is worth it: the worth is measured on
	// jittered attempts, and a healthy exit's nominal latency sits right
	// at it.
	if best > o.worth(now)*(1+oracleTie) {
		// A spare worker adds throughput only through room no other
		// worker will take: an exit free now, however slow. Waiting for
		// room would only take it from the next task.
		if o.idle < oracleReserve(o.workers) {
			return 0, 0, false
		}
		options = slices.DeleteFunc(options, func(c option) bool { return c.wait > 0 })
		if len(options) == 0 {
			return 0, 0, false
		}
		best = slices.MinFunc(options, func(a, b option) int { return cmp.Compare(a.cost, b.cost) }).cost
	}
	equal := slices.DeleteFunc(options, func(c option) bool { return c.cost > best*(1+oracleTie) })
	pick := equal[o.rng.IntN(len(equal))]
	o.mirrors[pair{pick.exit, site}].reserve(now, pick.wait)
	o.taken++
	return pick.exit, pick.wait, true
}

// wait is how long from now until both limiters have room; 0 for a nil
// mirror (no limits).
func (m *mirror) wait(now time.Time) time.Duration {
	if m == nil {
		return 0
	}
	var w time.Duration
	if m.bucket != nil {
		w = m.bucket.wait(now)
	}
	if m.burst != nil {
		w = max(w, m.burst.wait(now))
	}
	return w
}

// reserve spends the room of a request sent at now+wait.
func (m *mirror) reserve(now time.Time, wait time.Duration) {
	if m == nil {
		return
	}
	if m.bucket != nil {
		m.bucket.reserve(now)
	}
	if m.burst != nil {
		m.burst.arrive(now.Add(wait))
	}
}

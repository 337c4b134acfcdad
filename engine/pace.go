package engine

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pacing learned from the sites (docs/design/005-cost.md). Two kinds of
// site punish an exit for sending too much, and cooling the pair is not
// enough for either: the load it sheds lands on the other exits, which
// trip in turn.
//
//   - A site that answers 429 when an exit goes over its rate. The pair is
//     held to a rate: after its first 429, rateMargin of the rate it was
//     sending at, a guess from below (the 429 may have come of a burst);
//     after a 429 while it was held, the same, but between rateBackoff of
//     the rate it was held to and that rate: the limit is under what it
//     sent, and a pair is seldom sent all its rate allows.
//     A first 429 whose count is too young to weigh the others against
//     brakes the site for brakeFor, or until it freezes: every pair no
//     rate holds is spaced at the rate a freeze would hold it to.
//     Once enough of the exits that showed the site's limit have tripped
//     (freezeShare: firstTrip; the busiest alone may be enough), the
//     others are held too, at least to the median rate the first 429s
//     measured (PaceStart when none measured one), and so are exits new
//     to the site from then on; one that already sends as much as that
//     median showed is held where its own 429 would hold it. Those holds
//     are guesses: a guessed pair's 429 is its first, and teaches what a
//     first 429 does, and it tells the other guessed pairs that carry
//     about as much that their guesses are over the limit too. The rate
//     grows by PaceGrowth a minute while it holds traffic back, and only
//     drifts toward a rate that has tripped before.
//   - A site that bans an exit for a while once it sends more than the site
//     tolerates in a window (a 403 or captcha wave after a burst, no 429).
//     A ban that comes to the exit that sent the most, while every exit
//     that sent less is still served, says the site's tolerance lies
//     between the two; a wave of such bans of toleranceBans exits within a
//     sixth of a PaceWindow (one ban could be noise that happened to land
//     there), with no more stray bans (of exits that sent less) since it
//     began than its own, which a site banning at random would send, and
//     none of its own far under what another of them left served,
//     holds every exit under it: at most that many requests a
//     PaceWindow, spaced evenly. Once liftVolume requests went out under
//     the hold, bans at more than liftShare of them (of exits served since
//     their last ban: a ban the site has not yet lifted is the old wave's)
//     say the bans were not about the count: the hold is lifted, and not
//     learned again for PairTTL; rarer bans near the hold cut it. A wave
//     that comes before its exits' counts span a PaceWindow (a site that
//     counts over 10 s bans within seconds) is young: its count says as
//     much of a rate (the count over its span) as of a count a window,
//     and read as a count it would hold a site that takes 40 in 10 s to
//     40 a minute.
//     It holds at the count for the wave's span, while what went out
//     before leaves a window of that span, then at the rate, capped at
//     maxWide times the count: a quarter of the exits (scouts) first, the
//     rest a span later, so that a rate over the site's costs a few
//     exits' bans. A ban of what went out at the rate halves it, down to
//     the count.
//
// A pick passes over a pair that must wait as over a route at
// max_inflight, even in panic and fallback. A target gets pacing state at
// its first 429 or ban, or once it has taken watchAfter requests, so that
// what each exit sent is counted before a wave of bans: most sites never
// get one. With a store that shares pacing (PaceSharer, pace_share.go),
// the limits, the counts and the waves are the fleet's, and each process
// sends its share of every limit.

// Constants of learned pacing.
const (
	// paceMinCount requests make a count worth reading.
	paceMinCount = 3
	// A pair is held to rateMargin of the rate a 429 showed it sending
	// at, and every pair to toleranceMargin of a site's tolerance. A pair
	// that trips again while held backs off to at least rateBackoff of its
	// rate: every trip costs the pair a Retry-After, so closing in on the
	// limit from above by a tenth at a time cost more than the capacity it
	// kept (the simulator's rate-limited: 91.1% → 95.8% of tasks
	// completed).
	rateMargin      = 0.9
	rateBackoff     = 0.75
	toleranceMargin = 0.8
	// ceilingDrift is how long a rate held under one that tripped takes to
	// grow by PaceGrowth toward it.
	ceilingDrift = 10 * time.Minute
	// pressGap is the longest gap between two times a pair's rate held a
	// request back that still counts as one spell of pressure.
	pressGap = 5 * time.Second
	// A tolerance is lifted when, a PaceWindow after it was learned, more
	// than liftShare of the requests sent under it still end in a ban,
	// once liftVolume were sent.
	liftShare  = 0.02
	liftVolume = 50
	// toleranceBans bans of the exit that sent the most make a wave.
	toleranceBans = 3
	// A stray ban (learnTolerance) of an exit that sent under farStray of
	// what the busiest one still served sent is far from any count.
	farStray = 0.8
	// maxWide is the most a young wave's count is read wider.
	maxWide = 6
	// watchAfter requests to a target start counting what each exit sends.
	watchAfter = 60
	// freezeShare of the exits that showed a site's limit (firstTrip)
	// with a 429 there freeze the others: a site that limits a few exits
	// of many (their own shared IPs, say) leaves the rest free (the live
	// e_ban_and_limit pool, 5 of 20 limited: 80% → 90% of tasks
	// completed; a share of 0.5 cost the simulator's rate-limited 10% of
	// its completion). Where the 429s' counts are too young to weigh the
	// others against, freezeAfter exits and freezeShare of every exit the
	// target has seen.
	freezeAfter = 2
	freezeShare = 0.3
	// A first 429 weighs the other pairs' counts against its own pair's
	// (firstTrip) once that count holds freezeCount requests: a younger
	// one is a burst (the simulator's short-bans, seed 3: a count of 4,
	// a second after the site was first watched, froze a site that limits
	// 5 of its 20 exits, 1.000 → 0.959 of the oracle).
	freezeCount = 10
	// A guessed pair's 429 (see tell) holds the other guessed pairs that
	// carry between what it carried and tellBand times that, once its
	// count spans tellSpan, when the attempt it came to was leased after
	// the guess: a younger count shows a burst, not a rate (the first
	// second of the simulator's limits-saturated); an attempt leased
	// before the guess (or at its instant) was over the limit before the
	// freeze; a pair that carried far more without a 429 has shown a
	// higher limit (limits-everywhere, whose exits take 1 to 3
	// requests/s). A guess needs no age: on the live d_rate_limited
	// pool's stand-in a site froze at 5.19 requests/s where the limit is
	// 4, and six of its guessed pairs tripped one after another 1 to 3.5 s
	// later, none telling the rest while the guess had to be 5 s old
	// (docs/simulator-results.md, *A guessed pair's 429 tells the others
	// sooner*). A target tells at most maxTells times, as each tell scans
	// its pairs.
	tellBand = 1.5
	tellSpan = 2 * time.Second
	maxTells = 32
	// A first 429 whose count is younger than freezeCount brakes its site
	// for brakeFor (brake).
	brakeFor = time.Second
	// A pair whose count shows asMuch of what a tripped pair carried
	// carried as much (carriedAsMuch): counts of ten requests or so differ
	// by more than a tenth by chance.
	asMuch = 0.9
)

// targetPace is the pacing learned for one target. Picks read its pairs
// without a lock (pace_table.go): most pairs of even a paced target were
// never limited, and a shared lock would be contended on every draw.
type targetPace struct {
	mu    sync.Mutex // serializes writers
	pairs pairTable  // by route slot: every pair leased since the target was paced
	// holding counts the pairs in the table a rate holds (held set), as
	// markHeld and evict keep it: most watched targets never send a 429,
	// and while none holds a pair there and no tolerance holds the
	// target, a pick reads no pair. A target whose pacing is shared keeps
	// no count: another process's limit holds its pairs (adopt).
	holding atomic.Int32

	// tolerance is the requests per PaceWindow one exit may send, as
	// float64 bits (0: none learned), tolAt when it was learned, and
	// tolCeiling the fewest requests a window a ban came after, which the
	// tolerance grows toward only by a slow drift (ceilingDrift). All are
	// written under mu and read without it.
	tolerance  atomic.Uint64
	tolAt      atomic.Int64
	tolCeiling atomic.Int64
	// A tolerance learned from a young wave (the bans came before their
	// exits' counts spanned a PaceWindow) is read as the rate the wave
	// showed, tolerance and ceiling times wide (float64 bits; 0: the count
	// is read as it is): by the scouts from wideAt on, by every exit from
	// wideAll. Written under mu, read without it.
	wide     atomic.Uint64
	wideAt   atomic.Int64
	wideAll  atomic.Int64
	wideSpan time.Duration // guarded by mu: the young wave's span
	sent     int           // guarded by mu: requests sent since tolAt + PaceWindow
	bans     int           // guarded by mu: bans since tolAt + PaceWindow
	holdOff  int64         // guarded by mu: no tolerance is learned before then
	// tripped counts the exits that had a first 429 here, and firsts
	// keeps the rates the first maxFirsts of those measured.
	tripped atomic.Int32
	firsts  []float64 // guarded by mu
	// tells counts the guessed pairs' 429s that told the others (tell).
	tells atomic.Int32
	// frozen is the rate, as float64 bits, a pair new to the target is
	// held to once the target froze (0: it has not): freeze holds the
	// pairs there at that moment, and later ones start held.
	frozen atomic.Uint64
	// brakeUntil is when the target's brake ends (Unix ns; 0: none), and
	// brakeRate the rate, as float64 bits, it spaces the pairs at (brake).
	brakeUntil atomic.Int64
	brakeRate  atomic.Uint64
	// wave holds the last bans that showed a tolerance.
	wave []waveBan // guarded by mu
	// strays are when the latest toleranceBans+1 bans came to exits that
	// had sent no more than one still served (learnTolerance), oldest
	// first: enough to tell whether a wave had more of them than its own;
	// far, when those of them did that had sent under farStray of it.
	strays, far []int64 // guarded by mu

	// shared is set, for good, when the store shares pacing; procs is then
	// how many processes pace the target (0 or 1: this one alone), and sh
	// what is exchanged with them (pace_share.go).
	shared bool
	procs  atomic.Int32
	sh     targetShare // guarded by mu
}

// waveBan is a ban of the exit that sent the most: route slot had sent
// sent requests in the span its count covered (at most a PaceWindow),
// while no exit still served had sent more than most.
type waveBan struct {
	at         int64
	slot       int32
	sent, most int
	span       time.Duration
}

// pairPace is one pair's pacing: the count of what it sent, and a token
// bucket (burst 1) at the rate its 429s taught.
type pairPace struct {
	mu   sync.Mutex
	slot int32   // immutable: the route's
	rate float64 // guarded by mu: requests/s its last 429 allowed; 0 when it had none
	// held is set, for good, once rate is: picks pass a pair that was
	// never held, at a target without a tolerance, without its lock.
	held atomic.Bool
	// cut is when the rate was last set: by a 429 of the pair's, or by the
	// freeze's guess or a tell. Unix ns.
	cut int64 // guarded by mu
	// tripped is when the pair's last 429 here came, Unix ns (0: none):
	// 429s to attempts leased before it are the same penalty.
	tripped int64   // guarded by mu
	tokens  float64 // guarded by mu
	// last is when tokens was last refilled; while no rate holds the
	// pair, when it was last leased.
	last int64 // guarded by mu
	// pressed is how long, in minutes, the rate has held requests back
	// since the cut, and pressedAt when it last did: the rate grows under
	// pressure only, as a pair that takes all it is offered has no reason
	// to go nearer the limit.
	pressed   float64 // guarded by mu
	pressedAt int64   // guarded by mu
	// ceiling is the held rate the last 429 came at (0: none): the limit
	// is under it, so the rate grows toward it only by a slow drift, in
	// case the site allows more in time.
	ceiling float64 // guarded by mu
	// guess is set while the rate is the freeze's guess (freeze, newPair),
	// not what a 429 of the pair's own, or one like it, taught.
	guess bool // guarded by mu
	// sent counts the requests leased over PaceWindow (the ok side of the
	// window); since is when the count began (the end of the last 429's
	// Retry-After), so a young count is not read as a whole window's.
	sent   failWindow // guarded by mu
	since  int64      // guarded by mu
	banned int64      // guarded by mu: its last ban at the target, Unix ns
	okAt   int64      // guarded by mu: its last success there, Unix ns
	// sh is nil unless the store shares pacing (pace_share.go).
	sh *pairShare // guarded by mu
}

// markHeld notes that a rate holds p, for good. Caller holds p.mu (or
// has not yet published p).
func (tp *targetPace) markHeld(p *pairPace) {
	if !p.held.Swap(true) && !tp.shared {
		tp.holding.Add(1)
	}
}

// served reports whether the pair is served: not banned since its last
// success. Caller holds p.mu.
func (p *pairPace) served() bool { return p.banned == 0 || p.okAt > p.banned }

// rateAt is the pair's rate in force at ns, 0 when none holds it. Caller
// holds p.mu.
func (p *pairPace) rateAt(c *Config, ns int64) float64 {
	if p.rate == 0 {
		return 0
	}
	rate := p.rate
	if p.pressed != 0 {
		rate *= math.Pow(c.PaceGrowth, p.pressed)
	}
	rate = min(rate, c.PaceMax)
	// The drift toward the ceiling is a power of PaceGrowth (≥ 1) from the
	// cut on, so a rate under the ceiling's margin needs no power taken.
	if ceiling := rateMargin * p.ceiling; ceiling > 0 && (rate > ceiling || ns < p.cut) {
		rate = min(rate, ceiling*math.Pow(c.PaceGrowth, float64(ns-p.cut)/float64(ceilingDrift)))
	}
	return rate
}

// refill adds to the pair's bucket (one token at most) what rate earned
// it since it was last refilled, up to ns. Caller holds p.mu.
func (p *pairPace) refill(rate float64, ns int64) {
	if ns > p.last {
		p.tokens = min(1, p.tokens+rate*float64(ns-p.last)/float64(time.Second))
		p.last = ns
	}
}

// count returns the requests the pair sent in the window at ns, through
// every process sharing pacing, and the span they were counted over.
// Caller holds p.mu.
func (p *pairPace) count(c *Config, ns int64) (n int, span time.Duration) {
	width := int64(c.PaceWindow) / windowBuckets
	n, _ = p.sent.counts(ns, width)
	if p.sh != nil {
		others, _ := p.sh.others.counts(ns, width)
		n += others
	}
	return n, max(min(time.Duration(ns-p.since), c.PaceWindow), time.Second)
}

// peak is the pair's busiest sixth of the window at ns, through every
// process sharing pacing, in requests/s (failWindow.peak). Caller holds
// p.mu.
func (p *pairPace) peak(c *Config, ns int64) float64 {
	width := int64(c.PaceWindow) / windowBuckets
	if p.sh == nil {
		return p.sent.peak(ns, width, p.since)
	}
	all := sum(&p.sent, &p.sh.others)
	return all.peak(ns, width, p.since)
}

// sending is the rate the pair's count of n requests over span shows at
// ns: the average, or its busiest sixth of the window if more, as a 429 at
// a burst comes nearer that. Caller holds p.mu.
func (p *pairPace) sending(c *Config, ns int64, n int, span time.Duration) float64 {
	return max(float64(n)/span.Seconds(), p.peak(c, ns))
}

// ownSending is what sending shows of this process's own count, less the
// request that tripped, over span. Caller holds p.mu.
func (p *pairPace) ownSending(c *Config, ns int64, span time.Duration) float64 {
	width := int64(c.PaceWindow) / windowBuckets
	n, _ := p.sent.counts(ns, width)
	return max(float64(n-1)/span.Seconds(), p.sent.peak(ns, width, p.since))
}

// press notes that the pair's rate held a request back at ns. Caller
// holds p.mu.
func (p *pairPace) press(ns int64) {
	if gap := ns - p.pressedAt; p.pressedAt != 0 && gap > 0 && gap <= int64(pressGap) {
		p.pressed += float64(gap) / float64(time.Minute)
	}
	p.pressedAt = max(p.pressedAt, ns)
}

// rateIn is the rate a pair's token bucket runs at: the lower of its own
// (own, 0 for none) and the target's tolerance (requests a window, 0 for
// none) spread evenly over the window, divided among the processes that
// share the target's pacing; 0 when neither holds it.
func (tp *targetPace) rateIn(own, tol float64, c *Config) float64 {
	rate := own
	if tol > 0 {
		if spread := tol / c.PaceWindow.Seconds(); own == 0 || spread < own {
			rate = spread
		}
	}
	if n := tp.procs.Load(); n > 1 {
		rate /= float64(n)
	}
	return rate
}

// publish sets the free of p's cell (pace_table.go) from its bucket and
// own, its own rate now: when the bucket is next full at that rate, read
// as the picks read it alone (no tolerance, one process), a microsecond
// late for the float's rounding. A shared target's cells stay unknown:
// the processes sharing it divide the rate. Caller holds p.mu.
func (tp *targetPace) publish(p *pairPace, own float64) {
	if tp.shared {
		return
	}
	free := int64(0)
	if own > 0 && p.tokens < 1 {
		free = p.last + int64((1-p.tokens)/own*float64(time.Second)) + int64(time.Microsecond)
	}
	if cell := tp.pairs.cell(p.slot); cell != nil {
		cell.free.Store(free)
	}
}

// toleranceAt is the requests per PaceWindow one exit may send to the
// target at ns, grown by PaceGrowth a minute since it was learned; 0 when
// none is learned.
func (tp *targetPace) toleranceAt(c *Config, ns int64) float64 {
	return tp.toleranceFor(c, -1, ns)
}

// toleranceFor is toleranceAt for route slot (-1: an exit that is no
// scout), read wide where it is.
func (tp *targetPace) toleranceFor(c *Config, slot int32, ns int64) float64 {
	tol, ceiling := math.Float64frombits(tp.tolerance.Load()), tp.tolCeiling.Load()
	if wide := tp.wideFor(slot, ns); wide > 0 {
		tol, ceiling = tol*wide, int64(float64(ceiling)*wide)
	}
	return tolerance(c, tol, tp.tolAt.Load(), ceiling, ns)
}

// wideFor is how many times wider route slot reads the tolerance at ns
// (0: as it is): a young wave's scouts from wideAt, every exit from
// wideAll.
func (tp *targetPace) wideFor(slot int32, ns int64) float64 {
	wide := math.Float64frombits(tp.wide.Load())
	if wide == 0 || ns < tp.wideAll.Load() && !(scout(slot) && ns >= tp.wideAt.Load()) {
		return 0
	}
	return wide
}

// scout reports whether route slot is one of the quarter of the exits
// that try a young wave's rate before the others do, so that a rate over
// the site's costs the bans of a few exits, not of all. Every fourth slot,
// not a hash of it: a hash's quarter is lumpy in a small pool (two of
// three exits), every fourth is a quarter of any pool, rounded up, spread
// along the list.
func scout(slot int32) bool { return slot >= 0 && slot%4 == 0 }

// tolerance is a tolerance of tol requests a window learned at, after a
// ban at ceiling, as it has grown by ns.
func tolerance(c *Config, tol float64, at, ceiling, ns int64) float64 {
	if tol == 0 {
		return 0
	}
	since := float64(max(ns-at, 0))
	tol *= math.Pow(c.PaceGrowth, since/float64(time.Minute))
	return min(tol, toleranceMargin*float64(ceiling)*math.Pow(c.PaceGrowth, since/float64(ceilingDrift)))
}

// PacedError is ErrPaced with how long until the first of the target's
// routes may take a request again.
type PacedError struct {
	RetryAfter time.Duration
}

func (e *PacedError) Error() string {
	return ErrPaced.Error() + "; one is ready in " + e.RetryAfter.Round(time.Millisecond).String()
}

// Is makes errors.Is(err, ErrPaced) hold.
func (e *PacedError) Is(target error) bool { return target == ErrPaced }

// RetryAfterSeconds is a wait as an HTTP Retry-After says it: whole
// seconds, rounded up, at least one (RFC 9110 §10.2.3).
func RetryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// pair returns route slot's pacing toward the target, or nil.
func (tp *targetPace) pair(slot int32) *pairPace { return tp.pairs.get(slot) }

// pairAt returns route slot's pacing, creating it, counting from ns, when
// there is none.
func (tp *targetPace) pairAt(slot int32, ns int64) *pairPace {
	if p := tp.pair(slot); p != nil {
		return p
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if p := tp.pair(slot); p != nil {
		return p
	}
	p := tp.newPair(slot, ns)
	free := int64(0) // a new pair's bucket is full
	if tp.shared {
		free = freeUnknown
	}
	tp.pairs.add(p, free)
	return p
}

// newPair is route slot's pacing, counting from ns; held to the frozen
// rate when the target has frozen.
func (tp *targetPace) newPair(slot int32, ns int64) *pairPace {
	p := &pairPace{slot: slot, tokens: 1, last: ns, since: ns}
	if tp.shared {
		p.sh = &pairShare{}
	}
	if rate := math.Float64frombits(tp.frozen.Load()); rate > 0 {
		p.rate, p.cut, p.guess = rate, ns, true
		tp.markHeld(p)
		if p.sh != nil {
			p.sh.dirty = true
		}
	}
	return p
}

// watch returns t's pacing, allocating it: t has sent its first 429 or
// ban. Nil when learned pacing is off.
func (e *Engine) watch(t *target) *targetPace {
	if e.cfg.PaceStart < 0 {
		return nil
	}
	if tp := t.pace.Load(); tp != nil {
		return tp
	}
	tp := &targetPace{shared: e.share.sharer != nil}
	if t.pace.CompareAndSwap(nil, tp) && tp.shared {
		e.share.paced(t)
	}
	return t.pace.Load()
}

// learnRate holds route slot toward t after a 429 at ns, which came with
// the site's Retry-After, to an attempt leased at taken. A pair held to a
// rate is held to rateMargin of the rate it was sending at, no more than
// the rate it was held to, and no less than rateBackoff of that rate; or
// to half of it when it tripped before it had sent much since its last
// 429, far over the limit. A pair not held is held to rateMargin of the
// rate it was sending at, or PaceStart without a count; so is a pair the
// freeze guessed at, when that is less. Never under PaceFloor. The rate a
// 429 came at, or what the pair sent if less, becomes its ceiling, which
// the rate grows toward only by a slow drift. A 429 to an attempt leased
// before the last one came is the same penalty, not news. The count starts
// again when the Retry-After has passed.
func (e *Engine) learnRate(t *target, slot int32, ns, taken int64, retryAfter time.Duration) {
	tp := e.watch(t)
	if tp == nil {
		return
	}
	p := tp.pairAt(slot, ns)
	p.mu.Lock()
	if taken < p.tripped {
		p.mu.Unlock()
		return
	}
	n, span := p.count(&e.cfg, ns)
	n-- // the request that tripped
	// The 429 came at a burst, not at the average: the busiest sixth of
	// the window is nearer the rate that tripped.
	sent := p.sending(&e.cfg, ns, n, span)
	// Read once, under p.mu, which unblind takes after the count changes
	// it: a limit learned blind is one unblind will find.
	procs := tp.procs.Load()
	if p.sh != nil && procs > 1 {
		// The others' count is an exchange old or more, short of what
		// they sent since: with the load spread over the processes (a
		// balancer before them), the site saw procs times this one's.
		sent = max(sent, float64(procs)*p.ownSending(&e.cfg, ns, span))
	}
	held := p.rateAt(&e.cfg, ns)
	measured := held == 0 && n >= paceMinCount
	switch {
	case held > 0 && n < paceMinCount:
		p.rate = held / 2
	case held > 0 && p.guess:
		// Held by the freeze's guess, the site's typical rate, not by a
		// 429 of its own: this is its first, and what it sent says more
		// of its limit than the guess (docs/design/005-cost.md).
		p.rate = min(rateBackoff*held, rateMargin*sent)
	case held > 0:
		// A pair is seldom sent all its rate allows: the limit is under
		// what it sent, which may be far under its rate, and backing off
		// from the rate alone left it over the limit, to trip again, or
		// far under it for the minutes growth takes (docs/design/005-cost.md).
		p.rate = max(rateBackoff*held, rateMargin*min(held, sent))
	case n >= paceMinCount:
		p.rate = rateMargin * sent
	default:
		p.rate = e.cfg.PaceStart
	}
	p.rate = min(max(p.rate, e.cfg.PaceFloor), e.cfg.PaceMax)
	tp.markHeld(p)
	p.ceiling = held
	if held > 0 {
		p.ceiling = max(p.rate/rateMargin, min(held, sent))
	}
	taught := 0.0 // the rate a first 429 measured, for the site's median
	if measured {
		taught = p.rate
	}
	// Shared, before the store said how many processes pace the target,
	// a count is this process's alone: a rate from it, or from a share
	// learned so, is this process's share (unblind). PaceStart is no
	// count's.
	uncounted := p.sh != nil && procs == 0
	blind := uncounted && (n >= paceMinCount || p.sh.blind)
	tell := p.guess && n >= paceMinCount && span >= tellSpan && taken > p.cut && !blind
	carried, rate := float64(n)/span.Seconds(), p.rate
	p.guess = false
	base := p.cut
	p.cut, p.tripped, p.tokens, p.last = ns, ns, 0, ns
	p.pressed, p.pressedAt = 0, 0
	p.sent, p.since = failWindow{}, ns+int64(retryAfter)
	if sh := p.sh; sh != nil {
		// A new epoch: the fleet's count of the pair restarts too.
		sh.reported, sh.others = failWindow{}, failWindow{}
		sh.epoch, sh.base, sh.first = ns, base, held == 0 || sh.blind && sh.first
		sh.blind, sh.dirty = blind, !blind
	}
	tp.publish(p, p.rateAt(&e.cfg, ns))
	p.mu.Unlock()
	share := 0.0 // what the pair sent here, when that is a share of what the site saw (brake)
	if uncounted {
		share = rateMargin * sent
	}
	if blind {
		// Neither handed on nor weighed until unblind makes it the
		// fleet's: the others would hold the pair to this share of it,
		// and the freeze every exit.
		if held == 0 {
			tp.brake(&e.cfg, ns, share)
		}
		return
	}
	// The freeze locks the other pairs: not while holding this one, which
	// a freeze of theirs would lock.
	if held == 0 {
		weighed := carried
		if n < freezeCount {
			weighed = 0 // a burst, not a rate to weigh the others' against
		}
		tp.firstTrip(&e.cfg, slot, taught, weighed, ns)
		if weighed == 0 {
			tp.brake(&e.cfg, ns, share)
		}
	}
	if tell {
		tp.tell(&e.cfg, slot, carried, rate, ns)
	}
}

// tell holds the target's other guessed pairs (freeze) that carry between
// carried and tellBand × carried requests/s to rate, when a guessed pair,
// route slot, had a 429 at ns having carried carried, which held it to
// rate. The freeze guessed their holds as it guessed the tripped pair's:
// one that carries as much is as near the site's limit, and would trip
// in turn, each trip shedding its load onto the rest for a Retry-After
// (the simulator's rate-limited, where exits taking 3 requests/s were
// frozen at 4 and tripped in a cascade, 20 of 30 within 8 s). Its hold
// becomes its ceiling, being over the limit. One that carries less has
// shown nothing of its limit, one that carries far more has shown a
// higher one, and keep their guesses. They are held to no more than the
// most any of them carries, tellBand × carried: a 429 that came at a
// burst taught the tripped pair a rate from its busiest sixth of the
// window, over what it carried, and a hold over what the told pairs carry
// would let them climb to a rate that trips (the simulator's
// rate-limited, seed 3: exits that take 3 requests/s told to 3.6, a dozen
// trips in the next 5 s, 96.7% of its tasks completed; 99.7% held so).
func (tp *targetPace) tell(c *Config, slot int32, carried, rate float64, ns int64) {
	if tp.tells.Add(1) > maxTells {
		return
	}
	rate = min(rate, tellBand*carried)
	tp.pairs.each(func(q *pairPace) {
		if q.slot == slot {
			return
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if !q.guess {
			return
		}
		n, span := q.count(c, ns)
		own, sends := q.rateAt(c, ns), float64(n)/span.Seconds()
		if own <= rate || sends < carried || sends > tellBand*carried {
			return
		}
		// The tokens earned at the rate it leaves are its to keep (picks
		// that found its bucket full left it unfilled: pace_table.go).
		if held := tp.rateIn(own, tp.toleranceFor(c, q.slot, ns), c); held > 0 {
			q.refill(held, ns)
		}
		base := q.cut
		q.rate, q.ceiling, q.guess = rate, own, false
		q.cut, q.pressed, q.pressedAt = ns, 0, 0
		if q.sh != nil {
			q.sh.base, q.sh.first, q.sh.dirty = base, false, true
		}
		tp.publish(q, q.rateAt(c, ns))
	})
}

// maxFirsts first 429s of a target are kept for the rate they taught.
const maxFirsts = 32

// firstTrip notes the first 429 of route slot here, which measured rate
// (0: too few requests to tell) after the pair carried carried requests/s
// (0: unknown, a 429 another process heard), and freezes the target once
// freezeShare of the pairs that showed anything of the site's limit have
// had theirs. Those are the pairs that tripped, and the ones that carried
// about as much as this one without a 429, which showed a higher limit (the
// live e_ban_and_limit pool, whose unlimited exits carry what its limited
// ones tripped at); one that carried less showed nothing. The busiest
// exit's 429 may freeze the site alone: waiting for a second exit's left
// that one to trip too, and shed its load onto the rest for its
// Retry-After (the simulator's limits-roomy and the live i_roomy_limits
// pool's stand-in; docs/simulator-results.md). Counted over every pair the
// target has, a site that limits every exit froze only once 30% of them
// had tripped, one after another (the same stand-in: 12 trips in 4 s,
// 0.85 → 0.91 of the oracle over 15 s). Only the first maxFirsts 429s of
// a target count the pairs that showed its limit; later ones, and heard
// ones, count every pair, and freeze once freezeAfter exits tripped.
func (tp *targetPace) firstTrip(c *Config, slot int32, rate, carried float64, ns int64) {
	shown := -1       // the pairs that showed the site's limit; -1: every pair
	after := int32(1) // the exits that must trip before the site freezes
	if n := tp.tripped.Load() + 1; carried > 0 && n <= maxFirsts && tp.frozen.Load() == 0 {
		shown = int(n) + tp.carriedAsMuch(c, slot, carried, ns)
	}
	tp.mu.Lock()
	if rate > 0 && len(tp.firsts) < maxFirsts {
		tp.firsts = append(tp.firsts, rate)
	}
	site := median(tp.firsts)
	freezing := false
	if shown < 0 {
		shown, after = tp.pairs.n, freezeAfter
	}
	if n := tp.tripped.Add(1); n >= after && float64(n) >= freezeShare*float64(shown) {
		// Set under mu, which newPair holds: a pair made from now on
		// starts held, and one made before is in the table for freeze,
		// which runs once. Without a measured rate, a new pair starts as
		// one whose first 429 came too soon to measure: at PaceStart.
		freezing = tp.frozen.Swap(math.Float64bits(startRate(c, site))) == 0
	}
	tp.mu.Unlock()
	if freezing {
		tp.brakeUntil.Store(0) // the freeze holds every pair
		tp.freeze(c, slot, site, ns)
	}
}

// brake spaces every pair of the target that no rate holds at the rate a
// freeze would hold it to, from its last request, for brakeFor from ns
// unless the target freezes meanwhile: a first 429 came whose count is too
// young to weigh the others' against (firstTrip), and the target did not
// freeze. Such a 429 comes at a burst, when every exit of a site may be
// going as fast as the one that tripped, each into its own 429 a moment
// later (the live d_rate_limited pool's stand-in: 28 of its 42 429s in
// the first 1.1 s, 17 of them to attempts leased after their site's
// first 429; docs/simulator-results.md, *A brake at a young first 429*).
// A site that limits a few exits of many is braked for a second, its
// other exits no more than spaced.
//
// share, when not 0, is rateMargin of what the tripped pair sent through
// this process, before the store said how many processes pace the target
// (learnRate): a share of what the site saw. A fleet's first 429s come
// before any process has the others' counts, and spacing each process's
// pairs at a rate for the whole site let two gateways send twice it (the
// live d_rate_limited pool run by two: 26 of their 44 429s in the first
// second, against one gateway's 3 of 24; 16 and 17 of 30 and 26 spaced
// at their shares). The brake spaces the pairs at the least share while
// it holds; once the processes are counted, brakeWait gives each its
// share of the rate.
func (tp *targetPace) brake(c *Config, ns int64, share float64) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.frozen.Load() != 0 {
		return
	}
	rate := startRate(c, median(tp.firsts))
	if share > 0 {
		rate = startRate(c, share)
		if tp.braked(ns) {
			rate = min(rate, math.Float64frombits(tp.brakeRate.Load()))
		}
	}
	tp.brakeRate.Store(math.Float64bits(rate))
	tp.brakeUntil.Store(ns + int64(brakeFor))
}

// braked reports whether the target's brake holds at ns.
func (tp *targetPace) braked(ns int64) bool { return ns < tp.brakeUntil.Load() }

// brakeWait is how long the pair in cell must wait at ns while its
// target is braked: 0 when it may go now, when a rate of its own holds
// it, or when no brake does.
func (tp *targetPace) brakeWait(cell *pairCell, ns int64) time.Duration {
	if !tp.braked(ns) {
		return 0
	}
	p := cell.p.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate != 0 {
		return 0
	}
	// last is when an unheld pair was last leased (takePace). The
	// processes sharing the target each take their share of the rate.
	rate := math.Float64frombits(tp.brakeRate.Load())
	if n := tp.procs.Load(); n > 1 {
		rate /= float64(n)
	}
	free := p.last + int64(float64(time.Second)/rate)
	return time.Duration(max(free-ns, 0))
}

// startRate is the rate a freeze holds a pair new to the target to, the
// first 429s there having measured site (the median; 0: none measured).
func startRate(c *Config, site float64) float64 {
	if site == 0 {
		site = c.PaceStart
	}
	return min(max(site, c.PaceFloor), c.PaceMax)
}

// carriedAsMuch counts the target's pairs that no rate holds, but slot,
// whose count shows at least asMuch × carried requests/s at ns: short
// counts differ by a tenth by chance (the simulator's short-bans, seed 3,
// with the brake: the fifth of the 5 exits of 20 its search.example
// limits tripped having carried 4.01 requests/s, and the four of the
// other fifteen whose counts showed 3.60 to 3.96 left it frozen, 1.000 →
// 0.953 of the oracle). It locks each pair in turn: not to be called
// holding one, or tp.mu.
func (tp *targetPace) carriedAsMuch(c *Config, slot int32, carried float64, ns int64) int {
	more := 0
	tp.pairs.each(func(q *pairPace) {
		if q.slot == slot {
			return
		}
		q.mu.Lock()
		if n, span := q.count(c, ns); q.rate == 0 && float64(n)/span.Seconds() >= asMuch*carried {
			more++
		}
		q.mu.Unlock()
	})
	return more
}

// median is the median of xs (the lower of the middle two), 0 for none;
// it does not reorder xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var buf [maxFirsts]float64
	s := append(buf[:0], xs...)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// freeze holds every other pair of the target not held yet, when the
// target freezes (firstTrip): the site limits exits broadly, and the load
// the limited ones shed must not pile onto the others until they trip in
// turn. Each is held to the rate a pair new to the target starts at:
// site, the median rate the first 429s here taught, or PaceStart when
// none taught one. An exit the picks had kept nearly idle is no more
// limited than the typical one that tripped, and holding it near the
// floor would leave the site's capacity unused for the many minutes
// growth takes (the simulator's rate-limited, whose first 429s come too
// soon to measure: exits that take 3 requests/s held to 2 for minutes,
// p95 1.01 → 0.83 s over seeds 1–16). A pair that already sends as much
// as the typical one that tripped is held where its own 429 would hold
// it, rateMargin of that rate (the simulator's limits-saturated, where
// every exit sends at its limit from the start). What a pair sent
// without a 429 says no more than that of its limit: held at twice its
// busiest sixth of the window, as they once were, the pairs that carried
// a little less than the ones that tripped went over the limit at once
// and tripped in turn, each out for its Retry-After (the simulator's
// limits-roomy: 0.92 → 0.95 of the oracle; docs/simulator-results.md);
// twice a count younger than 5 s, a burst, held exits that take 3
// requests/s at 6 and 8 (rate-limited, seed 10). Its bucket starts with
// what the rate would have earned since its last request, not full: the
// freeze comes in a burst that spent the site's allowance, and a full
// token sent each pair at once into its own 429 (the live
// d_rate_limited pool's stand-in). Each grows from there under
// pressure, finding its own limit without a cascade; the holds are
// guesses (learnRate, tell).
func (tp *targetPace) freeze(c *Config, tripped int32, site float64, ns int64) {
	start := math.Float64frombits(tp.frozen.Load()) // where a new pair starts
	tp.pairs.each(func(q *pairPace) {
		if q.slot == tripped {
			return
		}
		q.mu.Lock()
		if q.rate == 0 {
			q.rate = start
			n, span := q.count(c, ns)
			if site > 0 && n >= paceMinCount {
				if own := rateMargin * q.sending(c, ns, n, span); own >= site {
					q.rate = own
				}
			}
			q.rate = min(max(q.rate, c.PaceFloor), c.PaceMax)
			q.guess = true
			tp.markHeld(q)
			q.tokens = 0
			q.refill(tp.rateIn(q.rate, tp.toleranceFor(c, q.slot, ns), c), ns)
			q.cut, q.pressed, q.pressedAt = ns, 0, 0
			if q.sh != nil {
				q.sh.base, q.sh.first, q.sh.dirty = 0, false, true
			}
			tp.publish(q, q.rateAt(c, ns))
		}
		q.mu.Unlock()
	})
}

// learnTolerance weighs a ban of route slot at t at ns (a 403 or a captcha
// page) to an attempt leased at taken: evidence of the site's tolerance
// when slot had sent more than any pair still served, evidence against a
// tolerance already learned when bans go on under it.
func (e *Engine) learnTolerance(t *target, slot int32, ns, taken int64) {
	tp := e.watch(t)
	if tp == nil {
		return
	}
	window := int64(e.cfg.PaceWindow)
	p := tp.pairAt(slot, ns)
	p.mu.Lock()
	n, span := p.count(&e.cfg, ns)
	// A ban another process saw counts: the site bans the exit, whoever
	// sends through it.
	recent := p.banned != 0 && ns-p.banned < window
	// Not served since its last ban: the site has not let the exit back
	// yet, whatever it sent since.
	unserved := !p.served()
	p.banned = max(p.banned, ns)
	p.mu.Unlock()

	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tol := tp.toleranceAt(&e.cfg, ns); tol > 0 {
		if tp.wide.Load() != 0 {
			// A young wave's reading: a ban of what went out wide says
			// that was over what the site takes. Half as wide, from a
			// span on, when what went out at it has left a window of the
			// wave's span; near the count, the count, held afresh. Bans
			// of what went out before are no news of the reading.
			if wide := tp.wideFor(slot, taken); wide > 0 && !recent && n > paceMinCount {
				if wide /= 2; wide < 1.5 {
					wide = 0
					tp.tolAt.Store(ns)
					tp.sent, tp.bans = 0, 0
				}
				tp.widen(wide, ns)
			}
			return
		}
		if ns-tp.tolAt.Load() <= window || unserved {
			// A ban of what was sent before the hold, or of an exit the
			// site still punishes for it (its cooldown over before the
			// site's penalty): no news of whether the hold holds.
			return
		}
		tp.bans++
		switch {
		case tp.sent+tp.bans < liftVolume:
		case float64(tp.bans) > liftShare*float64(tp.sent+tp.bans):
			// Bans the hold did not stop: not the site counting.
			tp.tolerance.Store(0)
			tp.holdOff = ns + int64(e.cfg.PairTTL)
			tp.changed(ns)
		case float64(n) >= tol/2 && !recent:
			// A rare ban near the hold: it has grown past the site's
			// tolerance, which is under what this exit sent.
			tp.hold(ns, n, n)
		}
		return
	}
	// A pair banned again soon after its last ban, or before it sent
	// much, says nothing of what the site tolerates.
	if recent || n <= paceMinCount || ns < tp.holdOff {
		return
	}
	most := 0 // the most a pair still served sent in the window
	tp.pairs.each(func(q *pairPace) {
		if q.slot == slot {
			return
		}
		q.mu.Lock()
		if q.served() {
			m, _ := q.count(&e.cfg, ns)
			most = max(most, m)
		}
		q.mu.Unlock()
	})
	if most >= n {
		// Others sent as much and are served: not the count. A stray ban,
		// which a site banning at random sends too.
		tp.strays = keepLatest(tp.strays, ns)
		if float64(n) < farStray*float64(most) {
			tp.far = keepLatest(tp.far, ns)
		}
		return
	}
	if tp.shared {
		tp.sh.bans = append(tp.sh.bans, PaceBan{Route: slot, Target: t.n, At: ns, Sent: int32(min(n, math.MaxInt32)), Most: int32(min(most, math.MaxInt32))})
	}
	tp.addBan(&e.cfg, waveBan{at: ns, slot: slot, sent: n, most: most, span: span}, ns)
}

// keepLatest appends ns to times, keeping the latest toleranceBans+1.
func keepLatest(times []int64, ns int64) []int64 {
	if len(times) > toleranceBans {
		times = append(times[:0], times[1:]...)
	}
	return append(times, ns)
}

// addBan adds b, a ban of the exit that sent the most, to the wave, and
// holds every exit when it makes one: toleranceBans bans of distinct exits
// within a sixth of the window. Caller holds tp.mu.
func (tp *targetPace) addBan(c *Config, b waveBan, ns int64) {
	window := int64(c.PaceWindow)
	newest := b.at
	for _, w := range tp.wave {
		newest = max(newest, w.at)
	}
	tp.wave = slices.DeleteFunc(tp.wave, func(w waveBan) bool { return w.slot == b.slot || newest-w.at > window/windowBuckets })
	if newest-b.at > window/windowBuckets {
		return
	}
	tp.wave = append(tp.wave, b)
	if len(tp.wave) < toleranceBans {
		return
	}
	// Bans at random (a noisy firewall's 403s) land most on the busiest
	// exit too, and now and then on it three times running; but as many
	// again land on exits that sent less. A wave with more stray bans
	// than its own since it began is not a count; nor is one that came
	// after strays far under the busiest exit's count within the window,
	// which a site that counts does not send: it bans at its tolerance,
	// give or take the edges of its window, those it bans near the top of
	// the counts (the simulator's burst-bans: strays at 18 to 21 where the
	// most served sent 19 to 21), where a site banning at random bans
	// anywhere (flaky-403: 20 to 55 where the most sent 52 to 73, in the
	// half minute before a wave of three that came with three strays,
	// which held every exit for a hundred seconds, p95 3.2 s).
	oldest, strays := tp.wave[0].at, 0
	for _, w := range tp.wave {
		oldest = min(oldest, w.at)
	}
	for _, at := range tp.strays {
		if at >= oldest {
			strays++
		}
	}
	for _, at := range tp.far {
		if at < oldest && ns-at <= window {
			strays++
		}
	}
	if strays > len(tp.wave) {
		tp.wave = tp.wave[:0]
		return
	}
	// The site tolerates at least what any served exit sent and less than
	// any banned one: hold every exit under what the evidence allows, and
	// let growth probe up.
	tolerated, banned, span := 0, math.MaxInt, time.Duration(0)
	for _, w := range tp.wave {
		tolerated, banned, span = max(tolerated, w.most), min(banned, w.sent), max(span, w.span)
	}
	tp.wave = tp.wave[:0]
	if float64(banned) < farStray*float64(tolerated) {
		// The wave's own bans disagree on the count: one came to an exit
		// far under what another left served, which a site that counts
		// does not do and one banning at random does. Held, a pool of five
		// exits before a site that 403s 2% of requests at random kept a
		// twentieth of its throughput (a wave banned at 25 with 76 served:
		// a hold at a third of what the site took, and each later random
		// ban cut it again).
		return
	}
	tp.hold(ns, max(tolerated, banned/2), banned)
	if span < c.PaceWindow && !tp.shared {
		// A young wave: whether the site counts over the span the wave
		// showed or over a whole window, the exits were banned at that
		// rate. The count holds them while what they sent before the
		// hold passes out of a window of that span; then the rate does,
		// until a ban of what it let out says the site's window is longer
		// (learnTolerance). Not where pacing is shared, whose processes
		// would not know to fall back.
		tp.wideSpan = max(span, c.PaceWindow/windowBuckets)
		tp.widen(min(float64(c.PaceWindow)/float64(span), maxWide), ns)
	}
}

// widen reads the tolerance wide times wider (0: as it is) once a young
// wave's span has passed since ns, first for the scouts, a span later for
// every exit. Caller holds tp.mu.
func (tp *targetPace) widen(wide float64, ns int64) {
	tp.wide.Store(math.Float64bits(wide))
	tp.wideAt.Store(ns + int64(tp.wideSpan))
	tp.wideAll.Store(ns + 2*int64(tp.wideSpan))
	tp.changed(ns)
}

// hold holds every exit of the target under toleranceMargin of tolerated
// requests a window, a ban having come after banned. Caller holds tp.mu.
func (tp *targetPace) hold(ns int64, tolerated, banned int) {
	tp.wide.Store(0)
	tp.tolAt.Store(ns)
	tp.tolCeiling.Store(int64(banned))
	tp.tolerance.Store(math.Float64bits(max(toleranceMargin*float64(tolerated), 1)))
	tp.sent, tp.bans = 0, 0
	tp.changed(ns)
}

// served notes a success of route slot at t at ns, for learnTolerance.
func (e *Engine) served(t *target, slot int32, ns int64) {
	if tp := t.pace.Load(); tp != nil {
		if p := tp.pair(slot); p != nil {
			p.mu.Lock()
			p.okAt = max(p.okAt, ns)
			p.mu.Unlock()
		}
	}
}

// paceWait is how long route slot must wait before it may take a request
// toward t at ns: 0 when it may now.
func (e *Engine) paceWait(t *target, slot int32, ns int64) time.Duration {
	tp := t.pace.Load()
	if tp == nil {
		return 0
	}
	tol := tp.toleranceFor(&e.cfg, slot, ns)
	if tol == 0 && !tp.shared && tp.holding.Load() == 0 {
		return 0 // no rate holds any pair here
	}
	cell := tp.pairs.cell(slot)
	if cell == nil {
		return 0 // a pair not leased since the target was paced owes nothing
	}
	if wait := tp.brakeWait(cell, ns); wait > 0 {
		return wait
	}
	if tol == 0 && ns >= cell.free.Load() {
		return 0 // most picks of a paced target: a full bucket, or none
	}
	p := cell.p.Load()
	if tol == 0 && !p.held.Load() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var wait time.Duration
	own := p.rateAt(&e.cfg, ns)
	if rate := tp.rateIn(own, tol, &e.cfg); rate > 0 {
		p.refill(rate, ns)
		if p.tokens < 1 {
			if own > 0 {
				p.press(ns)
			}
			wait = time.Duration((1 - p.tokens) / rate * float64(time.Second))
		}
	}
	if tol > 0 {
		if n, _ := p.count(&e.cfg, ns); float64(n) >= tol {
			// Full for this window (it sent more before the tolerance was
			// learned): wait for its oldest bucket to pass.
			width := int64(e.cfg.PaceWindow) / windowBuckets
			wait = max(wait, time.Duration(width-ns%width))
		}
	}
	if wait > 0 {
		return max(wait, time.Nanosecond)
	}
	return 0
}

// A route held to a learned rate is worth waiting for, instead of taking
// a route ready now, when the ready one's latency is over reserveSaving
// times the wait and the held one's latency together, and the wait is at
// most reserveShare of the held one's latency (worthWaiting).
const (
	reserveSaving = 2
	reserveShare  = 0.5
)

// worthWaiting reports whether a request for t at ns should reserve the
// next token of route paced, held to a learned rate and ready in wait,
// rather than take route ready. A pair held to one token at a time is
// passed over for 1/rate after each request, and when every fast exit of
// a busy site is between two of its requests the pick fell to a slow exit
// that had room, holding a worker for its whole second (the simulator's
// limits-roomy: 0.81 of the oracle; docs/simulator-results.md). Waiting
// costs the worker the wait: worth it when the ready route is much slower
// (reserveSaving) and the wait short beside the held route's own latency
// (reserveShare: where every pair waits most of the time, as on a site
// that limits every exit below the demand, a held worker would have
// fetched another site's page). A pair takes one reservation at a time,
// its wait within one turn of its rate: past that the site has no room a
// wait would find.
func (e *Engine) worthWaiting(t *target, paced int32, wait time.Duration, ready int32, ns int64) bool {
	w, pacedLat, readyLat := wait.Seconds(), e.latency(paced, ns), e.latency(ready, ns)
	if w > reserveShare*pacedLat || readyLat <= reserveSaving*(w+pacedLat) {
		return false
	}
	tp := t.pace.Load()
	if tp == nil {
		return false
	}
	p := tp.pair(paced)
	if p == nil {
		return false
	}
	p.mu.Lock()
	rate := tp.rateIn(p.rateAt(&e.cfg, ns), tp.toleranceFor(&e.cfg, paced, ns), &e.cfg)
	p.mu.Unlock()
	return rate > 0 && w <= 1/rate
}

// takePace counts a lease of route slot toward t at ns and spends its
// token (going into debt for a reservation: worthWaiting).
func (e *Engine) takePace(t *target, slot int32, ns int64) {
	tp := t.pace.Load()
	if tp == nil {
		return
	}
	tol := tp.toleranceFor(&e.cfg, slot, ns)
	p := tp.pairAt(slot, ns)
	p.mu.Lock()
	own := p.rateAt(&e.cfg, ns)
	if rate := tp.rateIn(own, tol, &e.cfg); rate > 0 {
		p.refill(rate, ns)
		p.tokens--
	} else {
		p.last = ns // a freeze fills its bucket from here
	}
	// Published for a pair no rate holds too: a table built by a grow
	// starts its cell unknown, and every pick would ask the pair.
	tp.publish(p, own)
	p.sent.add(true, ns, int64(e.cfg.PaceWindow)/windowBuckets)
	p.mu.Unlock()
	if tol > 0 && ns-tp.tolAt.Load() > int64(e.cfg.PaceWindow) {
		tp.mu.Lock()
		tp.sent++
		tp.mu.Unlock()
	}
}

// evict forgets, at Sweep's eviction pass, the pairs that sent nothing for
// a window and are held by no rate of their own (or were not pressed for
// PairTTL), and a tolerance grown past PaceMax requests a window, so a
// site's record of exits it once limited does not grow for ever.
func (tp *targetPace) evict(c *Config, ns int64) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.toleranceAt(c, ns) >= c.PaceMax*c.PaceWindow.Seconds() {
		tp.tolerance.Store(0)
	}
	idle := make(map[*pairPace]bool)
	var released int32 // idle pairs marked held: no longer in the table
	tp.pairs.each(func(p *pairPace) {
		p.mu.Lock()
		held := p.rate > 0 && p.rateAt(c, ns) < c.PaceMax && ns-max(p.pressedAt, p.cut) < int64(c.PairTTL)
		if n, _ := p.count(c, ns); !held && n == 0 {
			idle[p] = true
			if p.held.Load() && !tp.shared {
				released++
			}
		}
		p.mu.Unlock()
	})
	if len(idle) > 0 {
		tp.pairs.remove(func(p *pairPace) bool { return idle[p] })
		tp.holding.Add(-released)
	}
}

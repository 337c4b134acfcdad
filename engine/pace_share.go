package engine

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Learned pacing shared by the processes of one store (PaceSharer). A site
// sees an exit's total, not what each gateway sent through it, so with
// shared state the limits learned from its 429s and bans, and the counts
// they are learned from, are the fleet's:
//
//   - Limits are exchanged: a pair's held rate and a target's tolerance,
//     as PairLimit and TargetLimit, and merged by one rule (Supersedes): a
//     limit learned by a process that knew the current one replaces it;
//     two learned concurrently, neither knowing the other, merge to the
//     stricter. Rates and tolerances are the fleet's, never per process.
//   - Counts are summed: what each pair sent in each bucket of the
//     PaceWindow is handed to the store on Sweep, and the other processes'
//     totals come back, tagged with the pair's epoch (its last 429) so a
//     count the site already punished is not read again. Tolerance
//     learning, the count guard and the rate a 429 teaches read the sums.
//     The others' part is an exchange or two old: a 429 weighs at least
//     P times this process's own count (P processes pacing the target),
//     and one that comes before P is known (a count of one, unless no
//     other process is alive, is believed only after soloExchanges)
//     teaches this process's share, kept here until P comes (unblind).
//   - Bans that may show a tolerance (the exit that sent the most) are
//     exchanged, so a wave seen half by one process and half by another is
//     a wave; so are a pair's last ban and last success, so an exit banned
//     through one process is not taken as served by another.
//   - Each process sends its share: with P live processes pacing a target,
//     a pair held to R is held to R/P here, and a tolerance of T a window
//     spreads T/P here. The count guard compares the fleet's count with
//     the whole T.
//
// The store counts a process as pacing a target when it heartbeated
// lately and sent there within the window; uneven load across gateways
// then leaves some of a limit unused (all the demand on one of P gateways
// gets R/P), never more than the limit sent: the shares sum to at most the
// highest rate any process holds the pair to, plus what the counts lag
// (one exchange, about a second) when a process joins. Out of reach of the
// others, the store says so (PaceNews.Alone) and every process paces
// alone, on its own counts, with the whole of every limit.

// PairLimit is the rate one route×target pair is held to, as processes
// sharing pacing exchange it. A zero Rate is no limit.
type PairLimit struct {
	Route  int32 // the route's slot in the engine that hands or takes it
	Target int32 // the target's number there
	// Rate is the requests/s the pair may send, all processes together,
	// at Cut; Ceiling the held rate a 429 came at (0: none), which it
	// drifts toward only slowly.
	Rate, Ceiling float64
	Cut           int64 // when it was learned, Unix ns
	Base          int64 // the Cut of the limit it replaced (0: none)
	// Epoch is when the pair's count last restarted (its last 429; 0:
	// never), which tags its counts; Since is when the count is read from
	// (the end of that 429's Retry-After).
	Epoch, Since int64
	// First says the limit came of the pair's first 429, which counts
	// toward freezing the target's other exits.
	First bool
}

// Supersedes reports whether l replaces cur, the limit held for the same
// pair. A limit learned knowing cur (its Base is cur's Cut or later)
// replaces it; one cur was learned knowing is stale; two learned
// concurrently merge to the stricter. For two different limits exactly one
// supersedes the other, so every process and the store agree on a winner
// whatever order they hear of them.
func (l PairLimit) Supersedes(cur PairLimit) bool {
	switch {
	case l == cur || l.Rate == 0:
		return false
	case cur.Rate == 0:
		return true
	case l.Cut > cur.Cut && l.Base >= cur.Cut:
		return true
	case cur.Cut > l.Cut && cur.Base >= l.Cut:
		return false
	}
	// Concurrent: the lower rate, then the tighter ceiling, then a total
	// order on the rest so that the choice is the same everywhere.
	switch {
	case l.Rate != cur.Rate:
		return l.Rate < cur.Rate
	case l.Ceiling != cur.Ceiling:
		return orNone(l.Ceiling) < orNone(cur.Ceiling)
	case l.Cut != cur.Cut:
		return l.Cut > cur.Cut
	case l.Epoch != cur.Epoch:
		return l.Epoch > cur.Epoch
	case l.Since != cur.Since:
		return l.Since > cur.Since
	case l.Base != cur.Base:
		return l.Base > cur.Base
	}
	return l.First && !cur.First
}

// TargetLimit is a target's learned tolerance, as processes sharing
// pacing exchange it. A zero At is none; a zero Tolerance with an At is a
// tolerance lifted at At.
type TargetLimit struct {
	Target int32
	// Tolerance is the requests per PaceWindow one exit may send, all
	// processes together, at At; Ceiling the fewest requests a window a
	// ban came after.
	Tolerance float64
	Ceiling   int64
	At        int64 // when it was learned, cut or lifted, Unix ns
	Base      int64 // the At of the limit it replaced (0: none)
	HoldOff   int64 // lifted: no tolerance is learned before then
}

// Supersedes reports whether l replaces cur, the limit held for the same
// target, by PairLimit.Supersedes's rule; a lift is the loosest of two
// concurrent limits.
func (l TargetLimit) Supersedes(cur TargetLimit) bool {
	switch {
	case l == cur || l.At == 0:
		return false
	case cur.At == 0:
		return true
	case l.At > cur.At && l.Base >= cur.At:
		return true
	case cur.At > l.At && cur.Base >= l.At:
		return false
	}
	switch {
	case l.Tolerance != cur.Tolerance:
		return orNone(l.Tolerance) < orNone(cur.Tolerance)
	case l.Ceiling != cur.Ceiling:
		return l.Ceiling < cur.Ceiling
	case l.At != cur.At:
		return l.At > cur.At
	case l.HoldOff != cur.HoldOff:
		return l.HoldOff > cur.HoldOff
	}
	return l.Base > cur.Base
}

// orNone reads a limit of 0 as none: looser than any.
func orNone(v float64) float64 {
	if v == 0 {
		return math.Inf(1)
	}
	return v
}

// PaceBan is a ban of the exit that sent the most at a target (Sent
// requests in the window, while no exit still served had sent more than
// Most): one of the wave of bans a tolerance is learned from.
type PaceBan struct {
	Route, Target int32
	At            int64
	Sent, Most    int32
}

// PairSeen is a pair's last ban at its target and its last success there
// (Unix ns): an exit banned since its last success is not served.
type PairSeen struct {
	Route, Target int32
	Banned, OK    int64
}

// PaceCount is what a pair sent in one bucket of the PaceWindow (bucket
// number Unix ns / PaceNews.Width) under the count epoch Epoch
// (PairLimit.Epoch).
type PaceCount struct {
	Route, Target int32
	Epoch         int64
	Bucket        int64
	N             int32
}

// PaceShare is how many live processes pace a target, this one included.
type PaceShare struct {
	Target int32
	Procs  int32
}

// PaceNews is what one exchange of PaceSharer carries, each way. Route
// slots and target numbers are the engine's own; a store maps them to the
// names it announced.
type PaceNews struct {
	// Now is the engine's time of the exchange; Window is its PaceWindow
	// and Width the width of one of the window's buckets. Set by the
	// engine.
	Now    int64
	Window time.Duration
	Width  time.Duration

	Pairs   []PairLimit   // limits learned, or heard and not yet taken
	Targets []TargetLimit // tolerances learned, cut or lifted
	Bans    []PaceBan     // bans that may make a wave
	Seen    []PairSeen    // pairs banned, or served again after a ban
	// Sent, from the engine, is what each pair sent since the last
	// exchange, per bucket.
	Sent []PaceCount
	// Others, from the store, is what the other processes sent in each
	// bucket of the window, for the targets in Shares: for those the
	// counts are complete, and a pair not listed sent nothing elsewhere.
	Others []PaceCount
	// Shares, from the store: how many processes pace each target.
	Shares []PaceShare
	// Fleet, from the store with Shares: how many processes share pacing
	// and are alive, this one included (0: not known).
	Fleet int32
	// Alone, from the store: the other processes are out of reach; pace
	// with this process's own counts and the whole of every limit.
	Alone bool
}

// pairShare is a pair's side of shared pacing. Guarded by its pair's mu.
type pairShare struct {
	others   failWindow // ok side: the other processes' sends, as last counted
	reported failWindow // sent as last handed to the store
	epoch    int64      // the count's epoch: when it last restarted (learnRate)
	base     int64      // the Cut of the limit the current one replaced
	first    bool       // the current limit came of the pair's first 429
	dirty    bool       // the limit changed here: hand it to the store
	// blind: the limit was learned from this process's count alone, before
	// the store said how many processes pace the target; it is this
	// process's share of the fleet's, kept here until unblind.
	blind bool
	// sharedBan and sharedOK are the last ban and success the other
	// processes know of.
	sharedBan, sharedOK int64
}

// targetShare is a target's side of shared pacing. Guarded by its
// targetPace's mu.
type targetShare struct {
	at, base int64     // At and Base of the target's current limit (a hold or a lift)
	dirty    bool      // the limit changed here: hand it to the store
	bans     []PaceBan // wave bans to hand to the store
	solo     int       // exchanges that counted this process alone here, before its first count (applyCounts)
}

// paceShare is the engine's link to a PaceSharer.
type paceShare struct {
	sharer  PaceSharer // immutable after New; nil: pacing is this process's own
	mu      sync.Mutex
	targets []*target // guarded by mu: the targets with pacing state
	// lone counts the exchanges in a row that found this process the only
	// one alive (PaceNews.Fleet).
	lone atomic.Int32
}

// onlyAlive takes the store's count of the processes alive (0: none this
// exchange) and reports whether the last two counts found this process
// the only one: the first alone may come before another's first
// heartbeat, both just started.
func (s *paceShare) onlyAlive(fleet int32) bool {
	switch {
	case fleet == 1:
		s.lone.Add(1)
	case fleet > 1:
		s.lone.Store(0)
	}
	return s.lone.Load() >= 2
}

// initPaceShare links e to store's PaceSharer, if it has one.
func (e *Engine) initPaceShare(store Store) {
	if ps, ok := store.(PaceSharer); ok {
		e.share.sharer = ps
	}
}

// paced notes that t has pacing state, for sharePace.
func (s *paceShare) paced(t *target) {
	s.mu.Lock()
	s.targets = append(s.targets, t)
	s.mu.Unlock()
}

// limit is the pair's limit as it is exchanged. Caller holds p.mu.
func (p *pairPace) limit(slot, target int32) PairLimit {
	l := PairLimit{Route: slot, Target: target}
	if p.rate == 0 {
		return l
	}
	l.Rate, l.Ceiling, l.Cut, l.Since = p.rate, p.ceiling, p.cut, p.since
	if p.sh != nil {
		l.Base, l.Epoch, l.First = p.sh.base, p.sh.epoch, p.sh.first
	}
	return l
}

// limit is the target's tolerance as it is exchanged. Caller holds tp.mu.
func (tp *targetPace) limit(n int32) TargetLimit {
	return TargetLimit{
		Target: n, Tolerance: math.Float64frombits(tp.tolerance.Load()), Ceiling: tp.tolCeiling.Load(),
		At: tp.sh.at, Base: tp.sh.base, HoldOff: tp.holdOff,
	}
}

// changed notes that the target's limit changed at ns. Caller holds tp.mu.
func (tp *targetPace) changed(ns int64) {
	if tp.shared {
		tp.sh.base, tp.sh.at, tp.sh.dirty = tp.sh.at, ns, true
	}
}

// at is the ok count of absolute bucket b, 0 when b is not in the window.
func (w *failWindow) at(b int64) int {
	if b > w.head || b <= w.head-windowBuckets || b < 0 {
		return 0
	}
	return int(w.ok[b%windowBuckets])
}

// setOK sets the ok count of absolute bucket b, moving the window on when
// b is newer than its head.
func (w *failWindow) setOK(b int64, n int) {
	if b > w.head {
		for i := int64(1); i <= min(b-w.head, windowBuckets); i++ {
			idx := (w.head + i) % windowBuckets
			w.ok[idx], w.fail[idx] = 0, 0
		}
		w.head = b
	}
	if b <= w.head-windowBuckets || b < 0 {
		return
	}
	w.ok[b%windowBuckets] = uint16(min(n, math.MaxUint16))
}

// sum is the ok side of a and b bucket by bucket, both being windows of
// absolute buckets.
func sum(a, b *failWindow) failWindow {
	s := failWindow{head: max(a.head, b.head)}
	for bucket := s.head - windowBuckets + 1; bucket <= s.head; bucket++ {
		if bucket >= 0 {
			s.ok[bucket%windowBuckets] = uint16(min(a.at(bucket)+b.at(bucket), math.MaxUint16))
		}
	}
	return s
}

// sharePace is Sweep's exchange with the store's PaceSharer: this
// process's news out, the others' in.
func (e *Engine) sharePace(ns int64) {
	if e.share.sharer == nil {
		return
	}
	width := int64(e.cfg.PaceWindow) / windowBuckets
	out := PaceNews{Now: ns, Window: e.cfg.PaceWindow, Width: time.Duration(width)}
	e.share.mu.Lock()
	targets := slices.Clone(e.share.targets)
	e.share.mu.Unlock()
	for _, t := range targets {
		t.pace.Load().gather(t.n, &out)
	}
	in := e.share.sharer.SharePace(out)
	e.applyPace(ns, &in, targets)
}

// gather appends the target's news since the last exchange to out.
func (tp *targetPace) gather(n int32, out *PaceNews) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.sh.dirty {
		out.Targets = append(out.Targets, tp.limit(n))
		tp.sh.dirty = false
	}
	out.Bans = append(out.Bans, tp.sh.bans...)
	tp.sh.bans = tp.sh.bans[:0]
	tp.pairs.each(func(p *pairPace) {
		slot := p.slot
		p.mu.Lock()
		sh := p.sh
		if sh.dirty {
			out.Pairs = append(out.Pairs, p.limit(slot, n))
			sh.dirty = false
		}
		// A ban the others do not know of, or a success after it that
		// serves the exit again.
		if p.banned > sh.sharedBan || (p.banned != 0 && p.okAt > p.banned && sh.sharedOK <= p.banned) {
			out.Seen = append(out.Seen, PairSeen{Route: slot, Target: n, Banned: p.banned, OK: p.okAt})
			sh.sharedBan, sh.sharedOK = p.banned, p.okAt
		}
		for b := p.sent.head - windowBuckets + 1; b <= p.sent.head; b++ {
			if d := p.sent.at(b) - sh.reported.at(b); d > 0 {
				out.Sent = append(out.Sent, PaceCount{Route: slot, Target: n, Epoch: sh.epoch, Bucket: b, N: int32(d)})
			}
		}
		sh.reported = p.sent
		p.mu.Unlock()
	})
}

// applyPace takes the other processes' news. targets are the targets with
// pacing state.
func (e *Engine) applyPace(ns int64, in *PaceNews, targets []*target) {
	valid := func(slot, n int32) bool {
		return slot >= 0 && slot < e.routes.len() && n > 0 && n < e.targets.len()
	}
	if in.Alone {
		for _, t := range targets {
			t.pace.Load().alone(&e.cfg, ns)
		}
	}
	for _, l := range in.Targets {
		if !valid(0, l.Target) {
			continue
		}
		if tp := e.watch(e.targets.get(l.Target)); tp != nil {
			tp.mu.Lock()
			tp.adopt(&e.cfg, l, ns)
			tp.mu.Unlock()
		}
	}
	for _, l := range in.Pairs {
		if !valid(l.Route, l.Target) {
			continue
		}
		tp := e.watch(e.targets.get(l.Target))
		if tp == nil {
			continue
		}
		p := tp.pairAt(l.Route, ns)
		p.mu.Lock()
		first, rate := p.adopt(&e.cfg, l, ns), p.rate
		p.mu.Unlock()
		if first {
			tp.firstTrip(&e.cfg, l.Route, rate, 0, ns)
		}
	}
	for _, s := range in.Seen {
		if !valid(s.Route, s.Target) {
			continue
		}
		if tp := e.watch(e.targets.get(s.Target)); tp != nil {
			p := tp.pairAt(s.Route, ns)
			p.mu.Lock()
			p.banned, p.okAt = max(p.banned, s.Banned), max(p.okAt, s.OK)
			p.sh.sharedBan, p.sh.sharedOK = max(p.sh.sharedBan, s.Banned), max(p.sh.sharedOK, s.OK)
			p.mu.Unlock()
		}
	}
	for _, b := range in.Bans {
		if !valid(b.Route, b.Target) {
			continue
		}
		if tp := e.watch(e.targets.get(b.Target)); tp != nil {
			tp.mu.Lock()
			tp.remoteBan(&e.cfg, b, ns)
			tp.mu.Unlock()
		}
	}
	if only := e.share.onlyAlive(in.Fleet); len(in.Shares) > 0 {
		e.applyCounts(ns, in, only)
	}
}

// applyCounts replaces the other processes' counts of the targets in
// in.Shares with in.Others. only is set when this process is the only one
// alive (onlyAlive).
func (e *Engine) applyCounts(ns int64, in *PaceNews, only bool) {
	counted := make(map[int32]*targetPace, len(in.Shares))
	var told []*targetPace // the targets whose processes are counted for the first time
	for _, s := range in.Shares {
		if s.Target <= 0 || s.Target >= e.targets.len() {
			continue
		}
		tp := e.targets.get(s.Target).pace.Load()
		if tp == nil {
			continue // not paced here: its counts are of no use yet
		}
		if s.Procs <= 1 && !only && !tp.countedSolo() {
			continue
		}
		if tp.procs.Swap(max(s.Procs, 1)) == 0 {
			told = append(told, tp)
		}
		tp.dropOthers()
		counted[s.Target] = tp
	}
	for _, c := range in.Others {
		tp := counted[c.Target]
		if tp == nil || c.Route < 0 || c.Route >= e.routes.len() {
			continue
		}
		// A pair that sent only through other processes is made here: it
		// counts for the comparisons a ban makes.
		p := tp.pairAt(c.Route, ns)
		p.mu.Lock()
		if c.Epoch == p.sh.epoch {
			p.sh.others.setOK(c.Bucket, int(c.N))
		}
		p.mu.Unlock()
	}
	for _, tp := range told {
		tp.unblind(&e.cfg, ns)
	}
}

// soloExchanges is how many exchanges must count a process alone at a
// target, while it may not be the only process alive, before it takes the
// count for its first. The others count a target from their own first 429
// or ban there, or their watchAfter-th lease of it, and their counts, like
// the heartbeats of those just started, reach this process an exchange
// after that: a first 429 weighed on a count of one that came too soon
// taught a live pool of two gateways under two thirds of its site's
// limit, for the fleet, and held the site's exits there for the minutes
// growth takes (docs/design/005-cost.md, *Shared by gateways on one
// Redis*). Until then a 429 teaches this process's share (learnRate). A
// process the only one alive takes its count at once (applyCounts).
const soloExchanges = 3

// countedSolo notes an exchange that counted this process alone at the
// target and reports whether the count may be taken: the target has been
// counted before, or now has been counted so soloExchanges times.
func (tp *targetPace) countedSolo() bool {
	if tp.procs.Load() != 0 {
		return true
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.sh.solo++
	return tp.sh.solo >= soloExchanges
}

// dropOthers forgets the other processes' counts of every pair.
func (tp *targetPace) dropOthers() {
	tp.pairs.each(func(p *pairPace) {
		p.mu.Lock()
		p.sh.others = failWindow{}
		p.mu.Unlock()
	})
}

// alone drops the other processes' counts and share: the store cannot
// reach them.
func (tp *targetPace) alone(c *Config, ns int64) {
	if tp.procs.Swap(1) == 0 {
		tp.unblind(c, ns)
	}
	tp.dropOthers()
}

// unblind makes the fleet's the limits the target's pairs learned before
// the store said how many processes pace it (learnRate): each came of this
// process's count alone, its share of what the site saw, which every
// process sending as much makes procs times that. A learnt share handed
// on as the fleet's limit held a live pool of two gateways to half of its
// sites' limits, merged to the stricter when both learned one
// (docs/design/005-cost.md, *Shared by gateways on one Redis*). Each is
// handed to the store, and a first 429 among them counts toward the
// freeze as one heard from the others does.
func (tp *targetPace) unblind(c *Config, ns int64) {
	procs := float64(tp.procs.Load())
	var firsts []PairLimit
	tp.pairs.each(func(p *pairPace) {
		p.mu.Lock()
		if sh := p.sh; sh.blind {
			p.rate, p.ceiling = min(p.rate*procs, c.PaceMax), p.ceiling*procs
			sh.blind, sh.dirty = false, true
			tp.publish(p, p.rateAt(c, ns))
			if sh.first {
				firsts = append(firsts, PairLimit{Route: p.slot, Rate: p.rate})
			}
		}
		p.mu.Unlock()
	})
	for _, l := range firsts {
		tp.firstTrip(c, l.Route, l.Rate, 0, ns)
	}
}

// adopt takes l, another process's limit for the pair, when it supersedes
// the pair's own, and reports whether it held the pair for the first time
// after its first 429 (which counts toward the freeze). Caller holds p.mu.
func (p *pairPace) adopt(c *Config, l PairLimit, ns int64) (first bool) {
	cur := p.limit(l.Route, l.Target)
	if p.sh.blind {
		cur = PairLimit{} // a share of the limit, which any of the fleet's says better
	}
	if !l.Supersedes(cur) || ns-l.Cut >= int64(c.PairTTL) {
		return false // stale, or as old as evict forgets
	}
	held := p.rate > 0
	p.rate, p.ceiling, p.cut = l.Rate, l.Ceiling, l.Cut
	// A limit no 429 taught, with nothing over it: another process's
	// freeze guessed it (learnRate, tell).
	p.guess = l.Ceiling == 0 && !l.First
	p.held.Store(true)
	p.pressed, p.pressedAt = 0, 0
	sh := p.sh
	sh.base, sh.first, sh.dirty, sh.blind = l.Base, l.First, false, false
	if l.Epoch > sh.epoch {
		// A 429 newer than this process's last: the bucket empties at the
		// cut and the count restarts, as learnRate has them.
		p.tokens, p.last = 0, l.Cut
		p.sent, sh.reported, sh.others = failWindow{}, failWindow{}, failWindow{}
	}
	sh.epoch, p.since = l.Epoch, l.Since
	p.tripped = max(p.tripped, l.Epoch) // the fleet's last 429 at the pair
	return !held && l.First
}

// adopt takes l, another process's limit for the target, when it
// supersedes the target's own. Caller holds tp.mu.
func (tp *targetPace) adopt(c *Config, l TargetLimit, ns int64) {
	if !l.Supersedes(tp.limit(l.Target)) {
		return
	}
	if l.Tolerance > 0 && tolerance(c, l.Tolerance, l.At, l.Ceiling, ns) >= c.PaceMax*c.PaceWindow.Seconds() {
		return // grown past PaceMax: evict forgets it
	}
	tp.tolAt.Store(l.At)
	tp.tolCeiling.Store(l.Ceiling)
	tp.tolerance.Store(math.Float64bits(l.Tolerance))
	tp.holdOff = max(tp.holdOff, l.HoldOff)
	tp.sh.at, tp.sh.base, tp.sh.dirty = l.At, l.Base, false
	tp.sent, tp.bans = 0, 0
	tp.wave = tp.wave[:0]
}

// remoteBan weighs another process's wave ban as learnTolerance weighs a
// ban here. Caller holds tp.mu.
func (tp *targetPace) remoteBan(c *Config, b PaceBan, ns int64) {
	window := int64(c.PaceWindow)
	if tp.toleranceAt(c, ns) > 0 || ns < tp.holdOff || ns-b.At > window/windowBuckets {
		return
	}
	tp.addBan(c, waveBan{at: b.At, slot: b.Route, sent: int(b.Sent), most: int(b.Most), span: c.PaceWindow}, ns)
}

// PaceStatus is a snapshot of the pacing learned for one target.
type PaceStatus struct {
	Target string
	// Tolerance is the requests per PaceWindow one exit may send there
	// now, all processes together; 0 when none is learned. The scouts of
	// a young wave may send more meanwhile: each pair's Own says what it
	// is held to.
	Tolerance float64
	// Processes is how many processes share the target's limits (1: this
	// one paces alone).
	Processes int
	// Frozen is the rate, requests/s, an exit new to the target starts
	// held at since enough of its exits tripped that the site froze
	// (docs/design/005-cost.md); 0 while it has not.
	Frozen float64
	// Braked is the rate, requests/s, every exit no rate holds is spaced
	// at while a young first 429 brakes the site, for a second at most
	// (docs/design/005-cost.md); 0 while none does.
	Braked float64
	Pairs  []PairPaceStatus // by route id
}

// PairPaceStatus is a snapshot of one route×target pair's pacing.
type PairPaceStatus struct {
	Route string
	// Rate is the requests/s the pair is held to by its 429s, all
	// processes together (0: none); Own the rate this process's token
	// bucket runs at, its share of Rate or of the tolerance (0: not paced).
	Rate, Own float64
	// Sent is what the pair sent in the window, all processes together as
	// last counted, and Local what this process sent of it.
	Sent, Local int
	// Guess is set while Rate is the freeze's guess, not what a 429 of
	// the pair's own, or one like it, taught.
	Guess bool
}

// Pace returns the pacing learned for target, false when it has none. It
// allocates: for admin use and tests, not the hot path.
func (e *Engine) Pace(now time.Time, target string) (PaceStatus, bool) {
	t, ok := e.byName.load(target)
	if !ok {
		return PaceStatus{}, false
	}
	tp := t.pace.Load()
	if tp == nil {
		return PaceStatus{}, false
	}
	ns := now.UnixNano()
	width := int64(e.cfg.PaceWindow) / windowBuckets
	tol := tp.toleranceAt(&e.cfg, ns)
	st := PaceStatus{Target: target, Tolerance: tol, Processes: int(max(tp.procs.Load(), 1)), Frozen: math.Float64frombits(tp.frozen.Load())}
	if tp.braked(ns) {
		st.Braked = math.Float64frombits(tp.brakeRate.Load())
	}
	tp.pairs.each(func(p *pairPace) {
		p.mu.Lock()
		rate := p.rateAt(&e.cfg, ns)
		sent, _ := p.count(&e.cfg, ns)
		local, _ := p.sent.counts(ns, width)
		guess := p.guess
		p.mu.Unlock()
		st.Pairs = append(st.Pairs, PairPaceStatus{
			Route: e.routes.get(p.slot).id, Rate: rate, Own: tp.rateIn(rate, tp.toleranceFor(&e.cfg, p.slot, ns), &e.cfg), Sent: sent, Local: local, Guess: guess,
		})
	})
	slices.SortFunc(st.Pairs, func(a, b PairPaceStatus) int { return strings.Compare(a.Route, b.Route) })
	return st, true
}

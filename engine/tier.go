package engine

import (
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Cost tiers (docs/design/015-tiers.md). A route carries a tier, 0 the
// cheapest (a datacenter list), higher ones costlier (residential, mobile).
// Per target the engine draws from the lowest tier in use there: it climbs
// to the next tier for one pick when the tier has nothing to give (every
// route excluded, busy or paced), escalates the target to it when the
// tier's recent answers there are mostly failures, and steps back down
// after a calm period that doubles each time the tier below fails again
// at once. A pool whose routes all share a tier pays one atomic load per
// pick for all this.

// MaxTier is the costliest tier a route may carry.
const MaxTier = 7

// tierWindowSize is how many of a target's latest answers through a tier
// judge it; tierMinSamples of them are needed before it is judged.
const (
	tierWindowSize = 16
	tierMinSamples = 8
)

// tierKey is the label key of the tier indexes: a key no parsed label can
// have, so they live in the label index map without meeting a user label.
const tierKey = "\x00tier"

// tierIndex returns the index of tier's routes for tier ≥ 1 (tier 0 draws
// from the pool), nil when no route has that tier.
func (e *Engine) tierIndex(tier int, create bool) *weightIndex {
	return e.labelIndex(Label{Key: tierKey, Value: strconv.Itoa(tier)}, create)
}

// countTier moves a route from tier from to tier to (-1: none) in the
// counts that tell how many tiers the pool has.
func (e *Engine) countTier(from, to int) {
	if from == to {
		return
	}
	e.tierMu.Lock()
	defer e.tierMu.Unlock()
	if from >= 0 {
		e.tierRoutes[from].Add(-1)
	}
	if to >= 0 {
		e.tierRoutes[to].Add(1)
	}
	n, populated := int32(0), 0
	for i := range e.tierRoutes {
		if e.tierRoutes[i].Load() > 0 {
			n, populated = int32(i)+1, populated+1
		}
	}
	if populated < 2 {
		n = 0 // one tier, whichever: no tier to climb to
	}
	e.tiers.Store(n)
}

// hasTierFrom reports whether a route of tier floor or above is in the
// pool.
func (e *Engine) hasTierFrom(floor int) bool {
	for tier := floor; tier <= MaxTier; tier++ {
		if e.tierRoutes[tier].Load() > 0 {
			return true
		}
	}
	return false
}

// nextTier returns the nearest tier above from (step 1) or below it (step
// -1) that has routes, -1 when there is none.
func (e *Engine) nextTier(from, step int) int {
	for tier := from + step; tier >= 0 && tier < int(e.tiers.Load()); tier += step {
		if e.tierRoutes[tier].Load() > 0 {
			return tier
		}
	}
	return -1
}

// targetTier is one target's tier state, allocated on the target's first
// pick in a pool of several tiers.
type targetTier struct {
	level   atomic.Int32 // lowest tier in use for the target
	serving atomic.Int32 // tier of the target's latest lease
	stepAt  atomic.Int64 // Unix ns when level may step down; 0 at level 0

	mu       sync.Mutex
	windows  [MaxTier + 1]tierWindow // guarded by mu: latest answers through each tier
	since    int64                   // guarded by mu: when level last changed
	calm     int64                   // guarded by mu: the calm period of the latest escalation
	returned int64                   // guarded by mu: when level last stepped down; 0 never
	reason   string                  // guarded by mu: why level is what it is
	// held: the site failed through a costlier tier too while an incident
	// was open there: no escalation until the incident closes.
	held bool // guarded by mu
}

// tierWindow is a tier's latest answers at a target, a bit each (1: a
// valid answer), newest lowest.
type tierWindow struct {
	bits uint16 // as many bits as tierWindowSize
	n    uint8
}

func (w *tierWindow) add(ok bool) {
	w.bits <<= 1
	if ok {
		w.bits |= 1
	}
	w.n = min(w.n+1, tierWindowSize)
}

// failing reports whether the window has enough answers and under below of
// them were valid.
func (w *tierWindow) failing(below float64) bool {
	return w.n >= tierMinSamples && float64(w.valid()) < below*float64(w.n)
}

func (w *tierWindow) valid() int {
	return bits.OnesCount16(w.bits & uint16(1<<w.n-1))
}

// tierOf returns t's tier state, creating it.
func (t *target) tierOf() *targetTier {
	if tt := t.tier.Load(); tt != nil {
		return tt
	}
	t.tier.CompareAndSwap(nil, &targetTier{})
	return t.tier.Load()
}

// tierLevel returns the tier t draws from first: -1 when the pool's routes
// all share one tier. It steps an escalated target down once its calm
// period is over.
func (e *Engine) tierLevel(t *target, ns int64) int {
	if e.tiers.Load() <= 1 {
		return -1
	}
	tt := t.tierOf()
	if at := tt.stepAt.Load(); at != 0 && ns >= at {
		e.stepDown(ns, t, tt)
	}
	return int(tt.level.Load())
}

// stepDown moves tt a tier down, once its calm period is over.
func (e *Engine) stepDown(ns int64, t *target, tt *targetTier) {
	tt.mu.Lock()
	from := int(tt.level.Load())
	if at := tt.stepAt.Load(); at == 0 || ns < at || from == 0 {
		tt.mu.Unlock()
		return
	}
	to := max(e.nextTier(from, -1), 0)
	e.stepDownLocked(ns, t, tt, from, to, "calm for "+time.Duration(tt.calm).String()+" on tier "+strconv.Itoa(from)+": trying tier "+strconv.Itoa(to)+" again")
}

// tierRecovered steps t (tier state tt) down to the tier of r, a route
// whose pair with t just passed its probe, when t is escalated above it:
// evidence that the tier works there again, sooner than the calm period
// would tell.
func (e *Engine) tierRecovered(ns int64, r *route, t *target, tt *targetTier) {
	tier := int(r.config.Load().tier)
	if int(tt.level.Load()) <= tier {
		return
	}
	tt.mu.Lock()
	from := int(tt.level.Load())
	if from <= tier {
		tt.mu.Unlock()
		return
	}
	e.stepDownLocked(ns, t, tt, from, tier, r.id+" passed its probe here: trying tier "+strconv.Itoa(tier)+" again")
}

// stepDownLocked moves t from tier from down to tier to, unlocking tt.mu.
func (e *Engine) stepDownLocked(ns int64, t *target, tt *targetTier, from, to int, reason string) {
	tt.setLevel(ns, to, reason)
	tt.returned = ns
	if to > 0 {
		tt.stepAt.Store(ns + tt.calm)
	}
	tt.mu.Unlock()
	e.publishTier(ns, t, from, to, reason)
}

// setLevel moves tt to level, judging it afresh. The caller holds mu and
// sets stepAt.
func (tt *targetTier) setLevel(ns int64, level int, reason string) {
	tt.level.Store(int32(level))
	tt.windows[level] = tierWindow{}
	tt.since, tt.reason = ns, reason
	tt.stepAt.Store(0)
}

// observeTier counts an answer through a route of the given tier at t,
// whose tier state is tt:
// valid (OK) or a failure that is the target's answer through the route
// (route×target scope, but 429s, which pacing handles: being paced is not
// failing). The route's own faults say nothing of the tier at the target.
func (e *Engine) observeTier(ns int64, t *target, tt *targetTier, tier int, c Class, rule Rule) {
	if c != OK && (rule.Scope&ScopeTarget == 0 || c == RateLimited) {
		return
	}
	_, incident := e.store.Incident(t.n)
	tt.mu.Lock()
	if tt.held && !incident {
		tt.held = false
	}
	w := &tt.windows[tier]
	w.add(c == OK)
	from := int(tt.level.Load())
	if e.tierRoutes[from].Load() == 0 {
		from = e.nextTier(from, 1) // a level without routes draws from the next
	}
	if tier != from || !w.failing(e.cfg.TierEscalateBelow) || tt.held {
		tt.mu.Unlock()
		return
	}
	valid := strconv.Itoa(w.valid()) + "/" + strconv.Itoa(int(w.n))
	var to int
	var reason string
	switch {
	case incident && from > 0:
		// The costlier tier fails too while the site fails through many
		// routes: it is down for everyone, and no tier helps.
		to, tt.held = 0, true
		reason = "incident: " + c.String() + " through tier " + strconv.Itoa(from) + " too (" + valid + " valid): back to tier 0 until it closes"
	case e.nextTier(from, 1) >= 0:
		to = e.nextTier(from, 1)
		reason = "tier " + strconv.Itoa(from) + ": " + valid + " valid answers, last " + c.String()
	default:
		tt.mu.Unlock()
		return // the costliest tier fails: the pair evidence has it
	}
	tt.setLevel(ns, to, reason)
	if to > 0 {
		// A calm period after which the tier below is tried again; doubled
		// when the last try failed within one, so a site that bans the
		// cheap tier for good costs fewer and fewer trials.
		if tt.returned != 0 && ns-tt.returned < tt.calm {
			tt.calm = min(2*tt.calm, int64(e.cfg.TierCalmMax))
		} else {
			tt.calm = int64(e.cfg.TierCalm)
		}
		tt.stepAt.Store(ns + tt.calm)
	}
	tt.mu.Unlock()
	e.publishTier(ns, t, from, to, reason)
}

// TargetTier is the tier state of one target of a pool of several tiers.
type TargetTier struct {
	Target  string
	Tier    int       // lowest tier in use
	Serving int       // tier of the latest lease: above Tier when Tier had nothing to give
	Since   time.Time // when Tier last changed
	Until   time.Time // when Tier steps down; zero at tier 0
	Reason  string    // why Tier is what it is
}

// Tiers lists the targets whose traffic goes above tier 0 (escalated, or
// served above their tier at their latest pick) and those held on tier 0
// by an incident. It allocates: for admin use.
func (e *Engine) Tiers() []TargetTier {
	var out []TargetTier
	for n := int32(1); n < e.targets.len(); n++ {
		t := e.targets.get(n)
		tt := t.tier.Load()
		if tt == nil {
			continue
		}
		tt.mu.Lock()
		if tt.level.Load() == 0 && tt.serving.Load() == 0 && !tt.held {
			tt.mu.Unlock()
			continue
		}
		st := TargetTier{
			Target: t.name, Tier: int(tt.level.Load()), Serving: int(tt.serving.Load()),
			Since: time.Unix(0, tt.since).UTC(), Reason: tt.reason,
		}
		if at := tt.stepAt.Load(); at != 0 {
			st.Until = time.Unix(0, at).UTC()
		}
		if tt.since == 0 {
			st.Since = time.Time{}
		}
		if st.Serving > st.Tier && st.Tier == 0 && st.Reason == "" {
			st.Reason = "tier 0 had nothing to give: every route excluded, busy or paced there"
		}
		tt.mu.Unlock()
		out = append(out, st)
	}
	return out
}

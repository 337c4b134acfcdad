package engine

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// SavedPace is what the sites' 429s taught an engine's pacing, by route id
// and target name, for an engine to start from (RestorePace): a gateway
// restarted from it does not learn each limited site's limits again, at a
// Retry-After for every exit's first trip and minutes of growth back from
// the back-off (docs/design/005-cost.md).
type SavedPace struct {
	Pairs   []SavedPair   `json:"pairs,omitempty"`
	Targets []SavedTarget `json:"targets,omitempty"`
}

// SavedPair is the rate one route×target pair is held to.
type SavedPair struct {
	Route  string `json:"route"`
	Target string `json:"target"`
	// Rate is the requests/s the pair was held to when saved, growth
	// under pressure included; Ceiling the held rate its last 429 came at
	// (0: none), which it grows toward only by a slow drift.
	Rate    float64 `json:"rate"`
	Ceiling float64 `json:"ceiling,omitempty"`
	// Cut is when the rate was learned, and Active when it last held a
	// request back or was learned: a limit that has held nothing back for
	// PairTTL is forgotten, saved or not.
	Cut    time.Time `json:"cut"`
	Active time.Time `json:"active"`
	// Guess is set for a hold the target's freeze guessed, which no 429
	// of the pair's own has corrected yet.
	Guess bool `json:"guess,omitempty"`
}

// SavedTarget is what a target keeps beyond its pairs: Frozen is the rate
// an exit new to it starts held to, once enough of its exits tripped
// (0: it has not frozen).
type SavedTarget struct {
	Target string  `json:"target"`
	Frozen float64 `json:"frozen"`
}

// SavePace returns the pacing the sites' 429s taught, as RestorePace takes
// it: every pair held to a rate that would still be held at now, and every
// frozen target, sorted by target and route. Tolerances learned from bans
// are not in it: they are learned again from the sites' next wave. It
// allocates: for a periodic save, not the hot path.
func (e *Engine) SavePace(now time.Time) SavedPace {
	ns := now.UnixNano()
	var s SavedPace
	for n := int32(1); n < e.targets.len(); n++ {
		t := e.targets.get(n)
		tp := t.pace.Load()
		if tp == nil {
			continue
		}
		if frozen := math.Float64frombits(tp.frozen.Load()); frozen > 0 {
			s.Targets = append(s.Targets, SavedTarget{Target: t.name, Frozen: frozen})
		}
		tp.pairs.each(func(p *pairPace) {
			p.mu.Lock()
			defer p.mu.Unlock()
			active := max(p.pressedAt, p.cut)
			if p.rate == 0 || ns-active >= int64(e.cfg.PairTTL) {
				return
			}
			s.Pairs = append(s.Pairs, SavedPair{
				Route: e.routes.get(p.slot).id, Target: t.name, Rate: p.rateAt(&e.cfg, ns), Ceiling: p.ceiling,
				Cut: time.Unix(0, p.cut), Active: time.Unix(0, active), Guess: p.guess,
			})
		})
	}
	slices.SortFunc(s.Pairs, func(a, b SavedPair) int {
		return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Route, b.Route))
	})
	slices.SortFunc(s.Targets, func(a, b SavedTarget) int { return cmp.Compare(a.Target, b.Target) })
	return s
}

// RestorePace holds the pairs of s to their saved rates, as if the engine
// had learned them itself, then holds exits new to a frozen target of s to
// its frozen rate. It skips a pair whose route the engine does not have,
// one that has a rate of its own already, one whose limit would have been
// forgotten by now (Active PairTTL or more ago), and one with a rate that
// is not a positive finite number or times before 1970; it returns how many
// pairs it held. With learned pacing off (PaceStart < 0) it does nothing.
// A store that shares pacing hands the restored limits to the other
// processes, which merge them as their own (PairLimit.Supersedes).
func (e *Engine) RestorePace(now time.Time, s SavedPace) (restored int) {
	if e.cfg.PaceStart < 0 {
		return 0
	}
	ns := now.UnixNano()
	for _, sp := range s.Pairs {
		slot, ok := e.byID.load(sp.Route)
		if !ok || !sp.valid() || ns-sp.Active.UnixNano() >= int64(e.cfg.PairTTL) {
			continue
		}
		tp := e.watch(e.target(sp.Target))
		p := tp.pairAt(slot, ns)
		p.mu.Lock()
		if p.rate == 0 {
			p.rate = min(max(sp.Rate, e.cfg.PaceFloor), e.cfg.PaceMax)
			p.ceiling, p.guess = sp.Ceiling, sp.Guess
			// A clock that was ahead when the file was saved has learned
			// nothing of the future.
			p.cut, p.pressed, p.pressedAt = min(sp.Cut.UnixNano(), ns), 0, min(sp.Active.UnixNano(), ns)
			p.tokens, p.last = 1, ns
			tp.markHeld(p)
			if p.sh != nil {
				p.sh.base, p.sh.first, p.sh.dirty = 0, false, true
			}
			tp.publish(p, p.rateAt(&e.cfg, ns))
			restored++
		}
		p.mu.Unlock()
	}
	for _, st := range s.Targets {
		if !finitePositive(st.Frozen) {
			continue
		}
		tp := e.watch(e.target(st.Target))
		tp.mu.Lock() // newPair reads frozen under it
		tp.frozen.CompareAndSwap(0, math.Float64bits(min(max(st.Frozen, e.cfg.PaceFloor), e.cfg.PaceMax)))
		tp.mu.Unlock()
	}
	return restored
}

// valid reports whether sp's numbers and times can be restored.
func (sp *SavedPair) valid() bool {
	return finitePositive(sp.Rate) && (sp.Ceiling == 0 || finitePositive(sp.Ceiling)) &&
		sp.Cut.Unix() > 0 && sp.Active.Unix() > 0 && sp.Cut.Year() < 2262 && sp.Active.Year() < 2262
}

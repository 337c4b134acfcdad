package engine

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// SavedPace is what the sites' 429s and bans taught an engine's pacing, by
// route id and target name, for an engine to start from (RestorePace): a
// gateway restarted from it does not learn each limited site's limits
// again, at a Retry-After for every exit's first trip and minutes of
// growth back from the back-off, nor each banning site's tolerance, at a
// wave of bans (docs/design/005-cost.md).
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

// SavedTarget is what a target keeps beside its pairs.
type SavedTarget struct {
	Target string `json:"target"`
	// Frozen is the rate an exit new to the target starts held to, once
	// enough of its exits tripped (0: it has not frozen).
	Frozen float64 `json:"frozen,omitempty"`
	// Tolerance is the requests one exit may send a PaceWindow, as learned
	// At from a wave of bans that came after Ceiling (0: none learned),
	// before growth. A young wave's (its bans came before their exits'
	// counts spanned a PaceWindow) is read Wide times wider, by the scouts
	// from WideAt and by every exit from WideAll; WideSpan is the wave's
	// span, which a ban of what went out wide waits again.
	Tolerance float64       `json:"tolerance,omitempty"`
	Ceiling   int64         `json:"ceiling,omitempty"`
	At        time.Time     `json:"at,omitzero"`
	Wide      float64       `json:"wide,omitempty"`
	WideAt    time.Time     `json:"wide_at,omitzero"`
	WideAll   time.Time     `json:"wide_all,omitzero"`
	WideSpan  time.Duration `json:"wide_span,omitempty"`
	// HoldOff is when a tolerance may be learned again after one was
	// lifted, its bans not being about the count.
	HoldOff time.Time `json:"hold_off,omitzero"`
}

// SavePace returns the pacing the sites' 429s and bans taught, as
// RestorePace takes it: every pair held to a rate that would still be held
// at now, and every target frozen, holding a tolerance or holding off
// learning one, sorted by target and route. It allocates: for a periodic
// save, not the hot path.
func (e *Engine) SavePace(now time.Time) SavedPace {
	ns := now.UnixNano()
	var s SavedPace
	for n := int32(1); n < e.targets.len(); n++ {
		t := e.targets.get(n)
		tp := t.pace.Load()
		if tp == nil {
			continue
		}
		if st, ok := tp.saved(&e.cfg, t.name, ns); ok {
			s.Targets = append(s.Targets, st)
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
// had learned them itself, then the targets of s to what they kept: exits
// new to a frozen one at its frozen rate, every exit under a tolerance. It
// skips a pair whose route the engine does not have, one that has a rate
// of its own already, one whose limit would have been forgotten by now
// (Active PairTTL or more ago), and one with a rate that is not a positive
// finite number or times before 1970; it returns how many pairs it held.
// With learned pacing off (PaceStart < 0) it does nothing. A store that
// shares pacing hands the restored limits to the other processes, which
// merge them as their own (PairLimit.Supersedes).
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
		e.watch(e.target(st.Target)).restore(&e.cfg, st, ns)
	}
	return restored
}

// saved is the target's state as SavedTarget keeps it; false when it has
// nothing to keep: it never froze, and it holds no tolerance that a
// running engine would still hold, nor a hold-off still running.
func (tp *targetPace) saved(c *Config, name string, ns int64) (SavedTarget, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	st := SavedTarget{Target: name, Frozen: math.Float64frombits(tp.frozen.Load())}
	if tol := math.Float64frombits(tp.tolerance.Load()); tol > 0 && tp.toleranceAt(c, ns) < c.PaceMax*c.PaceWindow.Seconds() {
		st.Tolerance, st.Ceiling, st.At = tol, tp.tolCeiling.Load(), time.Unix(0, tp.tolAt.Load())
		if wide := math.Float64frombits(tp.wide.Load()); wide > 0 {
			st.Wide, st.WideAt, st.WideAll, st.WideSpan = wide, time.Unix(0, tp.wideAt.Load()), time.Unix(0, tp.wideAll.Load()), tp.wideSpan
		}
	}
	if tp.holdOff > ns {
		st.HoldOff = time.Unix(0, tp.holdOff)
	}
	return st, st.Frozen > 0 || st.Tolerance > 0 || !st.HoldOff.IsZero()
}

// restore takes st, what another engine kept of the target, where this
// one has learned nothing of its own: the frozen start rate, and the
// tolerance unless it has grown past PaceMax since (evict would have
// forgotten it). A hold-off still running holds off here too.
func (tp *targetPace) restore(c *Config, st SavedTarget, ns int64) {
	tp.mu.Lock() // newPair reads frozen under it
	defer tp.mu.Unlock()
	if finitePositive(st.Frozen) {
		tp.frozen.CompareAndSwap(0, math.Float64bits(min(max(st.Frozen, c.PaceFloor), c.PaceMax)))
	}
	if known(st.HoldOff) {
		tp.holdOff = max(tp.holdOff, st.HoldOff.UnixNano())
	}
	at := st.At.UnixNano()
	if tp.tolerance.Load() != 0 || !finitePositive(st.Tolerance) || st.Ceiling < 0 || !known(st.At) ||
		tolerance(c, st.Tolerance, at, st.Ceiling, ns) >= c.PaceMax*c.PaceWindow.Seconds() {
		return
	}
	at = min(at, ns)
	if finitePositive(st.Wide) && known(st.WideAt) && known(st.WideAll) && st.WideSpan >= 0 {
		// The scouts' head start, where it has not run out, runs on here.
		tp.wide.Store(math.Float64bits(st.Wide))
		tp.wideAt.Store(st.WideAt.UnixNano())
		tp.wideAll.Store(st.WideAll.UnixNano())
		tp.wideSpan = st.WideSpan
	}
	tp.tolAt.Store(at)
	tp.tolCeiling.Store(st.Ceiling)
	tp.tolerance.Store(math.Float64bits(st.Tolerance))
	tp.sent, tp.bans = 0, 0
	if tp.shared {
		tp.sh.base, tp.sh.at, tp.sh.dirty = 0, at, true
	}
}

// valid reports whether sp's numbers and times can be restored.
func (sp *SavedPair) valid() bool {
	return finitePositive(sp.Rate) && (sp.Ceiling == 0 || finitePositive(sp.Ceiling)) && known(sp.Cut) && known(sp.Active)
}

// known reports whether t is a time an engine keeps, Unix ns after 1970.
func known(t time.Time) bool { return t.Unix() > 0 && t.Year() < 2262 }

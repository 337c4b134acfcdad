package engine

// remoteChange is the engine's Notifier listener: another process changed
// the record at k from old to now. The engine follows the change as it
// follows its own, but leaves the probe job and the cross-target check to
// the process that made it. It still queues the wake-up at now.Until:
// whichever process gets there first wakes the record, and the store's
// generation check lets exactly one of them win and issue the probe.
//
// known is not needed: a record this process did not know arrives as the
// zero Health, which is how the engine reads a missing record (a pair's
// target factor 1, a route's prior score).
func (e *Engine) remoteChange(k Key, old Health, _ bool, now Health) {
	r := e.routes.get(k.Route)
	if r == nil {
		return // a route this engine was never given
	}
	var t *target
	scope := ScopeRoute
	if !k.Global() {
		if t = e.targets.get(k.Target); t == nil {
			return // a target this engine never announced
		}
		scope = ScopeTarget
	}
	// The engine has no clock. The change happened at the latest time the
	// records show (a transition stamps Since, an outcome LastSuccess or
	// LastFailure): events carry it and the incident guard notes a cooling
	// at it. Wake-ups go by now.Until; a slow start is weighed at ns only
	// until Sweep refreshes it at this process's time.
	ns := max(old.lastTouched(), now.lastTouched())
	ch := Change{
		From: old.State, To: now.State, OldCause: old.Cause,
		OldScore: old.score(&e.cfg, scope), NewScore: now.score(&e.cfg, scope),
		Gen: now.Gen, ProbeSeq: now.ProbeOK, Until: now.Until, Cause: now.Cause, SlowStart: now.SlowStart,
	}
	// A new generation is a transition even into the same state: cooling,
	// then half-open, then cooling again after a failed probe arrives as
	// one step when the store coalesced the changes, with a new deadline
	// to queue.
	if old.State != now.State || old.Gen != now.Gen {
		ch.Reason = "changed by another process"
	}
	e.follow(ns, r, t, ch, now.Cause)
	if t == nil && !ch.Changed() {
		// Only the score moved; the weights cached in the index must follow
		// it. Pairs need nothing more: picks read them from the store.
		e.refresh(r, ns)
	}
}

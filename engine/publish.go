package engine

import "time"

// Subscribe returns a subscription to the engine's events of the given
// kinds (all kinds when none are given) with a buffer of capacity events;
// when the reader falls behind, the oldest are dropped and counted. An
// event kind nobody subscribes to costs one atomic load: a dashboard that
// wants state changes adds nothing to acquire and report.
func (e *Engine) Subscribe(capacity int, kinds ...EventKind) *Subscription {
	return e.events.subscribe(capacity, kinds...)
}

func (e *Engine) publishOutcome(ns int64, r *route, t *target, o Observation, rec *LeaseRecord) {
	if !e.events.wants(EventOutcome) {
		return
	}
	stale := false
	if rec != nil {
		h, _ := e.store.Read(Key{Route: r.slot})
		stale = h.Gen != rec.RouteGen
	}
	e.events.publish(Event{
		Time: time.Unix(0, ns).UTC(), Kind: EventOutcome, Route: r.id, Target: targetName(t),
		Class: o.Class, Latency: o.Latency, RetryAfter: o.RetryAfter, Probe: o.Probe, Stale: stale,
		Rules: e.cfg.Rules.Version,
	})
}

func (e *Engine) publishState(ns int64, r *route, t *target, ch Change, cause Class) {
	if !e.events.wants(EventState) {
		return
	}
	e.events.publish(Event{
		Time: time.Unix(0, ns).UTC(), Kind: EventState, Route: r.id, Target: targetName(t),
		From: ch.From, To: ch.To, OldScore: ch.OldScore, NewScore: ch.NewScore,
		Class: cause, Reason: ch.Reason, Rules: e.cfg.Rules.Version,
	})
}

func (e *Engine) publishScore(ns int64, r *route, t *target, ch Change, cause Class) {
	if !e.events.wants(EventScore) {
		return
	}
	e.events.publish(Event{
		Time: time.Unix(0, ns).UTC(), Kind: EventScore, Route: r.id, Target: targetName(t),
		OldScore: ch.OldScore, NewScore: ch.NewScore, Class: cause, Rules: e.cfg.Rules.Version,
	})
}

func (e *Engine) publishIncident(ns int64, r *route, t *target, c Class, open bool) {
	if !e.events.wants(EventIncident) {
		return
	}
	reason := "routes failing the target together"
	if !open {
		reason = "successes returned"
	}
	e.events.publish(Event{
		Time: time.Unix(0, ns).UTC(), Kind: EventIncident, Route: r.id, Target: t.name,
		Class: c, Open: open, Reason: reason, Rules: e.cfg.Rules.Version,
	})
}

func (e *Engine) publishTier(ns int64, t *target, from, to int, reason string) {
	if !e.events.wants(EventTier) {
		return
	}
	e.events.publish(Event{
		Time: time.Unix(0, ns).UTC(), Kind: EventTier, Target: t.name,
		FromTier: from, ToTier: to, Reason: reason, Rules: e.cfg.Rules.Version,
	})
}

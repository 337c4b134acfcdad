package engine

import (
	"fmt"
	"time"
)

// ReplayDiff is a decision that differs between a recording and its replay:
// after the outcome at Time, the record of Route (and Target, "" for the
// global record) was in Recorded state originally and is in Replayed now.
type ReplayDiff struct {
	Time     time.Time
	Route    string
	Target   string
	Class    Class // the outcome just applied
	Recorded State
	Replayed State
}

// ReplayReport summarizes a replay.
type ReplayReport struct {
	Outcomes  int          // outcomes fed to the engine
	Decisions int          // record states compared, two per outcome
	Diffs     []ReplayDiff // decisions that differ, in time order
}

// Replay runs the outcomes of a recorded event stream (as written by
// WriteEvents) through a fresh engine with cfg and reports where the
// resulting states differ from the recorded ones: what new rules or
// thresholds would have decided differently on the same evidence.
//
// Replay feeds outcomes without leases, in recorded order, waking cooldowns
// at recorded times. Cooldown jitter is random, so a replay under the very
// same config can still wake a record at a slightly different time; seed
// cfg for a reproducible replay.
func Replay(events []Event, cfg Config) (ReplayReport, error) {
	e, err := New(cfg, nil)
	if err != nil {
		return ReplayReport{}, err
	}
	type key struct{ route, target string }
	recorded := map[key]State{}
	var rep ReplayReport
	var pending []key
	var last Event
	compare := func() {
		for _, k := range pending {
			r := e.route(k.route)
			h, ok := Health{}, true
			if k.target == "" {
				h, _ = e.store.Read(Key{Route: r.slot})
			} else if h, ok = e.store.Read(Key{Route: r.slot, Target: e.target(k.target).n}); !ok {
				h = Health{} // never created: still a candidate
			}
			rep.Decisions++
			if want := recorded[k]; want != h.State {
				rep.Diffs = append(rep.Diffs, ReplayDiff{
					Time: last.Time, Route: k.route, Target: k.target, Class: last.Class,
					Recorded: want, Replayed: h.State,
				})
			}
		}
		pending = pending[:0]
	}
	for i, ev := range events {
		if ev.Route == "" {
			return rep, fmt.Errorf("engine: replay event %d: no route", i+1)
		}
		if i > 0 && ev.Time.Before(events[i-1].Time) {
			return rep, fmt.Errorf("engine: replay event %d: time goes backwards", i+1)
		}
		switch ev.Kind {
		case EventState:
			recorded[key{ev.Route, ev.Target}] = ev.To
		case EventOutcome:
			compare()
			r := e.route(ev.Route)
			if r == nil {
				if err := e.AddRoute(ev.Time, RouteSpec{ID: ev.Route}); err != nil {
					return rep, err
				}
				r = e.route(ev.Route)
			}
			ns := ev.Time.UnixNano()
			e.wakeDue(ns)
			obs := Observation{Class: ev.Class, Latency: ev.Latency, RetryAfter: ev.RetryAfter, Probe: ev.Probe, Stale: ev.Stale}
			if ev.Probe {
				k := Key{Route: r.slot}
				var t *target
				if ev.Target != "" {
					t = e.target(ev.Target)
					k.Target = t.n
				}
				obs.Jitter = e.jitter()
				if ch, ok := e.store.Update(&e.cfg, k, Op{Kind: OpObserve, Obs: obs}, ns); ok {
					e.handle(ns, r, t, ch, ev.Class)
				}
				pending = append(pending, key{ev.Route, ev.Target})
			} else {
				e.observe(ns, r, e.target(ev.Target), obs, nil)
				pending = append(pending, key{ev.Route, ""}, key{ev.Route, ev.Target})
			}
			last = ev
			rep.Outcomes++
		}
	}
	compare()
	return rep, nil
}

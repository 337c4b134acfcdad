package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
)

// maxPoliteSkips bounds the routes one attempt passes over because they
// are at their politeness rate for the target, before the request is told
// to come back later.
const maxPoliteSkips = 8

// maxStrictSkips bounds the routes a strict request passes over because a
// pick in panic drew one that is not eligible, before it is refused.
const maxStrictSkips = 8

// noRelease is the release of a request that is not paced.
func noRelease() {}

// admitPace waits for the target's pacing (rate, concurrency) under s's
// rules. When it answers the client instead (429, or nothing when the
// client has gone), ok is false. Being paced is not a failure: nothing is
// leased or reported.
func (g *Gateway) admitPace(w http.ResponseWriter, r *http.Request, rec *record, s *settings, target string) (release func(), ok bool) {
	// Most targets are not paced: they skip the pacer and its lock (here
	// rather than through pace, which costs the forward path an
	// allocation).
	if !s.paces || s.targets.Pace(target).IsZero() {
		return noRelease, true
	}
	release, err := g.pacer.Admit(r.Context(), target)
	var paced *pacing.Error
	switch {
	case errors.As(err, &paced):
		tooSoon(w, rec, paced)
		return nil, false
	case err != nil:
		return nil, false // the client gave up waiting
	}
	return release, true
}

// pace waits for the target's pacing under s's rules: nil, or a
// *pacing.Error, or ctx's error when the caller gave up waiting.
func (g *Gateway) pace(ctx context.Context, s *settings, target string) (release func(), err error) {
	// Most targets are not paced: they skip the pacer and its lock.
	if !s.paces || s.targets.Pace(target).IsZero() {
		return noRelease, nil
	}
	return g.pacer.Admit(ctx, target)
}

// lease leases a route for an attempt on target: acquire, then the
// route×target politeness check. A route at its politeness rate is given
// back without evidence and another one leased, so pacing never counts
// against an exit; a session's bound route is never swapped, so it waits
// or the request is refused. A strict request passes over a route that a
// pick in panic drew though it is not eligible. When every route is at the rate the target taught
// (engine.PacedError), lease waits for the first to be ready, up to wait
// in all. A request's first attempt (tried nil) may get a lease that
// reserved a paced route's next token (engine.Lease.Delay).
func (g *Gateway) lease(ctx context.Context, s *settings, ctl control, target string, tried []string, wait time.Duration) (engine.Lease, *route.Exit, error) {
	avoid := slices.Clip(tried) // appending must not write into tried
	var paced error
	var unfillable *unfillableError // the last gateway route passed over for its template
	strictSkips := 0
	for {
		l, x, err := g.acquire(s, ctl, target, avoid, tried == nil)
		if u, ok := errors.AsType[*unfillableError](err); ok && len(avoid)-len(tried) < maxStrictSkips {
			// A gateway route whose username the request cannot fill does
			// not satisfy its constraints: another route may.
			unfillable = u
			avoid = append(avoid, u.route)
			continue
		}
		if err != nil {
			if paced != nil {
				return engine.Lease{}, nil, paced
			}
			if unfillable != nil && (errors.Is(err, engine.ErrNoRoute) || errors.Is(err, engine.ErrNoMatch)) {
				return engine.Lease{}, nil, unfillable // no_matching_route: what the others lacked is theirs
			}
			if pe, ok := errors.AsType[*engine.PacedError](err); ok && pe.RetryAfter <= wait {
				d := max(pe.RetryAfter, time.Millisecond)
				if sleep(ctx, d) {
					wait -= d
					continue
				}
			}
			return engine.Lease{}, nil, err
		}
		if ctl.strict && (l.Fallback || l.Panic) && !g.eligible(l) {
			// Panic lifts exclusions to spread load, so a pick then may
			// be a route cooling for the target: a strict request passes
			// over it, and refuses rather than take the least bad.
			g.giveBack(l)
			if strictSkips++; strictSkips > maxStrictSkips {
				return engine.Lease{}, nil, engine.ErrNoRoute
			}
			avoid = append(avoid, l.Route)
			continue
		}
		if !s.paces || s.targets.Pace(target).PairRate == 0 {
			return l, x, nil
		}
		err = g.pacer.Pair(ctx, l.Route, target)
		if err == nil {
			return l, x, nil
		}
		g.giveBack(l)
		if !errors.As(err, new(*pacing.Error)) || bound(l) || len(avoid)-len(tried) >= maxPoliteSkips {
			return engine.Lease{}, nil, err
		}
		paced = err
		avoid = append(avoid, l.Route)
	}
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// tooSoon answers a paced request: 429 with the wait in Retry-After, whole
// seconds rounded up (RFC 9110 §10.2.3). Reason "learned" is the engine's
// pacing from the target's own 429s; the others are the operator's limits.
// rec, when not nil, keeps e for the request's log line.
func tooSoon(w http.ResponseWriter, rec *record, e *pacing.Error) {
	if rec != nil {
		rec.paced = e
	}
	secs := engine.RetryAfterSeconds(e.RetryAfter)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	what := "the target"
	if e.Target != "" {
		what = "target " + e.Target
	}
	fail(w, http.StatusTooManyRequests, "paced", fmt.Sprintf("switchyard: %s is paced (%s); retry after %s", what, e.Reason, time.Duration(secs)*time.Second))
}

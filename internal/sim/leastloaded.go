package sim

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// HAProxy's health-check defaults for a server line with `check`: a TCP
// connect every 2s, down after 3 failures in a row, up after 2 successes.
const (
	haproxyCheckInterval = 2 * time.Second
	haproxyFall          = 3
	haproxyRise          = 2
)

var (
	_ Policy  = (*leastLoaded)(nil)
	_ retrier = (*leastLoaded)(nil)
)

// leastLoaded is HAProxy's `balance leastconn` over a pool of HTTP proxies
// as its documentation configures one: TCP health checks (`check`), and
// `retries` with `option redispatch`, which retry a failed connection on
// another server and nothing else; a fixed `timeout server`, no deadlines,
// no hedges, no view of what the site answered. A request its client gave
// up on keeps its connection to the server, and its count there, until
// the server answers or `timeout server` passes (without `option
// abortonclose`, measured with HAProxy 2.6): taken here as the timeout,
// since the attempts a client gives up on are a silent exit's. A silent
// exit so fills up with abandoned requests and leastconn passes over it.
type leastLoaded struct {
	timeoutServer time.Duration // immutable

	// Owner goroutine only.
	routes    int
	inflight  []int32 // requests on each route's connections, abandoned ones included
	abandoned minHeap[abandoned, *abandoned]
	up        []bool
	streak    []int8 // consecutive check results: > 0 successes, < 0 failures
	next      int    // where the next pick's scan starts: equally loaded routes take turns
	nextCheck time.Time
}

// abandoned is a request its client gave up on, whose server connection
// HAProxy keeps until then.
type abandoned struct {
	until time.Time
	route int
}

func (a *abandoned) before(b *abandoned) bool { return a.until.Before(b.until) }

// NewLeastLoaded returns the least_loaded baseline: of the routes the
// health checks say are up, the one with the fewest requests in flight;
// timeoutServer is HAProxy's `timeout server` (the gateway's attempt
// timeout in a scenario).
func NewLeastLoaded(w World, timeoutServer time.Duration) Policy {
	n := w.Routes()
	p := &leastLoaded{
		timeoutServer: timeoutServer,
		routes:        n,
		inflight:      make([]int32, n),
		up:            make([]bool, n),
		streak:        make([]int8, n),
	}
	for i := range p.up {
		p.up[i] = true // HAProxy starts a checked server up
	}
	return p
}

// Pick implements Policy: the route up with the fewest attempts in
// flight, not avoided; as in HAProxy's leastconn, routes equally loaded
// take turns (a scan from past the last pick). The ticket is the route.
func (p *leastLoaded) Pick(now time.Time, _ int, _ string, avoid []int) (Attempt, bool) {
	for len(p.abandoned.items) > 0 && !now.Before(p.abandoned.items[0].until) {
		p.inflight[p.abandoned.pop().route]--
	}
	best := -1
	for i := range p.routes {
		r := (p.next + i) % p.routes
		if !p.up[r] || slices.Contains(avoid, r) {
			continue
		}
		if best < 0 || p.inflight[r] < p.inflight[best] {
			best = r
		}
	}
	if best < 0 {
		return Attempt{}, false // HAProxy answers 503: no server available
	}
	p.next = best + 1
	p.inflight[best]++
	return Attempt{Route: best, Ticket: uint64(best)}, true
}

// Report implements Policy: HAProxy does not judge servers by the answers
// it relays. A request the client gave up on stays on its server's count
// until timeout server.
func (p *leastLoaded) Report(now time.Time, ticket uint64, r Result) {
	if r.Class == engine.Canceled {
		p.abandoned.push(abandoned{until: now.Add(p.timeoutServer - r.Latency), route: int(ticket)})
		return
	}
	p.inflight[ticket]--
}

// Request implements retrier.
func (p *leastLoaded) Request(time.Time) {}

// Retry implements retrier: redispatch after a failed connection only.
func (p *leastLoaded) Retry(_ time.Time, _ int, c engine.Class) bool {
	return c == engine.ProxyConnectFailed
}

// Tick implements Policy: the TCP health checks.
func (p *leastLoaded) Tick(now time.Time, probe Prober) {
	if now.Before(p.nextCheck) {
		return
	}
	p.nextCheck = now.Add(haproxyCheckInterval)
	for r := range p.routes {
		probe(r, tcpCheck, func(_ time.Time, res Result) {
			ok := res.Class == engine.OK
			switch {
			case ok && p.streak[r] < 0, !ok && p.streak[r] > 0:
				p.streak[r] = 0
			}
			if ok {
				p.streak[r] = min(p.streak[r]+1, haproxyRise)
			} else {
				p.streak[r] = max(p.streak[r]-1, -haproxyFall)
			}
			switch {
			case p.streak[r] >= haproxyRise:
				p.up[r] = true
			case p.streak[r] <= -haproxyFall:
				p.up[r] = false
			}
		})
	}
}

package sim

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// glider's forwarder defaults: a check page fetched through every
// forwarder every 30s, and a forwarder disabled after 3 failures until its
// next good check.
const (
	gliderCheckInterval = 30 * time.Second
	gliderMaxFailures   = 3
)

var (
	_ Policy  = (*fastest)(nil)
	_ retrier = (*fastest)(nil)
)

// fastest is glider's `-strategy lha` (lowest latency, high availability):
// every forwarder's check latency is measured by fetching a page through
// it, and every request goes to the enabled forwarder that checked
// fastest. Failures to connect or answer count against a forwarder; what
// the site answered does not. No retries.
type fastest struct {
	// Owner goroutine only.
	routes    int
	latency   []time.Duration // last check's time; 0 before the first
	enabled   []bool
	failures  []int
	nextCheck time.Time
}

// NewFastest returns the fastest baseline.
func NewFastest(w World) Policy {
	n := w.Routes()
	p := &fastest{routes: n, latency: make([]time.Duration, n), enabled: make([]bool, n), failures: make([]int, n)}
	for i := range p.enabled {
		p.enabled[i] = true
	}
	return p
}

// Pick implements Policy: the enabled route with the lowest check latency,
// the first on a tie. The ticket is the route.
func (p *fastest) Pick(_ time.Time, _ int, _ string, avoid []int) (Attempt, bool) {
	best := -1
	for r := range p.routes {
		if !p.enabled[r] || slices.Contains(avoid, r) {
			continue
		}
		if best < 0 || p.latency[r] < p.latency[best] {
			best = r
		}
	}
	if best < 0 {
		return Attempt{}, false
	}
	return Attempt{Route: best, Ticket: uint64(best)}, true
}

// Report implements Policy: a forwarder that could not be reached or did
// not answer counts a failure; any answer resets the count.
func (p *fastest) Report(_ time.Time, ticket uint64, r Result) {
	switch r.Class {
	case engine.ProxyConnectFailed, engine.ProxyTimeout:
		if p.failures[ticket]++; p.failures[ticket] >= gliderMaxFailures {
			p.enabled[ticket] = false
		}
	case engine.Canceled:
	default:
		p.failures[ticket] = 0
	}
}

// Request implements retrier.
func (p *fastest) Request(time.Time) {}

// Retry implements retrier: glider does not retry on another forwarder.
func (p *fastest) Retry(time.Time, int, engine.Class) bool { return false }

// Tick implements Policy: the checks.
func (p *fastest) Tick(now time.Time, probe Prober) {
	if now.Before(p.nextCheck) {
		return
	}
	p.nextCheck = now.Add(gliderCheckInterval)
	for r := range p.routes {
		probe(r, checkPage, func(_ time.Time, res Result) {
			if res.Class != engine.OK {
				p.enabled[r] = false
				return
			}
			p.latency[r], p.enabled[r], p.failures[r] = res.Latency, true, 0
		})
	}
}

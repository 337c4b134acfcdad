package livebench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// router carries a task's attempts: it says how the next one goes out.
// A gateway sends every attempt the same way; a client-side contender picks
// an exit for each.
type router interface {
	// route returns the client for the next attempt of a task to site and
	// the exit it goes through (-1 when a gateway chooses), given the exits
	// of the task's earlier attempts. It may wait for capacity, up to ctx.
	route(ctx context.Context, site string, tried []int) (c *http.Client, exit int, err error)
}

// load is the crawler: workers running tasks back to back until the
// duration ends. A task is a GET of a random page of a site drawn from the
// mix, tried up to attempts times (on an error, a timeout, a non-2xx or a
// captcha page), each attempt cut after timeout. It completes when an
// attempt gets the real page.
type load struct {
	workers  int
	duration time.Duration
	timeout  time.Duration
	attempts int
	seed     uint64
	marker   []byte // the captcha page's tell
	mix      []siteWeight
	scheme   string // of the pages fetched: http or https
}

// newLoad is the load opts describe over the site mix.
func newLoad(opts Options) load {
	return load{
		workers: opts.Workers, duration: opts.Duration, timeout: opts.Timeout,
		attempts: opts.Attempts, seed: opts.Seed, marker: []byte(opts.CaptchaMarker), mix: siteMix,
		scheme: map[bool]string{false: "http", true: "https"}[opts.HTTPS],
	}
}

// loadResult is what one run of the load measured.
type loadResult struct {
	elapsed   time.Duration   // the load's wall time
	completed int             // tasks that got the real page
	failed    int             // tasks that finished without it
	cut       int             // tasks still running when the time was up: not counted either way
	givenUp   int             // failed tasks the router gave up without an attempt (the oracle's)
	latencies []time.Duration // of finished tasks, sorted once merged
	attempts  int             // client attempts that ended before the time was up
	// gatewayAttempts sums the X-Switchyard-Attempts of the answers.
	gatewayAttempts int
	// outcomes tallies client attempts by how they ended.
	outcomes tallies
}

// tally counts the attempts of one outcome and the time they took.
type tally struct {
	count int
	time  time.Duration
}

// tallies are attempts by outcome.
type tallies map[string]tally

// note adds t to outcome's tally in r.
func (r *loadResult) note(outcome string, t tally) {
	if r.outcomes == nil {
		r.outcomes = make(tallies)
	}
	cur := r.outcomes[outcome]
	cur.count += t.count
	cur.time += t.time
	r.outcomes[outcome] = cur
}

// merge adds o's counts to r.
func (r *loadResult) merge(o loadResult) {
	r.completed += o.completed
	r.failed += o.failed
	r.cut += o.cut
	r.givenUp += o.givenUp
	r.latencies = append(r.latencies, o.latencies...)
	r.attempts += o.attempts
	r.gatewayAttempts += o.gatewayAttempts
	for k, t := range o.outcomes {
		r.note(k, t)
	}
}

// run runs the load through r until the duration ends or ctx does, and
// returns when every worker has stopped.
func (l load) run(ctx context.Context, r router) loadResult {
	// The deadline counts from start: timed from after it, the load's
	// time could come out short of the duration by a preemption.
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(l.duration))
	defer cancel()
	parts := make([]loadResult, l.workers)
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(l.seed, uint64(w)))
			for !runOver(ctx) {
				l.task(ctx, r, rng, &parts[w])
			}
		})
	}
	wg.Wait()
	total := loadResult{elapsed: time.Since(start)}
	for _, p := range parts {
		total.merge(p)
	}
	slices.Sort(total.latencies)
	return total
}

// site draws a site from the mix.
func (l load) site(rng *rand.Rand) string {
	sum := 0
	for _, s := range l.mix {
		sum += s.weight
	}
	x := rng.IntN(sum)
	for _, s := range l.mix {
		if x < s.weight {
			return s.host
		}
		x -= s.weight
	}
	return l.mix[len(l.mix)-1].host
}

// task runs one task and records it in res.
func (l load) task(ctx context.Context, r router, rng *rand.Rand, res *loadResult) {
	site := l.site(rng)
	path := "/p/" + strconv.Itoa(rng.IntN(1000))
	start := time.Now()
	var tried []int
	for range l.attempts {
		c, exit, err := r.route(ctx, site, tried)
		if errors.Is(err, errGiveUp) && !runOver(ctx) {
			res.givenUp++
			break
		}
		if err != nil || runOver(ctx) {
			res.cut++
			return
		}
		tried = append(tried, exit)
		outcome, gw, took := l.attempt(ctx, c, site, path)
		if outcome == outcomeCut {
			res.cut++
			return
		}
		res.attempts++
		res.gatewayAttempts += gw
		res.note(outcome, tally{count: 1, time: took})
		if outcome == outcomeOK {
			res.completed++
			res.latencies = append(res.latencies, time.Since(start))
			return
		}
	}
	res.failed++
	res.latencies = append(res.latencies, time.Since(start))
}

// Outcomes of a client attempt, besides "http NNN [switchyard error]".
const (
	outcomeOK      = "ok"
	outcomeCaptcha = "captcha page"
	outcomeWrong   = "wrong page"
	outcomeTimeout = "client timeout"
	outcomeRefused = "connection refused"
	outcomeError   = "transport error"
	outcomeCut     = "cut at the end"
)

// runOver reports whether the run is over: ctx is done or its deadline,
// the run's end, has passed. The context notices its deadline only when
// its timer fires, which a loaded machine delays: an attempt whose own
// timeout fell a moment before the end fires first and must not count as
// a client timeout, and no attempt may start past the end, sending a
// request the load does not count.
func runOver(ctx context.Context) bool {
	end, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(end)
}

// attempt GETs site's page at path with c and says how it ended, the
// gateway attempts its answer reports, and how long it took.
func (l load) attempt(ctx context.Context, c *http.Client, site, path string) (outcome string, gatewayAttempts int, took time.Duration) {
	actx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, l.scheme+"://"+site+path, nil)
	if err != nil {
		return outcomeError, 0, 0
	}
	resp, err := c.Do(req)
	var body []byte
	if err == nil {
		gatewayAttempts, _ = strconv.Atoi(resp.Header.Get("X-Switchyard-Attempts"))
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	took = time.Since(start)
	switch {
	case runOver(ctx):
		return outcomeCut, 0, took
	case err != nil && actx.Err() != nil:
		return outcomeTimeout, gatewayAttempts, took
	case errors.Is(err, syscall.ECONNREFUSED):
		return outcomeRefused, 0, took
	case err != nil:
		return outcomeError, gatewayAttempts, took
	case resp.StatusCode != http.StatusOK:
		label := "http " + strconv.Itoa(resp.StatusCode)
		if e := resp.Header.Get("X-Switchyard-Error"); e != "" {
			label += " " + e
		}
		return label, gatewayAttempts, took
	case bytes.Contains(body, l.marker):
		return outcomeCaptcha, gatewayAttempts, took
	case !bytes.Contains(body, []byte(pageTag(site, path))):
		return outcomeWrong, gatewayAttempts, took
	}
	return outcomeOK, gatewayAttempts, took
}

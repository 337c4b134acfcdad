package sim

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Load is the client model of a run: how many workers, how many tasks and
// each task's budget.
type Load struct {
	Seed           uint64
	Tasks          int
	Workers        int
	AttemptTimeout time.Duration
	MaxAttempts    int
	TaskDeadline   time.Duration
	Think          time.Duration // pause between a worker's tasks
	// SessionTasks, when positive, groups each worker's tasks in sticky
	// sessions of that many tasks; a task's first attempt uses the session,
	// its retries go anywhere.
	SessionTasks int
	// TargetWeights is each target's share of tasks; nil means even.
	TargetWeights []float64
}

// Epoch is the virtual clock's start, the same for every run.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seriesBucket is the width of a plot point, and faultBucket of the
// buckets that time detection and recovery.
const (
	seriesBucket = 5 * time.Second
	faultBucket  = time.Second
)

// Run simulates load against w through p and measures it. The task stream
// (targets, randomness of the world) depends only on load.Seed, so every
// policy faces the same tasks. progress, when not nil, is told of each
// finished task.
func Run(w World, p Policy, load Load, progress func(int)) Summary {
	r := runner{
		w: w, p: p, load: load,
		tasks: rand.New(rand.NewPCG(load.Seed, 1)),
		world: rand.New(rand.NewPCG(load.Seed, 2)),
	}
	r.init()
	wall := time.Now()
	r.loop(progress)
	s := r.summary()
	if elapsed := time.Since(wall).Seconds(); elapsed > 0 {
		s.AttemptsPerSecond = float64(s.Attempts) / elapsed
	}
	return s
}

// runner is one simulation run. It is used by one goroutine.
type runner struct {
	w     World
	p     Policy
	load  Load
	tasks *rand.Rand // draws task targets
	world *rand.Rand // draws the world's randomness

	now     time.Duration
	queue   eventQueue
	workers []worker
	next    int // next task to hand out
	cum     []float64

	completed, failed int
	attempts, wasted  int
	incident          int
	latencies         []time.Duration
	series            []bucket
	faults            []faultTrack
}

type worker struct {
	target   int
	started  time.Duration
	attempts int
	avoid    []int
	session  string
	sessions int // sessions started
	left     int // tasks left in the session
	// the attempt in flight
	route  int
	ticket uint64
	result Result
}

type bucket struct{ finished, completed, attempts, bad int }

func (r *runner) init() {
	weights := r.load.TargetWeights
	r.cum = make([]float64, r.w.Targets())
	sum := 0.0
	for i := range r.cum {
		wt := 1.0
		if weights != nil {
			wt = weights[i]
		}
		sum += wt
		r.cum[i] = sum
	}
	r.workers = make([]worker, r.load.Workers)
	for i := range r.workers {
		r.queue.push(event{at: 0, worker: i, kind: evStart})
	}
	r.queue.push(event{at: time.Second, kind: evTick})
	for _, f := range r.w.Faults() {
		r.faults = append(r.faults, newFaultTrack(f, r.w.Routes()))
	}
}

func (r *runner) loop(progress func(int)) {
	probe := func(route, target int) Result {
		return r.w.Attempt(route, target, r.now, r.world)
	}
	busy := len(r.workers)
	for len(r.queue.items) > 0 && busy > 0 {
		ev := r.queue.pop()
		r.now = ev.at
		switch ev.kind {
		case evTick:
			r.p.Tick(Epoch.Add(r.now), probe)
			r.queue.push(event{at: r.now + time.Second, kind: evTick})
		case evStart:
			if !r.startTask(ev.worker) {
				busy--
			}
		case evDone:
			if r.finishAttempt(ev.worker) && progress != nil {
				progress(1)
			}
		case evRetry:
			r.attempt(ev.worker)
		}
	}
}

// startTask hands the worker its next task; false when none are left.
func (r *runner) startTask(i int) bool {
	if r.next >= r.load.Tasks {
		return false
	}
	r.next++
	wk := &r.workers[i]
	x := r.tasks.Float64() * r.cum[len(r.cum)-1]
	wk.target, _ = slices.BinarySearch(r.cum, x)
	wk.target = min(wk.target, len(r.cum)-1)
	wk.started, wk.attempts, wk.avoid = r.now, 0, wk.avoid[:0]
	if r.load.SessionTasks > 0 {
		if wk.left == 0 {
			wk.sessions++
			wk.session = "w" + strconv.Itoa(i) + "-" + strconv.Itoa(wk.sessions)
			wk.left = r.load.SessionTasks
		}
		wk.left--
	}
	r.attempt(i)
	return true
}

// noRouteWait is how long a client told that no route can carry its
// request now waits before asking again, unless the policy says when one
// will be ready (retryHinter).
const noRouteWait = time.Second

// retryHinter is a Policy that, after offering no route, can say when it
// will have one.
type retryHinter interface {
	RetryIn() time.Duration
}

// attempt sends the worker's next attempt; when the policy offers nothing,
// it asks again after noRouteWait, or fails the task past its deadline.
func (r *runner) attempt(i int) {
	wk := &r.workers[i]
	if len(wk.avoid) >= r.w.Routes() {
		wk.avoid = wk.avoid[:0] // every route tried: any may be tried again
	}
	session := ""
	if wk.attempts == 0 {
		session = wk.session
	}
	route, ticket, ok := r.p.Pick(Epoch.Add(r.now), wk.target, session, wk.avoid)
	if !ok {
		// No route can take it now (a gateway's 503, or 429 with the
		// Retry-After the policy knows): the client waits and asks again
		// while the task's deadline allows.
		wait := noRouteWait
		if h, ok := r.p.(retryHinter); ok && h.RetryIn() > 0 {
			wait = h.RetryIn()
		}
		if r.now-wk.started+wait < r.load.TaskDeadline {
			r.queue.push(event{at: r.now + wait, worker: i, kind: evRetry})
			return
		}
		r.endTask(i, false)
		return
	}
	wk.attempts++
	r.attempts++
	bad := r.w.Bad(route, wk.target, r.now)
	if bad {
		r.wasted++
	}
	r.bucketAt(r.now).attempts++
	if bad {
		r.bucketAt(r.now).bad++
	}
	for k := range r.faults {
		r.faults[k].count(r.now, route, wk.target)
		if r.faults[k].SiteDown && r.faults[k].active(r.now) && r.faults[k].covers(route, wk.target) {
			r.incident++
		}
	}
	res := r.w.Attempt(route, wk.target, r.now, r.world)
	if res.Latency > r.load.AttemptTimeout {
		res = Result{Class: engine.TargetTimeout, Latency: r.load.AttemptTimeout}
	}
	wk.route, wk.ticket, wk.result = route, ticket, res
	r.queue.push(event{at: r.now + res.Latency, worker: i, kind: evDone})
}

// finishAttempt reports the attempt in flight and retries or ends the task;
// it reports whether the task ended.
func (r *runner) finishAttempt(i int) bool {
	wk := &r.workers[i]
	r.p.Report(Epoch.Add(r.now), wk.ticket, wk.result)
	if wk.result.Class == engine.OK {
		r.endTask(i, true)
		return true
	}
	retry := engine.DefaultRules.Rule(wk.result.Class).Retry
	if !retry || wk.attempts >= r.load.MaxAttempts || r.now-wk.started >= r.load.TaskDeadline {
		r.endTask(i, false)
		return true
	}
	wk.avoid = append(wk.avoid, wk.route)
	r.attempt(i)
	return false
}

func (r *runner) endTask(i int, ok bool) {
	wk := &r.workers[i]
	b := r.bucketAt(r.now)
	b.finished++
	if ok && r.now-wk.started <= r.load.TaskDeadline {
		r.completed++
		b.completed++
		r.latencies = append(r.latencies, r.now-wk.started)
	} else {
		r.failed++
	}
	r.queue.push(event{at: r.now + r.load.Think, worker: i, kind: evStart})
}

func (r *runner) bucketAt(t time.Duration) *bucket {
	n := int(t / seriesBucket)
	for len(r.series) <= n {
		r.series = append(r.series, bucket{})
	}
	return &r.series[n]
}

func (r *runner) summary() Summary {
	s := Summary{
		Tasks: r.load.Tasks, Completed: r.completed, Attempts: r.attempts, WastedAttempts: r.wasted,
		IncidentAttempts: r.incident, SimulatedSeconds: r.now.Seconds(), DetectMs: -1, RecoverMs: -1,
	}
	if r.load.Tasks > 0 {
		s.CompletionRate = float64(r.completed) / float64(r.load.Tasks)
	}
	if r.completed > 0 {
		s.AttemptsPerCompleted = float64(r.attempts) / float64(r.completed)
	}
	slices.Sort(r.latencies)
	s.P50ms, s.P95ms, s.P99ms = percentileMs(r.latencies, 0.50), percentileMs(r.latencies, 0.95), percentileMs(r.latencies, 0.99)
	s.DetectMs, s.RecoverMs = faultTimes(r.faults, r.w.Routes())
	if ec, ok := r.p.(ejectionCounter); ok {
		s.FalseEjections = ec.FalseEjections()
	}
	if sc, ok := r.p.(sessionCounter); ok {
		s.SessionRestarts = sc.SessionRestarts()
	}
	for i, b := range r.series {
		pt := Point{At: time.Duration(i+1) * seriesBucket}
		if b.finished > 0 {
			pt.Completion = float64(b.completed) / float64(b.finished)
		}
		if b.attempts > 0 {
			pt.BadShare = float64(b.bad) / float64(b.attempts)
		}
		s.Series = append(s.Series, pt)
	}
	return s
}

func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

type eventKind uint8

const (
	evStart eventKind = iota // a worker takes its next task
	evDone                   // a worker's attempt completes
	evRetry                  // a worker asks again for a route after none was offered
	evTick                   // the policy's timed work
)

type event struct {
	at     time.Duration
	seq    uint64 // ties break in push order, for determinism
	worker int
	kind   eventKind
}

// eventQueue is a binary min-heap of events by time, then push order. It
// is typed (not container/heap) so pushing an event does not allocate.
type eventQueue struct {
	items []event
	seq   uint64
}

func (q *eventQueue) less(i, j int) bool {
	a, b := &q.items[i], &q.items[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *eventQueue) push(ev event) {
	ev.seq = q.seq
	q.seq++
	q.items = append(q.items, ev)
	for i := len(q.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q.items[i], q.items[parent] = q.items[parent], q.items[i]
		i = parent
	}
}

func (q *eventQueue) pop() event {
	top := q.items[0]
	last := len(q.items) - 1
	q.items[0] = q.items[last]
	q.items = q.items[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < last && q.less(l, small) {
			small = l
		}
		if r < last && q.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		q.items[i], q.items[small] = q.items[small], q.items[i]
		i = small
	}
	return top
}

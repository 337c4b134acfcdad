package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/tomlpos"
)

// Scenario describes a simulated pool, its targets and the load. Files use
// the TOML keys documented in scenarios/README.md; ParseScenario fills every
// default, so a parsed Scenario states all its values.
type Scenario struct {
	Name        string
	Description string
	Seed        uint64 // seeds the run's randomness; default 1

	Duration time.Duration // simulated time to run; 0: until Tasks are done
	Tasks    int           // tasks to run; 0: as many as Duration allows. One of the two is needed
	Workers  int           // concurrent clients; default 32

	// The gateway: up to MaxAttempts attempts per client request, each at
	// most AttemptTimeout.
	AttemptTimeout time.Duration // default 30s
	MaxAttempts    int           // default 3

	// The client: a task is up to ClientAttempts requests, each given up
	// after ClientTimeout, all within TaskDeadline.
	ClientTimeout  time.Duration // default 10s
	ClientAttempts int           // default 3
	TaskDeadline   time.Duration // default 60s
	Think          time.Duration // pause between a worker's tasks; default 0
	SessionTasks   int           // tasks per sticky session of a worker; default 0, no sessions
	// RetryRefusals makes the client take a refusal (no route now) as a
	// failed request and send its next at once, as a crawler that does not
	// read Retry-After does (the live bench's); default false: the task is
	// set aside for the wait it was told.
	RetryRefusals bool

	Targets []TargetSpec
	Routes  []RouteGroup
}

// TargetSpec is one site the tasks go to.
type TargetSpec struct {
	Name   string
	Weight float64 // share of tasks; default 1
	// Down lists windows when the site fails for every route, which no
	// routing can avoid.
	Down []DownWindow
	// IdenticalPages makes every URL of the site the same page through
	// every route (an API's fixed JSON), which the gateway's lookalike
	// detector must not take for a soft ban.
	IdenticalPages bool
}

// DownWindow is a time when a target is down for everyone.
type DownWindow struct {
	From, Until time.Duration // Until 0: to the end of the run
	Class       engine.Class  // what every attempt gets; default target_5xx
}

// RouteGroup is a set of routes that behave alike: routes Name-1…Name-Count,
// or just Name when Count is 1.
type RouteGroup struct {
	Name        string
	Count       int           // default 1
	Latency     time.Duration // median success latency; default 200ms
	Jitter      float64       // sigma of the lognormal latency; default 0.3
	Weight      float64       // static weight of each route, for the weighted baseline; default 1
	MaxInflight int           // each route's max_inflight, as in a proxy list; default 0, unlimited
	Joins       time.Duration // when the routes join the gateway's list (a reload adds them); default 0, from the start
	// Tier is the routes' cost tier (the route list's tier=); default 0,
	// the cheapest. PricePerRequest is what one attempt through a route
	// costs (price_per_request=), for the cost per completed task; default 0.
	Tier            int
	PricePerRequest float64
	Behaviours      []Behaviour
}

// Behaviour is one way a route group misbehaves, during [From, Until).
// Only the fields of its Kind are set.
type Behaviour struct {
	Kind        Kind
	Target      string        // target name; empty: every target
	From, Until time.Duration // Until 0: to the end of the run

	P          float64       // errors, softban (default 1), degrade: failure probability
	RPS        float64       // ratelimit: requests per second allowed
	RetryAfter time.Duration // ratelimit: penalty; default 30s
	Factor     float64       // slow, degrade: latency multiplier
	Period     time.Duration // flap: length of each up and down phase
	Limit      int           // burstban: requests tolerated per Window
	Window     time.Duration // burstban: the span Limit counts over
	Penalty    time.Duration // burstban: how long a ban lasts; default 5m
}

// Kind names a route behaviour.
type Kind string

// The behaviour kinds; scenarios/README.md documents each.
const (
	KindDead      Kind = "dead"
	KindBlackhole Kind = "blackhole"
	KindErrors    Kind = "errors"
	KindAuth      Kind = "auth"
	KindBan       Kind = "ban"
	KindRatelimit Kind = "ratelimit"
	KindSoftban   Kind = "softban"
	KindSlow      Kind = "slow"
	KindDegrade   Kind = "degrade"
	KindFlap      Kind = "flap"
	KindOutage    Kind = "outage"
	KindBurstban  Kind = "burstban"
)

// kindSpec says which keys beyond kind, target, from and until a kind
// takes, and where it acts. Validate enforces the target of ban and
// ratelimit and the until of degrade.
type kindSpec struct {
	kind               Kind
	required, optional []string
	// exit kinds act on the exit itself, before any target is reached, so
	// they also answer neutral probes.
	exit bool
}

// kindSpecs lists the kinds in the order error messages offer them.
var kindSpecs = []kindSpec{
	{kind: KindDead, exit: true},
	{kind: KindBlackhole, exit: true},
	{kind: KindErrors, required: []string{"p"}},
	{kind: KindAuth, exit: true},
	{kind: KindBan, optional: []string{"p"}},
	{kind: KindRatelimit, required: []string{"rps"}, optional: []string{"retry_after"}},
	{kind: KindSoftban, optional: []string{"p"}},
	{kind: KindSlow, required: []string{"factor"}, exit: true},
	{kind: KindDegrade, required: []string{"factor"}, optional: []string{"p"}},
	{kind: KindFlap, required: []string{"period"}, exit: true},
	{kind: KindOutage, exit: true},
	{kind: KindBurstban, required: []string{"limit", "window"}, optional: []string{"penalty"}},
}

func (s kindSpec) takes(key string) bool {
	return slices.Contains(s.required, key) || slices.Contains(s.optional, key)
}

func specOf(k Kind) (kindSpec, bool) {
	i := slices.IndexFunc(kindSpecs, func(s kindSpec) bool { return s.kind == k })
	if i < 0 {
		return kindSpec{}, false
	}
	return kindSpecs[i], true
}

// Defaults of the scenario keys, as scenarios/README.md documents them:
// the gateway as it ships (retry.max_attempts, retry.attempt_timeout) and
// a crawler that gives a request 10 s and a task three tries.
const (
	defaultSeed           = 1
	defaultWorkers        = 32
	defaultAttemptTimeout = 30 * time.Second
	defaultMaxAttempts    = 3
	defaultClientTimeout  = 10 * time.Second
	defaultClientAttempts = 3
	defaultTaskDeadline   = 60 * time.Second
	defaultLatency        = 200 * time.Millisecond
	defaultJitter         = 0.3
	defaultRetryAfter     = 30 * time.Second
	defaultPenalty        = 5 * time.Minute
)

// maxRoutes bounds a scenario's routes, a hundred times the large
// built-in, so that a typo in a count fails instead of exhausting memory.
const maxRoutes = 1_000_000

// LoadScenario reads and parses a scenario file; errors name path.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(path, data)
}

// ParseScenario parses and validates a scenario file. name is the file name
// errors start with ("mixed.toml:12: …"), and the scenario's name when the
// file has none.
func ParseScenario(name string, data []byte) (*Scenario, error) {
	var f scenarioFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		if pe, ok := errors.AsType[toml.ParseError](err); ok {
			// Line from the offset: the library counts an error at a
			// line's final newline on the next line.
			line := pe.Position.Line
			if at := pe.Position.Start; at >= 0 && at < len(data) {
				line = 1 + bytes.Count(data[:at], []byte("\n"))
			}
			return nil, fmt.Errorf("%s:%d: %s", name, line, pe.Message)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lines := tomlpos.Scan(data)
	if u := md.Undecoded(); len(u) > 0 {
		path, line := lines.First(u[0])
		return nil, locate(name, line, &fieldError{path: path, msg: "unknown key"})
	}
	s, err := f.scenario(strings.TrimSuffix(filepath.Base(name), filepath.Ext(name)))
	if err == nil {
		err = s.Validate()
	}
	if fe, ok := errors.AsType[*fieldError](err); ok {
		return nil, locate(name, lines.Line(fe.lookup()), fe)
	}
	return s, err
}

// locate prefixes err with the file and, when known, the line.
func locate(name string, line int, err error) error {
	if line > 0 {
		return fmt.Errorf("%s:%d: %w", name, line, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// fieldError is a problem with one key, named by its full path
// ("routes[1].behaviours[0].rps") so ParseScenario can find its line.
type fieldError struct {
	path string // what the message names
	at   string // the key that locates it, when not path
	msg  string
}

func (e *fieldError) Error() string { return e.path + ": " + e.msg }

func (e *fieldError) lookup() string {
	if e.at != "" {
		return e.at
	}
	return e.path
}

// Validate reports the first value in s that a scenario file may not hold.
// ParseScenario calls it; call it on a Scenario built in code before World.
func (s *Scenario) Validate() error {
	var c checker
	c.need(s.Tasks >= 0, "tasks", "must not be negative")
	c.need(s.Duration >= 0, "duration", "must not be negative")
	c.need(s.Tasks > 0 || s.Duration > 0, "tasks", "a scenario needs tasks or a duration")
	c.need(s.Workers > 0, "workers", "must be positive")
	c.need(s.AttemptTimeout > 0, "attempt_timeout", "must be positive")
	c.need(s.MaxAttempts > 0, "max_attempts", "must be positive")
	c.need(s.TaskDeadline > 0, "task_deadline", "must be positive")
	c.need(s.ClientTimeout > 0, "client_timeout", "must be positive")
	c.need(s.ClientAttempts > 0, "client_attempts", "must be positive")
	c.need(s.Think >= 0, "think", "must not be negative")
	c.need(s.SessionTasks >= 0, "session_tasks", "must not be negative")
	c.need(len(s.Targets) > 0, "targets", "at least one [[targets]] is needed")
	c.need(len(s.Routes) > 0, "routes", "at least one [[routes]] is needed")

	targets := make(map[string]bool, len(s.Targets))
	var weights float64
	for i, t := range s.Targets {
		p := fmt.Sprintf("targets[%d]", i)
		c.need(t.Name != "", p+".name", "missing")
		c.need(!targets[t.Name], p+".name", fmt.Sprintf("duplicate target %q", t.Name))
		targets[t.Name] = true
		c.need(t.Weight >= 0, p+".weight", "must not be negative")
		weights += t.Weight
		for j, w := range t.Down {
			c.window(fmt.Sprintf("%s.down[%d]", p, j), w.From, w.Until)
			c.need(w.Class != engine.OK, fmt.Sprintf("%s.down[%d].class", p, j), "a down target cannot answer ok")
		}
	}
	c.need(len(s.Targets) == 0 || weights > 0, "targets", "every weight is 0: no task has a target")

	ids := make(map[string]bool)
	for i, g := range s.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		c.need(g.Name != "", p+".name", "missing")
		c.need(g.Count > 0, p+".count", "must be positive")
		c.need(len(ids)+g.Count <= maxRoutes, p+".count", fmt.Sprintf("more than %d routes in the scenario", maxRoutes))
		c.need(g.Latency > 0, p+".latency", "must be positive")
		c.need(g.Jitter >= 0, p+".jitter", "must not be negative")
		c.need(g.Weight >= 0, p+".weight", "must not be negative")
		c.need(g.MaxInflight >= 0, p+".max_inflight", "must not be negative")
		c.need(g.Joins >= 0, p+".joins", "must not be negative")
		c.need(g.Tier >= 0 && g.Tier <= engine.MaxTier, p+".tier", fmt.Sprintf("must be in [0, %d]", engine.MaxTier))
		c.need(g.PricePerRequest >= 0, p+".price_per_request", "must not be negative")
		if c.err != nil {
			break
		}
		for r := range g.Count {
			id := routeID(g, r)
			c.need(!ids[id], p+".name", fmt.Sprintf("route %q is named twice", id))
			ids[id] = true
		}
		for j, b := range g.Behaviours {
			c.behaviour(fmt.Sprintf("%s.behaviours[%d]", p, j), b, targets)
		}
	}
	if c.err == nil {
		return nil
	}
	return c.err
}

// firstError keeps the first failed check: later checks may read values
// an earlier failure left unset.
type firstError struct{ err *fieldError }

func (e *firstError) need(ok bool, path, msg string) {
	if !ok && e.err == nil {
		e.err = &fieldError{path: path, msg: msg}
	}
}

// checker holds the checks of Validate.
type checker struct{ firstError }

func (c *checker) window(p string, from, until time.Duration) {
	c.need(from >= 0, p+".from", "must not be negative")
	c.need(until == 0 || until > from, p+".until", "must be after from")
}

func (c *checker) behaviour(p string, b Behaviour, targets map[string]bool) {
	spec, ok := specOf(b.Kind)
	if !ok {
		c.need(false, p+".kind", fmt.Sprintf("unknown kind %q", b.Kind))
		return
	}
	c.need(b.Target == "" || targets[b.Target], p+".target", fmt.Sprintf("unknown target %q", b.Target))
	c.need(b.Kind != KindBan || b.Target != "", p+".target", fmt.Sprintf("%s needs a target", b.Kind))
	c.window(p, b.From, b.Until)
	// The ramp needs an end.
	c.need(b.Kind != KindDegrade || b.Until != 0, p+".until", "degrade needs until")
	// Fields of other kinds are zero in a parsed Behaviour; a Behaviour
	// built in code must not carry them either, or Encode would drop them.
	for _, v := range []struct {
		key  string
		zero bool
		ok   bool
	}{
		{"p", b.P == 0, b.P >= 0 && b.P <= 1},
		{"rps", b.RPS == 0, b.RPS > 0},
		{"retry_after", b.RetryAfter == 0, b.RetryAfter > 0},
		{"factor", b.Factor == 0, b.Factor > 0},
		{"period", b.Period == 0, b.Period > 0},
		{"limit", b.Limit == 0, b.Limit > 0},
		{"window", b.Window == 0, b.Window > 0},
		{"penalty", b.Penalty == 0, b.Penalty > 0},
	} {
		switch {
		case !spec.takes(v.key):
			c.need(v.zero, p+"."+v.key, fmt.Sprintf("not a key of kind %q", b.Kind))
		case v.key == "p":
			c.need(v.ok, p+".p", "must be between 0 and 1")
		default:
			c.need(v.ok, p+"."+v.key, "must be positive")
		}
	}
}

// routeID names route r (from 0) of group g.
func routeID(g RouteGroup, r int) string {
	if g.Count == 1 {
		return g.Name
	}
	return fmt.Sprintf("%s-%d", g.Name, r+1)
}

// scenarioFile mirrors a scenario file. Leaves are any so that parsing can
// tell a missing key from a zero one and name a wrongly typed key with its
// array indices, which the TOML library's errors leave out.
type scenarioFile struct {
	Name           any          `toml:"name,omitempty"`
	Description    any          `toml:"description,omitempty"`
	Seed           any          `toml:"seed,omitempty"`
	Duration       any          `toml:"duration,omitempty"`
	Tasks          any          `toml:"tasks,omitempty"`
	Workers        any          `toml:"workers,omitempty"`
	AttemptTimeout any          `toml:"attempt_timeout,omitempty"`
	MaxAttempts    any          `toml:"max_attempts,omitempty"`
	ClientTimeout  any          `toml:"client_timeout,omitempty"`
	ClientAttempts any          `toml:"client_attempts,omitempty"`
	TaskDeadline   any          `toml:"task_deadline,omitempty"`
	Think          any          `toml:"think,omitempty"`
	SessionTasks   any          `toml:"session_tasks,omitempty"`
	RetryRefusals  any          `toml:"retry_refusals,omitempty"`
	Targets        []targetFile `toml:"targets,omitempty"`
	Routes         []routeFile  `toml:"routes,omitempty"`
}

type targetFile struct {
	Name           any          `toml:"name,omitempty"`
	Weight         any          `toml:"weight,omitempty"`
	IdenticalPages any          `toml:"identical_pages,omitempty"`
	Down           []windowFile `toml:"down,omitempty"`
}

type windowFile struct {
	From  any `toml:"from,omitempty"`
	Until any `toml:"until,omitempty"`
	Class any `toml:"class,omitempty"`
}

type routeFile struct {
	Name        any             `toml:"name,omitempty"`
	Count       any             `toml:"count,omitempty"`
	Latency     any             `toml:"latency,omitempty"`
	Jitter      any             `toml:"jitter,omitempty"`
	Weight      any             `toml:"weight,omitempty"`
	MaxInflight any             `toml:"max_inflight,omitempty"`
	Joins       any             `toml:"joins,omitempty"`
	Tier        any             `toml:"tier,omitempty"`
	Price       any             `toml:"price_per_request,omitempty"`
	Behaviours  []behaviourFile `toml:"behaviours,omitempty"`
}

type behaviourFile struct {
	Kind       any `toml:"kind,omitempty"`
	Target     any `toml:"target,omitempty"`
	From       any `toml:"from,omitempty"`
	Until      any `toml:"until,omitempty"`
	P          any `toml:"p,omitempty"`
	RPS        any `toml:"rps,omitempty"`
	RetryAfter any `toml:"retry_after,omitempty"`
	Factor     any `toml:"factor,omitempty"`
	Period     any `toml:"period,omitempty"`
	Limit      any `toml:"limit,omitempty"`
	Window     any `toml:"window,omitempty"`
	Penalty    any `toml:"penalty,omitempty"`
}

// specificKeys are the kind-specific keys of a behaviour, in file order.
var specificKeys = []string{"p", "rps", "retry_after", "factor", "period", "limit", "window", "penalty"}

// specific lists the kind-specific keys of b, set or not.
func (b *behaviourFile) specific() map[string]any {
	return map[string]any{
		"p": b.P, "rps": b.RPS, "retry_after": b.RetryAfter, "factor": b.Factor, "period": b.Period,
		"limit": b.Limit, "window": b.Window, "penalty": b.Penalty,
	}
}

// scenario converts f, applying the defaults; name is the fallback name.
func (f *scenarioFile) scenario(name string) (*Scenario, error) {
	var d leafDecoder
	s := &Scenario{
		Name:           d.str(f.Name, "name", name),
		Description:    d.str(f.Description, "description", ""),
		Duration:       d.duration(f.Duration, "duration", 0),
		Tasks:          d.integer(f.Tasks, "tasks", 0),
		Workers:        d.integer(f.Workers, "workers", defaultWorkers),
		AttemptTimeout: d.duration(f.AttemptTimeout, "attempt_timeout", defaultAttemptTimeout),
		MaxAttempts:    d.integer(f.MaxAttempts, "max_attempts", defaultMaxAttempts),
		ClientAttempts: d.integer(f.ClientAttempts, "client_attempts", defaultClientAttempts),
		TaskDeadline:   d.duration(f.TaskDeadline, "task_deadline", defaultTaskDeadline),
		Think:          d.duration(f.Think, "think", 0),
		SessionTasks:   d.integer(f.SessionTasks, "session_tasks", 0),
		RetryRefusals:  d.boolean(f.RetryRefusals, "retry_refusals", false),
	}
	s.ClientTimeout = d.duration(f.ClientTimeout, "client_timeout", defaultClientTimeout)
	seed := d.integer(f.Seed, "seed", defaultSeed)
	d.need(seed >= 0, "seed", "must not be negative")
	s.Seed = uint64(seed)
	d.need(f.Tasks != nil || f.Duration != nil, "tasks", "missing: give tasks or duration")
	for i, tf := range f.Targets {
		p := fmt.Sprintf("targets[%d]", i)
		t := TargetSpec{
			Name:           d.str(tf.Name, p+".name", ""),
			Weight:         d.number(tf.Weight, p+".weight", 1),
			IdenticalPages: d.boolean(tf.IdenticalPages, p+".identical_pages", false),
		}
		for j, wf := range tf.Down {
			wp := fmt.Sprintf("%s.down[%d]", p, j)
			t.Down = append(t.Down, DownWindow{
				From:  d.duration(wf.From, wp+".from", 0),
				Until: d.duration(wf.Until, wp+".until", 0),
				Class: d.class(wf.Class, wp+".class", engine.Target5xx),
			})
		}
		s.Targets = append(s.Targets, t)
	}
	for i, rf := range f.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		g := RouteGroup{
			Name:    d.str(rf.Name, p+".name", ""),
			Count:   d.integer(rf.Count, p+".count", 1),
			Latency: d.duration(rf.Latency, p+".latency", defaultLatency),
			Jitter:  d.number(rf.Jitter, p+".jitter", defaultJitter),
			Weight:  d.number(rf.Weight, p+".weight", 1),
		}
		g.MaxInflight = d.integer(rf.MaxInflight, p+".max_inflight", 0)
		g.Joins = d.duration(rf.Joins, p+".joins", 0)
		g.Tier = d.integer(rf.Tier, p+".tier", 0)
		g.PricePerRequest = d.number(rf.Price, p+".price_per_request", 0)
		for j, bf := range rf.Behaviours {
			g.Behaviours = append(g.Behaviours, d.behaviour(fmt.Sprintf("%s.behaviours[%d]", p, j), &bf))
		}
		s.Routes = append(s.Routes, g)
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

// leafDecoder converts the leaves of a scenarioFile; after an error it
// only returns defaults.
type leafDecoder struct{ firstError }

func (d *leafDecoder) typeErr(path, want string, v any) {
	var got string
	switch v.(type) {
	case string:
		got = "a string"
	case int64:
		got = "an integer"
	case float64:
		got = "a float"
	case bool:
		got = "a boolean"
	case []any, []map[string]any:
		got = "an array"
	case map[string]any:
		got = "a table"
	default:
		got = "a date or time"
	}
	d.need(false, path, fmt.Sprintf("want %s, not %s", want, got))
}

func (d *leafDecoder) str(v any, path, def string) string {
	if v == nil || d.err != nil {
		return def
	}
	s, ok := v.(string)
	if !ok {
		d.typeErr(path, "a string", v)
	}
	return s
}

func (d *leafDecoder) integer(v any, path string, def int) int {
	if v == nil || d.err != nil {
		return def
	}
	n, ok := v.(int64)
	if !ok {
		d.typeErr(path, "an integer", v)
	}
	return int(n)
}

func (d *leafDecoder) boolean(v any, path string, def bool) bool {
	if v == nil || d.err != nil {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		d.typeErr(path, "a boolean", v)
	}
	return b
}

func (d *leafDecoder) number(v any, path string, def float64) float64 {
	if v == nil || d.err != nil {
		return def
	}
	switch n := v.(type) {
	case float64:
		// nan and inf would poison latencies and probabilities.
		d.need(!math.IsNaN(n) && !math.IsInf(n, 0), path, "must be a finite number")
		return n
	case int64:
		return float64(n)
	}
	d.typeErr(path, "a number", v)
	return def
}

func (d *leafDecoder) duration(v any, path string, def time.Duration) time.Duration {
	if v == nil || d.err != nil {
		return def
	}
	s, ok := v.(string)
	if !ok {
		d.typeErr(path, `a duration string like "250ms"`, v)
		return def
	}
	x, err := time.ParseDuration(s)
	d.need(err == nil, path, fmt.Sprintf("bad duration %q (want e.g. \"250ms\", \"2m\")", s))
	return x
}

func (d *leafDecoder) class(v any, path string, def engine.Class) engine.Class {
	s := d.str(v, path, "")
	if v == nil || d.err != nil {
		return def
	}
	c, err := engine.ParseClass(s)
	d.need(err == nil, path, fmt.Sprintf("unknown class %q", s))
	return c
}

func (d *leafDecoder) behaviour(p string, bf *behaviourFile) Behaviour {
	kind := Kind(d.str(bf.Kind, p+".kind", ""))
	if d.err != nil {
		return Behaviour{}
	}
	spec, ok := specOf(kind)
	if !ok {
		want := make([]string, len(kindSpecs))
		for i, s := range kindSpecs {
			want[i] = string(s.kind)
		}
		msg := fmt.Sprintf("unknown kind %q (want %s)", kind, strings.Join(want, ", "))
		if bf.Kind == nil {
			msg = "missing kind"
		}
		d.err = &fieldError{path: p, at: p + ".kind", msg: msg}
		return Behaviour{}
	}
	keys := bf.specific()
	// In file order, so the first error is the first in the file.
	for _, key := range specificKeys {
		d.need(keys[key] == nil || spec.takes(key), p+"."+key, fmt.Sprintf("not a key of kind %q", kind))
	}
	for _, key := range spec.required {
		if keys[key] == nil && d.err == nil {
			d.err = &fieldError{path: p, at: p + ".kind", msg: fmt.Sprintf("%s needs %s", kind, key)}
		}
	}
	var defaultP float64
	if kind == KindSoftban || kind == KindBan {
		defaultP = 1
	}
	var retryAfter, penalty time.Duration
	if spec.takes("retry_after") {
		retryAfter = defaultRetryAfter
	}
	if spec.takes("penalty") {
		penalty = defaultPenalty
	}
	return Behaviour{
		Kind:       kind,
		Target:     d.str(bf.Target, p+".target", ""),
		From:       d.duration(bf.From, p+".from", 0),
		Until:      d.duration(bf.Until, p+".until", 0),
		P:          d.number(bf.P, p+".p", defaultP),
		RPS:        d.number(bf.RPS, p+".rps", 0),
		RetryAfter: d.duration(bf.RetryAfter, p+".retry_after", retryAfter),
		Factor:     d.number(bf.Factor, p+".factor", 0),
		Period:     d.duration(bf.Period, p+".period", 0),
		Limit:      d.integer(bf.Limit, p+".limit", 0),
		Window:     d.duration(bf.Window, p+".window", 0),
		Penalty:    d.duration(bf.Penalty, p+".penalty", penalty),
	}
}

// Encode writes s as a scenario file that ParseScenario reads back to an
// equal Scenario, so scenarios built or changed in code can be saved.
func (s *Scenario) Encode() ([]byte, error) {
	if s.Seed > math.MaxInt64 {
		return nil, fmt.Errorf("seed %d does not fit a TOML integer", s.Seed)
	}
	f := scenarioFile{
		Name:           s.Name,
		Description:    optional(s.Description),
		Seed:           int64(s.Seed),
		Duration:       optionalDuration(s.Duration),
		Tasks:          optionalInt(s.Tasks),
		Workers:        int64(s.Workers),
		AttemptTimeout: formatDuration(s.AttemptTimeout),
		MaxAttempts:    int64(s.MaxAttempts),
		ClientTimeout:  formatDuration(s.ClientTimeout),
		ClientAttempts: int64(s.ClientAttempts),
		TaskDeadline:   formatDuration(s.TaskDeadline),
		Think:          optionalDuration(s.Think),
		SessionTasks:   optionalInt(s.SessionTasks),
	}
	if s.RetryRefusals {
		f.RetryRefusals = true
	}
	for _, t := range s.Targets {
		tf := targetFile{Name: t.Name, Weight: t.Weight}
		if t.IdenticalPages {
			tf.IdenticalPages = true
		}
		for _, w := range t.Down {
			tf.Down = append(tf.Down, windowFile{
				From:  optionalDuration(w.From),
				Until: optionalDuration(w.Until),
				Class: w.Class.String(),
			})
		}
		f.Targets = append(f.Targets, tf)
	}
	for _, g := range s.Routes {
		rf := routeFile{Name: g.Name, Count: int64(g.Count), Latency: formatDuration(g.Latency), Jitter: g.Jitter, Weight: g.Weight,
			MaxInflight: optionalInt(g.MaxInflight), Joins: optionalDuration(g.Joins), Tier: optionalInt(g.Tier)}
		if g.PricePerRequest != 0 {
			rf.Price = g.PricePerRequest
		}
		for _, b := range g.Behaviours {
			bf := behaviourFile{
				Kind:   string(b.Kind),
				Target: optional(b.Target),
				From:   optionalDuration(b.From),
				Until:  optionalDuration(b.Until),
			}
			spec, _ := specOf(b.Kind)
			for _, key := range slices.Concat(spec.required, spec.optional) {
				switch key {
				case "p":
					bf.P = b.P
				case "rps":
					bf.RPS = b.RPS
				case "retry_after":
					bf.RetryAfter = formatDuration(b.RetryAfter)
				case "factor":
					bf.Factor = b.Factor
				case "period":
					bf.Period = formatDuration(b.Period)
				case "limit":
					bf.Limit = int64(b.Limit)
				case "window":
					bf.Window = formatDuration(b.Window)
				case "penalty":
					bf.Penalty = formatDuration(b.Penalty)
				}
			}
			rf.Behaviours = append(rf.Behaviours, bf)
		}
		f.Routes = append(f.Routes, rf)
	}
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.Indent = ""
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// optional returns nil, which Encode leaves out, for an empty string.
func optional(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// optionalInt returns nil, which Encode leaves out, for 0.
func optionalInt(n int) any {
	if n == 0 {
		return nil
	}
	return int64(n)
}

// optionalDuration returns nil, which Encode leaves out, for 0.
func optionalDuration(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return formatDuration(d)
}

// formatDuration writes d as people do: "2m", not "2m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// RouteWeights returns each route's static weight, in route order: what a
// user would configure by price or provider, for the weighted baseline.
func (s *Scenario) RouteWeights() []float64 {
	var w []float64
	for _, g := range s.Routes {
		for range g.Count {
			w = append(w, g.Weight)
		}
	}
	return w
}

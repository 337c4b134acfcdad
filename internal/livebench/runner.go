package livebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// row is one contender's measurement on one pool.
type row struct {
	contender string
	res       loadResult
	// exitRequests are the requests each exit received during the load.
	exitRequests []int64
	cpu          time.Duration // the process's CPU during the load
	hasCPU       bool
	notes        []string
}

// exitAttempts is the upstream attempts counted at the exits.
func (r row) exitAttempts() int64 {
	var n int64
	for _, c := range r.exitRequests {
		n += c
	}
	return n
}

// merge adds another run of the same contender to r. Notes are the
// last run's.
func (r *row) merge(o row) {
	r.res.elapsed += o.res.elapsed
	r.res.merge(o.res)
	slices.Sort(r.res.latencies)
	if r.exitRequests == nil {
		r.exitRequests = make([]int64, len(o.exitRequests))
	}
	for i, n := range o.exitRequests {
		r.exitRequests[i] += n
	}
	r.cpu += o.cpu
	r.hasCPU = r.hasCPU || o.hasCPU
	r.notes = o.notes
}

// measure runs c over a fresh fleet of p's shapes for d and measures the
// load: the fleet's timeline starts with the load, after the contender is
// ready, so startup is not measured. The contender's files go to a new
// directory of dir named after the pool and the contender, with exits.txt
// saying which exit (by URL, as gateways log routes) has which shape.
func measure(ctx context.Context, p pool, c contender, opts Options, d time.Duration, dir string) (row, error) {
	cdir, err := os.MkdirTemp(dir, p.name+"-"+c.name+"-")
	if err != nil {
		return row{}, err
	}
	var sitesCA string // the sites' CA, when they speak TLS
	if opts.HTTPS {
		sitesCA = filepath.Join(cdir, "sites-ca")
	}
	f, err := startFleet(p.shapes, siteNames(), opts.Seed, opts.CaptchaMarker, sitesCA)
	if err != nil {
		return row{}, err
	}
	defer f.close()
	if err := os.WriteFile(filepath.Join(cdir, "exits.txt"), []byte(exitList(f, p)), 0o600); err != nil {
		return row{}, err
	}
	s, err := c.start(ctx, f, opts, cdir)
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", c.name, err)
	}
	defer s.stop()
	r := row{contender: c.name}
	before := f.perExit()
	var cpu0 time.Duration
	if s.cpu != nil {
		if cpu0, err = s.cpu(); err != nil {
			return row{}, fmt.Errorf("%s: cpu: %w", c.name, err)
		}
	}
	f.begin(time.Now(), d)
	l := newLoad(opts)
	l.duration = d
	r.res = l.run(ctx, s.router)
	if s.cpu != nil {
		cpu1, err := s.cpu()
		if err != nil {
			return row{}, fmt.Errorf("%s: cpu: %w", c.name, err)
		}
		r.cpu, r.hasCPU = cpu1-cpu0, true
	}
	r.exitRequests = f.perExit()
	for i := range r.exitRequests {
		r.exitRequests[i] -= before[i]
	}
	if s.notes != nil {
		r.notes = s.notes(ctx)
	}
	return r, nil
}

// runPool measures every wanted contender on p, in Options.Rounds rounds
// of Duration/Rounds each with the order rotating between rounds, and
// notes the contenders that cannot run here.
func runPool(ctx context.Context, p pool, cs []contender, opts Options, dir string) (poolReport, error) {
	rep := poolReport{pool: p, opts: opts}
	var run []contender
	for _, c := range cs {
		if !opts.wants(c.name) {
			continue
		}
		if why := c.missing(opts); why != "" {
			rep.skipped = append(rep.skipped, c.name+": skipped, "+why)
			continue
		}
		run = append(run, c)
	}
	rows := make([]row, len(run))
	d := opts.Duration / time.Duration(opts.Rounds)
	for round := range opts.Rounds {
		for k := range run {
			i := (k + round) % len(run)
			r, err := measure(ctx, p, run[i], opts, d, dir)
			if err != nil {
				return rep, err
			}
			rows[i].merge(r)
			rows[i].contender = r.contender
		}
	}
	rep.rows = rows
	return rep, nil
}

// exitList is exits.txt: each exit of f, as its URL and its kind in p.
func exitList(f *fleet, p pool) string {
	var b strings.Builder
	kinds := p.kinds()
	for i, u := range f.urls() {
		b.WriteString(u.String() + " " + kinds[i] + "\n")
	}
	return b.String()
}

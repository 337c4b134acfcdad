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
	r.cpu, r.hasCPU, err = s.cpuDuring(func() {
		f.begin(time.Now(), d)
		l := newLoad(opts)
		l.duration = d
		r.res = l.run(ctx, s.router)
	})
	if err != nil {
		return row{}, fmt.Errorf("%s: cpu: %w", c.name, err)
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
	run, skipped := runnable(cs, opts)
	rep := poolReport{pool: p, opts: opts, skipped: skipped}
	rows := make([]row, len(run))
	d := opts.Duration / time.Duration(opts.Rounds)
	err := interleave(opts.Rounds, len(run), func(i int) error {
		r, err := measure(ctx, p, run[i], opts, d, dir)
		if err != nil {
			return err
		}
		rows[i].merge(r)
		rows[i].contender = r.contender
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.rows = rows
	return rep, nil
}

// runnable are the contenders of cs that opts wants and this machine can
// run, and a line for each of the others that opts wants, saying why not.
func runnable(cs []contender, opts Options) (run []contender, skipped []string) {
	for _, c := range cs {
		if !opts.wants(c.name) {
			continue
		}
		if why := c.missing(opts); why != "" {
			skipped = append(skipped, c.name+": skipped, "+why)
			continue
		}
		run = append(run, c)
	}
	return run, skipped
}

// interleave calls run for each of n contenders in each of rounds rounds,
// the order rotating by one each round, so that a machine whose load
// drifts favours none; it stops at the first error.
func interleave(rounds, n int, run func(i int) error) error {
	for round := range rounds {
		for k := range n {
			if err := run((k + round) % n); err != nil {
				return err
			}
		}
	}
	return nil
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

package livebench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/sim"
)

// poolReport is one pool's measurements, a row per contender.
type poolReport struct {
	pool    pool
	opts    Options
	rows    []row
	skipped []string // contenders that could not run here, and why
	// simulated are the simulator's stand-ins on the same pool
	// (simulate), in simStandIns order; nil when not run.
	simulated []sim.Summary
}

// tasksPerSecond is the headline: completed tasks per second of load.
func (r row) tasksPerSecond() float64 {
	if r.res.elapsed <= 0 {
		return 0
	}
	return float64(r.res.completed) / r.res.elapsed.Seconds()
}

// completion is the share of finished tasks that completed.
func (r row) completion() float64 {
	return ratio(float64(r.res.completed), float64(r.res.completed+r.res.failed))
}

// cpuPerRequest is the process's CPU per request it was sent.
func (r row) cpuPerRequest() time.Duration {
	if !r.hasCPU || r.res.attempts == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.res.attempts)
}

// percentile is the q quantile of the finished tasks' latencies.
func (r row) percentile(q float64) time.Duration { return quantile(r.res.latencies, q) }

// quantile is the q quantile of sorted latencies l, 0 for none.
func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// ratio is a/b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// oracleRate is the oracle's tasks per second, 0 when it did not run.
func (p poolReport) oracleRate() float64 {
	for _, r := range p.rows {
		if r.contender == "oracle" {
			return r.tasksPerSecond()
		}
	}
	return 0
}

// vsOracle is each contender's throughput ratio to the oracle's.
func (p poolReport) vsOracle() map[string]float64 {
	out := make(map[string]float64, len(p.rows))
	for _, r := range p.rows {
		out[r.contender] = ratio(r.tasksPerSecond(), p.oracleRate())
	}
	return out
}

// write prints the pool's table, then what each contender's attempts met
// and where its exits' requests went.
func (p poolReport) write(w io.Writer) {
	fmt.Fprintf(w, "\n### %s — %s\n\n", p.pool.name, p.pool.about)
	fmt.Fprintf(w, "%d workers, %v per contender in %d round(s), %d attempts per task, %v client timeout, seed %d\n\n",
		p.opts.Workers, p.opts.Duration, p.opts.Rounds, p.opts.Attempts, p.opts.Timeout, p.opts.Seed)
	fmt.Fprintln(w, "| contender | tasks/s | ÷ oracle | completed | exit attempts/task | client attempts/task | p50 | p95 | p99 | CPU µs/req |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	vs := p.vsOracle()
	for _, r := range p.rows {
		cpu := "—"
		if r.hasCPU {
			cpu = strconv.FormatInt(r.cpuPerRequest().Microseconds(), 10)
		}
		vsText := "—" // without the oracle, no ratio
		if p.oracleRate() > 0 {
			vsText = fmt.Sprintf("%.2f", vs[r.contender])
		}
		fmt.Fprintf(w, "| %s | %.1f | %s | %.1f%% | %.2f | %.2f | %s | %s | %s | %s |\n",
			r.contender, r.tasksPerSecond(), vsText, 100*r.completion(),
			ratio(float64(r.exitAttempts()), float64(r.res.completed)),
			ratio(float64(r.res.attempts), float64(r.res.completed)),
			ms(r.percentile(0.50)), ms(r.percentile(0.95)), ms(r.percentile(0.99)), cpu)
	}
	for _, s := range p.skipped {
		fmt.Fprintf(w, "| %s |\n", s)
	}
	fmt.Fprintln(w)
	p.writeSimulated(w)
	kinds := p.pool.kinds()
	for _, r := range p.rows {
		given := ""
		if r.res.givenUp > 0 {
			given = fmt.Sprintf(" (%d given up without an attempt)", r.res.givenUp)
		}
		fmt.Fprintf(w, "- %s: %d completed, %d failed%s, %d cut at the end; client attempts: %s\n",
			r.contender, r.res.completed, r.res.failed, given, r.res.cut, formatTallies(r.res.outcomes))
		fmt.Fprintf(w, "  - requests at the exits by kind (per exit): %s\n", formatKinds(kinds, r.exitRequests))
		last := ""
		if p.opts.Rounds > 1 {
			last = "last round: " // notes are read after each run, and the last run's kept
		}
		for _, n := range r.notes {
			fmt.Fprintf(w, "  - %s%s\n", last, n)
		}
	}
}

// disagreement is how far a simulated ratio to the oracle may be from the
// live one before the report points at it: about the spread of one live
// run's ratios from one run to the next.
const disagreement = 0.05

// writeSimulated prints the simulator's figures for the pool beside the
// live ones, each ÷ its own oracle, and names the stand-ins whose ratio
// is more than disagreement from their live contender's.
func (p poolReport) writeSimulated(w io.Writer) {
	if len(p.simulated) != len(simStandIns) {
		return
	}
	live := p.vsOracle()
	parts := make([]string, 0, len(simStandIns))
	var differ []string
	for i, s := range p.simulated {
		name := simStandIns[i].policy
		if c := simStandIns[i].live; c != "" && c != name {
			name += " (" + c + ")"
		}
		parts = append(parts, fmt.Sprintf("%s %.2f (%.1f%%, p95 %s)", name, s.ThroughputRatio, 100*s.CompletionRate,
			ms(time.Duration(s.P95ms*float64(time.Millisecond)))))
		if v, ran := live[simStandIns[i].live]; ran && p.oracleRate() > 0 && math.Abs(s.ThroughputRatio-v) > disagreement {
			differ = append(differ, fmt.Sprintf("%s %.2f simulated, %.2f live", name, s.ThroughputRatio, v))
		}
	}
	fmt.Fprintf(w, "Simulator, this pool as a scenario (÷ its oracle, completed, p95): %s\n\n", strings.Join(parts, ", "))
	if len(differ) > 0 {
		fmt.Fprintf(w, "The simulator and the live run disagree by more than %.2f: %s\n\n", disagreement, strings.Join(differ, "; "))
	}
}

// ms formats a latency in milliseconds, or microseconds under one.
func ms(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// formatTallies lists outcomes by count, each with its share of the time
// spent in attempts: where the workers' time went.
func formatTallies(t tallies) string {
	var total time.Duration
	for _, v := range t {
		total += v.time
	}
	keys := slices.SortedFunc(maps.Keys(t), func(a, b string) int {
		return cmp.Or(cmp.Compare(t[b].count, t[a].count), strings.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d (%.0f%% of attempt time)", k, t[k].count, 100*ratio(float64(t[k].time), float64(total)))
	}
	return strings.Join(parts, ", ")
}

// formatKinds sums requests by exit kind, with the count of exits of each.
func formatKinds(kinds []string, requests []int64) string {
	sum := make(map[string]int64)
	exits := make(map[string]int)
	for i, k := range kinds {
		exits[k]++
		if i < len(requests) {
			sum[k] += requests[i]
		}
	}
	parts := make([]string, 0, len(sum))
	for _, k := range sortedKeys(sum) {
		parts = append(parts, fmt.Sprintf("%s×%d %d", k, exits[k], sum[k]))
	}
	return strings.Join(parts, ", ")
}

// formatCounts lists counts by key, largest first.
func formatCounts(m map[string]float64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// kinds names each exit of the pool by its shape.
func (p pool) kinds() []string {
	sites := siteNames()
	out := make([]string, len(p.shapes))
	for i, s := range p.shapes {
		out[i] = s.kind(sites)
	}
	return out
}

// kind names the shape for reports: its exit-level fault, then its site
// rules ("@all" for a rule on every site).
func (s Shape) kind(sites []string) string {
	var base string
	switch {
	case s.Dead:
		base = "dead"
	case s.Blackhole:
		base = "blackholed"
	case s.Auth407:
		base = "407"
	case s.Latency >= slowLatency/2:
		base = "slow"
	case s.Flaky > 0:
		base = "flaky"
	default:
		base = "fast"
	}
	if s.BlackholeFrom != s.BlackholeTo {
		base += fmt.Sprintf("+blackholed %.0f–%.0f%%", 100*s.BlackholeFrom, 100*s.BlackholeTo)
	}
	rules := map[string][]string{} // rule → sites
	for _, site := range sites {
		r := s.Sites[site]
		for name, on := range map[string]bool{"banned": r.Banned, "captcha": r.Captcha, "limited": r.RateLimit != nil, "burst-ban": r.BurstBan != nil} {
			if on {
				rules[name] = append(rules[name], site)
			}
		}
	}
	for _, name := range sortedKeys(rules) {
		where := strings.Join(rules[name], ",")
		if len(rules[name]) == len(sites) {
			where = "all"
		}
		base += "+" + name + "@" + where
	}
	return base
}

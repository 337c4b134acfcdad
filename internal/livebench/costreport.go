package livebench

import (
	"fmt"
	"io"
	"time"
)

// result is contender name's result in cell k, and whether it has one
// with an op that succeeded.
func (r costReport) result(name string, k int) (cellResult, bool) {
	cells, ok := r.cells[name]
	if !ok || cells[k].ops == 0 {
		return cellResult{}, false
	}
	return cells[k], true
}

// rateRatio is a's rate ÷ b's in cell k; false unless both have one.
func (r costReport) rateRatio(a, b string, k int) (float64, bool) {
	ra, okA := r.result(a, k)
	rb, okB := r.result(b, k)
	if !okA || !okB {
		return 0, false
	}
	kind := costCells[k].kind
	return ratio(ra.rate(kind), rb.rate(kind)), true
}

// cpuRatio is a's CPU per op ÷ b's in cell k; false unless both have one.
func (r costReport) cpuRatio(a, b string, k int) (float64, bool) {
	ra, okA := r.result(a, k)
	rb, okB := r.result(b, k)
	if !okA || !okB || !ra.hasCPU || !rb.hasCPU || rb.cpuPerOp() == 0 {
		return 0, false
	}
	return ratio(float64(ra.cpuPerOp()), float64(rb.cpuPerOp())), true
}

// addedP99 is name's p99 less direct's in cell k: the latency its hop
// adds where it is worst.
func (r costReport) addedP99(name string, k int) (time.Duration, bool) {
	rn, okN := r.result(name, k)
	rd, okD := r.result(costDirect, k)
	if !okN || !okD {
		return 0, false
	}
	return quantile(rn.latencies, 0.99) - quantile(rd.latencies, 0.99), true
}

// Units of a cell's rate and of its CPU per op, by kind.
var (
	rateUnits = map[cellKind]string{cellGET: "req/s", cellConnect: "tunnels/s", cellTunnel: "MiB/s"}
	cpuUnits  = map[cellKind]string{cellGET: "µs/req", cellConnect: "µs/tunnel", cellTunnel: "ms/transfer"}
)

// formatCPU is a CPU per op in the unit of kind.
func formatCPU(d time.Duration, kind cellKind) string {
	if kind == cellTunnel {
		return fmt.Sprintf("%.0f %s", float64(d)/float64(time.Millisecond), cpuUnits[kind])
	}
	return fmt.Sprintf("%.0f %s", float64(d)/float64(time.Microsecond), cpuUnits[kind])
}

// orDash formats v with format when ok, else a dash: a ratio that needs a
// contender that did not run.
func orDash[T any](format string, v T, ok bool) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// signedMs formats an added latency, + or −.
func signedMs(d time.Duration) string {
	if d < 0 {
		return "−" + ms(-d)
	}
	return "+" + ms(d)
}

// write prints the cells' table, the ratios' table, the headline figures
// and what went wrong.
func (r costReport) write(w io.Writer) {
	fmt.Fprintf(w, "\n### LiveCost — the gateway's own cost\n\n")
	fmt.Fprintf(w, "%d exits on 127.0.0.1 adding no delay, one site answering a %d-byte page at once; "+
		"%v per cell per contender in %d round(s), %v client timeout. CPU is the contender process's "+
		"(user+system, /proc); direct runs in the benchmark's own process, so has none.\n\n",
		costExits, len(page(costSite, costPath)), r.opts.Duration, r.opts.Rounds, r.opts.Timeout)
	fmt.Fprintln(w, "| cell | contender | rate | p50 | p99 | CPU per op | failed |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for k, cell := range costCells {
		for _, name := range r.order {
			res := r.cells[name][k]
			cpu := "—"
			if res.hasCPU && res.ops > 0 {
				cpu = formatCPU(res.cpuPerOp(), cell.kind)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f %s | %s | %s | %s | %d |\n", cell.label(), name,
				res.rate(cell.kind), rateUnits[cell.kind], ms(quantile(res.latencies, 0.5)), ms(quantile(res.latencies, 0.99)), cpu, res.failed)
		}
	}
	for _, s := range r.skipped {
		fmt.Fprintf(w, "| %s |\n", s)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| cell | switchyard ÷ haproxy, rate | CPU per op | switchyard ÷ go-floor, rate | CPU per op | go-floor ÷ haproxy, rate | switchyard ÷ direct, rate | haproxy ÷ direct, rate | added p99 over direct, switchyard | haproxy |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	twoPlaces := func(v float64, ok bool) string { return orDash("%.2f", v, ok) }
	for k, cell := range costCells {
		addSy, okAddSy := r.addedP99(costSwitchyard, k)
		addHp, okAddHp := r.addedP99(costHAProxy, k)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", cell.label(),
			twoPlaces(r.rateRatio(costSwitchyard, costHAProxy, k)), twoPlaces(r.cpuRatio(costSwitchyard, costHAProxy, k)),
			twoPlaces(r.rateRatio(costSwitchyard, costGoFloor, k)), twoPlaces(r.cpuRatio(costSwitchyard, costGoFloor, k)),
			twoPlaces(r.rateRatio(costGoFloor, costHAProxy, k)),
			twoPlaces(r.rateRatio(costSwitchyard, costDirect, k)), twoPlaces(r.rateRatio(costHAProxy, costDirect, k)),
			orDash("%s", signedMs(addSy), okAddSy), orDash("%s", signedMs(addHp), okAddHp))
	}
	fmt.Fprintln(w)
	get16, tunnel := cellIndex("get16"), cellIndex("tunnel")
	add, ok := r.addedP99(costSwitchyard, get16)
	fmt.Fprintf(w, "- switchyard's added p99 over direct at 16 clients: %s\n", orDash("%s", signedMs(add), ok))
	vs, ok := r.rateRatio(costSwitchyard, costDirect, tunnel)
	fmt.Fprintf(w, "- %s: switchyard %s× the upstream alone's throughput", costCells[tunnel].label(), orDash("%.2f", vs, ok))
	vs, ok = r.rateRatio(costHAProxy, costDirect, tunnel)
	fmt.Fprintf(w, ", haproxy %s×\n", orDash("%.2f", vs, ok))
	for _, name := range r.order {
		for k, cell := range costCells {
			if res := r.cells[name][k]; res.failed > 0 {
				fmt.Fprintf(w, "- %s, %s: %d failed, the first: %s\n", name, cell.label(), res.failed, res.firstErr)
			}
		}
	}
	for _, name := range r.order {
		for _, n := range r.notes[name] {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// cellIndex is the index in costCells of the cell named name.
func cellIndex(name string) int {
	for k, c := range costCells {
		if c.name == name {
			return k
		}
	}
	panic("livebench: no cost cell " + name)
}

// reportMetrics reports, as benchmark metrics, switchyard's rate and CPU
// per op ÷ HAProxy's in each cell, its rate ÷ go-floor's, its added p99 at 16 clients and its
// tunnel throughput ÷ the upstream alone's: those the run has.
func (r costReport) reportMetrics(report func(v float64, unit string)) {
	for k, cell := range costCells {
		if v, ok := r.rateRatio(costSwitchyard, costHAProxy, k); ok {
			report(v, "switchyard/haproxy_"+cell.name+"_rate")
		}
		if v, ok := r.cpuRatio(costSwitchyard, costHAProxy, k); ok {
			report(v, "switchyard/haproxy_"+cell.name+"_cpu")
		}
		if v, ok := r.rateRatio(costSwitchyard, costGoFloor, k); ok {
			report(v, "switchyard/go-floor_"+cell.name+"_rate")
		}
	}
	if d, ok := r.addedP99(costSwitchyard, cellIndex("get16")); ok {
		report(float64(d)/float64(time.Millisecond), "switchyard_added_p99_ms_get16")
	}
	if v, ok := r.rateRatio(costSwitchyard, costDirect, cellIndex("tunnel")); ok {
		report(v, "switchyard/upstream_tunnel_rate")
	}
}

package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// oracleName names the policy that knows the ground truth: it bounds what
// routing can achieve, so it is drawn for reference but never wins a column.
const oracleName = "oracle"

// reference reports whether policy is drawn for reference, not as a
// contender: the oracle, or the oracle that learns the sites' limits.
func reference(policy string) bool { return policy == oracleName || policy == learningOracleName }

// tableColumn is one metric of the table.
type tableColumn struct {
	head  string
	value func(Summary) (v float64, ok bool) // ok false: missing, printed "-"
	prec  int                                // decimals shown
	unit  string                             // appended to the value
	high  bool                               // higher is better
	// priced columns are left out of a scenario's table when no policy
	// spent anything there (no route has a price), seeded ones when its
	// figures are of one seed.
	priced, seeded bool
}

// finiteValue treats NaN and ±Inf (a ratio over nothing) as missing.
func finiteValue(v float64) (float64, bool) { return v, isFinite(v) }

// finiteTime treats a negative time as missing: the scenario has no such
// fault or the policy never got there (see Summary).
func finiteTime(v float64) (float64, bool) {
	if v < 0 {
		return v, false
	}
	return finiteValue(v)
}

var tableColumns = []tableColumn{
	{head: "tasks/s", value: func(s Summary) (float64, bool) { return finiteValue(s.Throughput) }, prec: 1, high: true},
	{head: "vs oracle", value: func(s Summary) (float64, bool) { return s.ThroughputRatio, s.ThroughputRatio > 0 }, prec: 3, high: true},
	{head: "min", value: func(s Summary) (float64, bool) { return s.RatioMin, s.RatioMin > 0 }, prec: 3, high: true, seeded: true},
	{head: "max", value: func(s Summary) (float64, bool) { return s.RatioMax, s.RatioMax > 0 }, prec: 3, high: true, seeded: true},
	{head: "completion", value: func(s Summary) (float64, bool) { return finiteValue(100 * s.CompletionRate) }, prec: 2, unit: "%", high: true},
	{head: "att/compl", value: func(s Summary) (float64, bool) { return finiteValue(s.AttemptsPerCompleted) }, prec: 2},
	{head: "wasted", value: func(s Summary) (float64, bool) { return float64(s.WastedAttempts), true }},
	{head: "p50 ms", value: func(s Summary) (float64, bool) { return finiteValue(s.P50ms) }},
	{head: "p95 ms", value: func(s Summary) (float64, bool) { return finiteValue(s.P95ms) }},
	{head: "p99 ms", value: func(s Summary) (float64, bool) { return finiteValue(s.P99ms) }},
	{head: "detect ms", value: func(s Summary) (float64, bool) { return finiteTime(s.DetectMs) }},
	{head: "recover ms", value: func(s Summary) (float64, bool) { return finiteTime(s.RecoverMs) }},
	{head: "false ej", value: func(s Summary) (float64, bool) { return float64(s.FalseEjections), true }},
	{head: "incident att", value: func(s Summary) (float64, bool) { return float64(s.IncidentAttempts), true }},
	{head: "cost/task", value: func(s Summary) (float64, bool) { return s.CostPerCompleted, s.Spend > 0 }, prec: 3, priced: true},
}

// WriteTable writes summaries as an aligned table for a terminal, one row
// per policy, grouped by scenario in order of first appearance. In each
// scenario the best value of each column among the contenders (not the
// oracles: reference) is marked "*"; values are compared as printed, so visible ties
// share the mark, and a column where every policy ties has none, since
// the mark would tell nothing.
func WriteTable(w io.Writer, summaries []Summary) error {
	var rows [][]string // nil row: blank line; one-cell row: scenario header
	for gi, group := range groupByScenario(summaries) {
		if gi > 0 {
			rows = append(rows, nil)
		}
		priced := slices.ContainsFunc(group, func(s Summary) bool { return s.Spend > 0 })
		seeded := slices.ContainsFunc(group, func(s Summary) bool { return s.Seeds > 1 })
		shown := func(c tableColumn) bool { return (!c.priced || priced) && (!c.seeded || seeded) }
		title := "scenario " + group[0].Scenario
		if seeded {
			title += fmt.Sprintf(" (mean of %d seeds; min and max of vs oracle)", group[0].Seeds)
		}
		rows = append(rows, []string{title})
		head := []string{"policy"}
		for _, c := range tableColumns {
			if shown(c) {
				head = append(head, c.head+" ")
			}
		}
		rows = append(rows, head)
		cells := make([][]string, len(group))
		for i, s := range group {
			cells[i] = []string{s.Policy}
		}
		for _, c := range tableColumns {
			if !shown(c) {
				// Priced columns come last, so the others stay in line;
				// seeded ones are shown in every table of a -seeds run.
				continue
			}
			for i, cell := range markBest(c, group) {
				cells[i] = append(cells[i], cell)
			}
		}
		rows = append(rows, cells...)
	}

	// The header and group lines span the table, so they do not set widths.
	widths := make([]int, len(tableColumns)+1)
	for _, row := range rows {
		if len(row) < 2 {
			continue
		}
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b bytes.Buffer
	for _, row := range rows {
		if len(row) < 2 {
			b.WriteString(strings.Join(row, ""))
			b.WriteByte('\n')
			continue
		}
		line := padCell(row[0], widths[0], false)
		for i, cell := range row[1:] {
			line += "  " + padCell(cell, widths[i+1], true)
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	_, err := w.Write(b.Bytes())
	return err
}

// groupByScenario groups summaries by scenario, keeping the input order of
// scenarios and of policies within each.
func groupByScenario(summaries []Summary) [][]Summary {
	var groups [][]Summary
	index := map[string]int{}
	for _, s := range summaries {
		i, ok := index[s.Scenario]
		if !ok {
			i = len(groups)
			index[s.Scenario] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], s)
	}
	return groups
}

// markBest formats column c for each summary of one scenario. Every cell
// ends in "*" or a space so that right-aligned digits stay in line.
func markBest(c tableColumn, group []Summary) []string {
	cells := make([]string, len(group))
	shown := make([]float64, len(group))
	ok := make([]bool, len(group))
	// A missing value (a fault never detected) ranks below any value.
	best, valued, candidates, atBest := 0.0, 0, 0, 0
	for i, s := range group {
		if !reference(s.Policy) {
			candidates++
		}
		v, has := c.value(s)
		if !has {
			cells[i] = "- "
			continue
		}
		text := strconv.FormatFloat(v, 'f', c.prec, 64)
		cells[i] = text + c.unit
		// Parsing the printed text back compares values as the reader sees them.
		shown[i], _ = strconv.ParseFloat(text, 64)
		ok[i] = true
		if reference(s.Policy) {
			continue
		}
		switch {
		case valued == 0 || (c.high && shown[i] > best) || (!c.high && shown[i] < best):
			best, atBest = shown[i], 1
		case shown[i] == best:
			atBest++
		}
		valued++
	}
	for i, s := range group {
		if !ok[i] {
			continue
		}
		if !reference(s.Policy) && shown[i] == best && atBest < candidates {
			cells[i] += "*"
		} else {
			cells[i] += " "
		}
	}
	return cells
}

// padCell pads s with spaces to width runes, on the left when right is set.
func padCell(s string, width int, right bool) string {
	fill := strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s)))
	if right {
		return fill + s
	}
	return s + fill
}

// WriteJSON writes one JSON object per summary per line (JSON Lines), for
// scripts that compare runs; Series is left out (see Summary).
func WriteJSON(w io.Writer, summaries []Summary) error {
	enc := json.NewEncoder(w)
	for _, s := range summaries {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return nil
}

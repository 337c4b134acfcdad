package sim

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Plot geometry in SVG user units: three panels stacked on a shared time
// axis, the legend to their right.
const (
	plotWidth, plotHeight = 960, 920
	plotLeft, plotRight   = 80, 760 // x extent of both panels
	legendX               = 785
	legendNameRunes       = 20 // longer policy names are cut to fit the legend
)

// plotPalette is d3's category10: ten colours that stay distinct side by side.
var plotPalette = [...]string{
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
}

// plotPanel is one chart of the plot: a metric of Point over time.
type plotPanel struct {
	title, axis string
	unit        string              // after each y tick: "%" or none
	top, bottom float64             // y extent
	value       func(Point) float64 // in the axis's unit
	// fit picks the axis range and tick step for data from lo to hi
	// (both NaN without data).
	fit          func(lo, hi float64) (alo, ahi, step float64)
	lo, hi, step float64
}

// WritePlot draws one scenario's summaries as an SVG 1.1 image, from each
// Summary's Series: throughput over time per policy (top: completed tasks
// per second of simulated time, in the Series' buckets), completion rate
// (middle) and the share of attempts sent to bad routes (bottom), so that
// what a policy gets done, and its detection and recovery, can be seen
// rather than read off a table. It writes plain text with no dependencies
// so the bench can run anywhere.
func WritePlot(w io.Writer, scenario string, summaries []Summary) error {
	panels := []*plotPanel{
		{title: "Throughput", axis: "tasks/s", top: 70, bottom: 290,
			value: func(p Point) float64 { return p.Throughput }, fit: rateAxis},
		{title: "Completion rate", axis: "completion (%)", unit: "%", top: 350, bottom: 570,
			value: func(p Point) float64 { return 100 * p.Completion }, fit: sharesAxis},
		{title: "Attempts sent to bad routes", axis: "to bad routes (%)", unit: "%", top: 630, bottom: 850,
			value: func(p Point) float64 { return 100 * p.BadShare }, fit: sharesAxis},
	}
	var end time.Duration
	for _, pn := range panels {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range summaries {
			for _, pt := range s.Series {
				if v := pn.value(pt); isFinite(v) {
					lo, hi = min(lo, v), max(hi, v)
				}
				end = max(end, pt.At)
			}
		}
		if lo > hi { // no data
			lo, hi = math.NaN(), math.NaN()
		}
		pn.lo, pn.hi, pn.step = pn.fit(lo, hi)
	}
	unit, unitName := time.Second, "s"
	if end > 3*time.Minute {
		unit, unitName = time.Minute, "min"
	}
	span := float64(end) / float64(unit)
	if !(span > 0) {
		span = 1 // a single point at 0 or no data: any axis will do
	}
	tstep := niceStep(span / 6)
	span = math.Ceil(span/tstep-1e-9) * tstep
	x := func(at time.Duration) float64 {
		return plotLeft + clampTo(float64(at)/float64(unit)/span, 0, 1)*(plotRight-plotLeft)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<title>%s</title>
<rect width="100%%" height="100%%" fill="white"/>
<text x="%d" y="30" font-size="18" font-weight="bold">%s</text>
`, plotWidth, plotHeight, plotWidth, plotHeight, xmlText(scenario), plotLeft, xmlText(scenario))

	for _, pn := range panels {
		y := func(v float64) float64 {
			return pn.bottom - clampTo((v-pn.lo)/(pn.hi-pn.lo), 0, 1)*(pn.bottom-pn.top)
		}
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%s\" font-size=\"14\">%s</text>\n", plotLeft, svgNum(pn.top-8), pn.title)
		mid := (pn.top + pn.bottom) / 2
		fmt.Fprintf(&b, "<text x=\"22\" y=\"%s\" text-anchor=\"middle\" transform=\"rotate(-90 22 %s)\">%s</text>\n", svgNum(mid), svgNum(mid), pn.axis)
		for i := 0.0; pn.lo+i*pn.step <= pn.hi+1e-9*pn.step; i++ {
			v := pn.lo + i*pn.step
			ty := svgNum(y(v))
			fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%s\" x2=\"%d\" y2=\"%s\" stroke=\"#ddd\"/>\n", plotLeft, ty, plotRight, ty)
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%s\" text-anchor=\"end\" dy=\"4\">%s%s</text>\n", plotLeft-6, ty, tickLabel(v, pn.step), pn.unit)
		}
		for i := 0.0; i*tstep <= span+1e-9; i++ {
			tx := svgNum(plotLeft + i*tstep/span*(plotRight-plotLeft))
			fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#ddd\"/>\n", tx, svgNum(pn.top), tx, svgNum(pn.bottom))
			if pn == panels[len(panels)-1] { // the shared time axis is labelled once, at the bottom
				fmt.Fprintf(&b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", tx, svgNum(pn.bottom+18), tickLabel(i*tstep, tstep))
			}
		}
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%s\" width=\"%d\" height=\"%s\" fill=\"none\" stroke=\"#333\"/>\n", plotLeft, svgNum(pn.top), plotRight-plotLeft, svgNum(pn.bottom-pn.top))
		for i, s := range summaries {
			style := strokeStyle(i, s.Policy)
			var pts []string
			for _, pt := range s.Series {
				if v := pn.value(pt); isFinite(v) {
					pts = append(pts, svgNum(x(pt.At))+","+svgNum(y(v)))
				}
			}
			fmt.Fprintf(&b, "<polyline points=\"%s\" fill=\"none\" stroke-width=\"2\" %s/>\n", strings.Join(pts, " "), style)
			if len(pts) == 1 { // a lone point makes no visible line
				cx, cy, _ := strings.Cut(pts[0], ",")
				fmt.Fprintf(&b, "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"%s\"/>\n", cx, cy, plotPalette[i%len(plotPalette)])
			}
		}
	}
	fmt.Fprintf(&b, "<text x=\"%s\" y=\"%d\" text-anchor=\"middle\">time (%s)</text>\n", svgNum((plotLeft+plotRight)/2.0), plotHeight-30, unitName)

	for i, s := range summaries {
		ly := 80 + 20*i
		fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke-width=\"2\" %s/>\n", legendX, ly, legendX+24, ly, strokeStyle(i, s.Policy))
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" dy=\"4\">%s</text>\n", legendX+30, ly, xmlText(shorten(s.Policy, legendNameRunes)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// strokeStyle is the stroke of the i-th policy; the oracles are dashed
// because they are references, not contenders.
func strokeStyle(i int, policy string) string {
	style := fmt.Sprintf("stroke=%q", plotPalette[i%len(plotPalette)])
	if reference(policy) {
		style += ` stroke-dasharray="6 4"`
	}
	return style
}

// sharesAxis fits a percent axis to data from lo to hi percent (NaN: no
// data), within 0…100%.
func sharesAxis(lo, hi float64) (alo, ahi, step float64) {
	if math.IsNaN(lo) {
		lo, hi = 0, 100
	}
	return percentAxis(max(lo, 0), min(hi, 100))
}

// rateAxis fits an axis from 0 to a round number at or above hi (NaN: no
// data), with at most five steps of 1, 2 or 5 times a power of ten.
func rateAxis(_, hi float64) (alo, ahi, step float64) {
	if !(hi > 0) {
		hi = 1 // nothing completed, or no data: any axis will do
	}
	step = niceStep(hi / 5)
	return 0, math.Ceil(hi/step-1e-9) * step, step
}

// percentAxis picks a y axis in whole percent covering [lo, hi] with at most
// five steps and a span of at least 5%, so a flat line at 100% still sits
// in a readable frame and small differences near it are not flattened.
func percentAxis(lo, hi float64) (alo, ahi, step float64) {
	const minSpan = 5
	span := max(hi-lo, minSpan)
	step = 25
	for _, s := range []float64{1, 2, 5, 10, 20} {
		if span/s <= 5 {
			step = s
			break
		}
	}
	alo = math.Floor(lo/step) * step
	ahi = math.Ceil(hi/step) * step
	if ahi-alo < minSpan {
		alo = max(0, ahi-math.Ceil(minSpan/step)*step)
		ahi = min(100, alo+math.Ceil(minSpan/step)*step)
	}
	return alo, ahi, step
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// tickLabel prints v with as many decimals as step needs, so sums of steps
// do not show float noise such as 0.30000000000000004.
func tickLabel(v, step float64) string {
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func clampTo(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

// svgNum prints a coordinate; one decimal is finer than a screen pixel.
func svgNum(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// xmlText escapes s for SVG text and attribute values.
func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// shorten cuts s to n runes, marking the cut with an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

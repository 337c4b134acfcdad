package sim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// series makes n points every step with the given values.
func testSeries(n int, step time.Duration, completion, bad func(i int) float64) []Point {
	pts := make([]Point, n)
	for i := range pts {
		pts[i] = Point{At: time.Duration(i+1) * step, Completion: completion(i), BadShare: bad(i)}
	}
	return pts
}

func TestWritePlot(t *testing.T) {
	t.Parallel()
	dip := func(i int) float64 { return 1 - 0.3*math.Exp(-float64(i)/5) }
	spike := func(i int) float64 { return 0.4 * math.Exp(-float64(i)/3) }
	flat := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	tests := []struct {
		desc      string
		scenario  string
		summaries []Summary
		wantText  []string // decoded text the image must contain
		wantDash  int      // dashed lines: the oracle in every panel and the legend
	}{
		{
			desc:     "three policies with oracle",
			scenario: "dead-exits",
			summaries: []Summary{
				{Policy: "oracle", Series: testSeries(60, 5*time.Second, flat(1), flat(0))},
				{Policy: "switchyard", Series: testSeries(60, 5*time.Second, dip, spike)},
				{Policy: "round-robin", Series: testSeries(60, 5*time.Second, flat(0.7), flat(0.3))},
			},
			wantText: []string{"dead-exits", "oracle", "switchyard", "round-robin", "time (min)", "Throughput", "tasks/s"},
			wantDash: 4,
		},
		{
			desc:      "escaped names",
			scenario:  `"x" & <y>`,
			summaries: []Summary{{Policy: "a<b&c", Series: testSeries(3, time.Second, flat(1), flat(0))}},
			wantText:  []string{`"x" & <y>`, "a<b&c", "time (s)"},
		},
		{
			desc:      "empty series",
			scenario:  "empty",
			summaries: []Summary{{Policy: "a"}, {Policy: "oracle"}},
			wantText:  []string{"empty", "a", "oracle"},
			wantDash:  4,
		},
		{
			desc:      "single point at zero",
			scenario:  "one",
			summaries: []Summary{{Policy: "a", Series: []Point{{Completion: 0.5, BadShare: 0.5}}}},
			wantText:  []string{"one", "a"},
		},
		{
			desc:     "non-finite values are skipped",
			scenario: "nan",
			summaries: []Summary{{Policy: "a", Series: []Point{
				{At: time.Second, Completion: math.NaN(), BadShare: math.Inf(1)},
				{At: 2 * time.Second, Completion: 1, BadShare: 0},
			}}},
			wantText: []string{"nan"},
		},
		{
			desc:     "no policies",
			scenario: "nothing",
			wantText: []string{"nothing"},
		},
		{
			desc:     "more policies than colours",
			scenario: "many",
			summaries: func() []Summary {
				s := make([]Summary, 12)
				for i := range s {
					s[i] = Summary{Policy: strings.Repeat("p", i+1), Series: testSeries(2, time.Second, flat(0.9), flat(0.1))}
				}
				return s
			}(),
			wantText: []string{"pppppppppppp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WritePlot(&b, tt.scenario, tt.summaries); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, bad := range []string{"NaN", "Inf"} {
				if strings.Contains(out, bad) {
					t.Errorf("output contains %q", bad)
				}
			}
			elems, text, dashed, err := parseSVG(out)
			if err != nil {
				t.Fatalf("not valid XML: %v\n%s", err, out)
			}
			if got, want := elems["polyline"], 3*len(tt.summaries); got != want {
				t.Errorf("%d polylines, want %d (one per policy per panel)", got, want)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(text, s) {
					t.Errorf("text lacks %q", s)
				}
			}
			if dashed != tt.wantDash {
				t.Errorf("%d dashed lines, want %d", dashed, tt.wantDash)
			}
		})
	}
}

// TestWritePlotThroughput: the top panel draws each policy's completed
// tasks per second over time on an axis from 0 that holds the highest.
func TestWritePlotThroughput(t *testing.T) {
	t.Parallel()
	rate := func(v ...float64) []Point {
		pts := make([]Point, len(v))
		for i := range v {
			pts[i] = Point{At: time.Duration(i+1) * 5 * time.Second, Throughput: v[i], Completion: 1}
		}
		return pts
	}
	tests := []struct {
		desc      string
		series    [][]Point
		wantTop   float64 // the axis's top
		wantLabel string  // its tick
	}{
		{"tasks per second", [][]Point{rate(150, 152.5, 140, 151), rate(75, 76.25, 70, 75.5)}, 200, "200"},
		{"a trickle", [][]Point{rate(0.2, 0.4, 0.3)}, 0.4, "0.4"},
		{"a round top", [][]Point{rate(20, 40, 30)}, 40, "40"},
		{"nothing completed", [][]Point{rate(0, 0)}, 1, "1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var summaries []Summary
			for i, pts := range tt.series {
				summaries = append(summaries, Summary{Policy: strings.Repeat("p", i+1), Series: pts})
			}
			var b bytes.Buffer
			if err := WritePlot(&b, "s", summaries); err != nil {
				t.Fatal(err)
			}
			panels, lines := svgPanels(t, b.String())
			if len(panels) != 3 || len(lines) != 3*len(tt.series) {
				t.Fatalf("%d panels and %d lines, want 3 and %d", len(panels), len(lines), 3*len(tt.series))
			}
			_, text, _, _ := parseSVG(b.String())
			if !strings.Contains(text, "\n"+tt.wantLabel+"\n") || strings.Contains(text, "\n"+tt.wantLabel+"%") {
				t.Errorf("no tick %q, without a percent sign, in\n%s", tt.wantLabel, text)
			}
			// The first panel, from 0 at its bottom: each point's height
			// is its throughput in proportion to the axis's top.
			top, bottom, ahi := panels[0][0], panels[0][1], tt.wantTop
			for i, pts := range tt.series {
				ys := lines[i] // the first panel's lines come first, in policy order
				if len(ys) != len(pts) {
					t.Fatalf("line %d has %d points, want %d", i, len(ys), len(pts))
				}
				for j, p := range pts {
					want := bottom - p.Throughput/ahi*(bottom-top)
					if math.Abs(ys[j]-want) > 0.06 {
						t.Errorf("policy %d point %d: y %.1f, want %.1f for %g tasks/s", i, j, ys[j], want, p.Throughput)
					}
				}
			}
		})
	}
}

// svgPanels returns the y extent of each panel frame of a plot and the y
// coordinates of each polyline, in document order.
func svgPanels(t *testing.T, s string) (panels [][2]float64, lines [][]float64) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(s))
	num := func(v string) float64 {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("bad number %q", v)
		}
		return f
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return panels, lines
		}
		if err != nil {
			t.Fatal(err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case el.Name.Local == "rect" && attr["fill"] == "none":
			y := num(attr["y"])
			panels = append(panels, [2]float64{y, y + num(attr["height"])})
		case el.Name.Local == "polyline":
			var ys []float64
			for _, pt := range strings.Fields(attr["points"]) {
				_, y, _ := strings.Cut(pt, ",")
				ys = append(ys, num(y))
			}
			lines = append(lines, ys)
		}
	}
}

// parseSVG decodes an SVG document, counting its elements and dashed
// strokes and gathering its text.
func parseSVG(s string) (elems map[string]int, text string, dashed int, err error) {
	elems = map[string]int{}
	var sb strings.Builder
	dec := xml.NewDecoder(strings.NewReader(s))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", 0, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			elems[tok.Name.Local]++
			for _, a := range tok.Attr {
				if a.Name.Local == "stroke-dasharray" {
					dashed++
				}
			}
		case xml.CharData:
			sb.Write(tok)
			sb.WriteByte('\n')
		}
	}
	if elems["svg"] != 1 {
		return nil, "", 0, errors.New("no svg root")
	}
	return elems, sb.String(), dashed, nil
}

func TestPercentAxis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc                string
		lo, hi              float64
		wantLo, wantHi, inc float64
	}{
		{"full range", 0, 100, 0, 100, 20},
		{"flat at 100%", 100, 100, 95, 100, 1},
		{"flat at 0%", 0, 0, 0, 5, 1},
		{"dip to 83%", 83.2, 100, 80, 100, 5},
		{"bad share up to 37%", 0, 37, 0, 40, 10},
		{"narrow band", 97.5, 99.5, 95, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			lo, hi, step := percentAxis(tt.lo, tt.hi)
			if lo != tt.wantLo || hi != tt.wantHi || step != tt.inc {
				t.Errorf("percentAxis(%v, %v) = %v, %v, %v; want %v, %v, %v", tt.lo, tt.hi, lo, hi, step, tt.wantLo, tt.wantHi, tt.inc)
			}
		})
	}
}

func TestTimeTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, wantStep float64
		v             float64
		wantLabel     string
	}{
		{raw: 1.0 / 6, wantStep: 0.2, v: 3 * 0.2, wantLabel: "0.6"},
		{raw: 10, wantStep: 10, v: 30, wantLabel: "30"},
		{raw: 12, wantStep: 20, v: 40, wantLabel: "40"},
		{raw: 60, wantStep: 100, v: 300, wantLabel: "300"},
		{raw: 0.04, wantStep: 0.05, v: 0.15, wantLabel: "0.15"},
	}
	for _, tt := range tests {
		t.Run(tt.wantLabel, func(t *testing.T) {
			t.Parallel()
			step := niceStep(tt.raw)
			if math.Abs(step-tt.wantStep) > 1e-12 {
				t.Errorf("niceStep(%v) = %v, want %v", tt.raw, step, tt.wantStep)
			}
			if got := tickLabel(tt.v, step); got != tt.wantLabel {
				t.Errorf("tickLabel(%v, %v) = %q, want %q", tt.v, step, got, tt.wantLabel)
			}
		})
	}
}

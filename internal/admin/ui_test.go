package admin

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestContrast reads the colours of both schemes from the dashboard's
// style sheet and checks WCAG 2's 4.5:1 for text: the page's text, muted
// text and links on their backgrounds, and badge text on every state.
func TestContrast(t *testing.T) {
	t.Parallel()
	css, err := uiFiles.ReadFile("ui/style.css")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile(`(?s):root \{(.*?)\n\s*\}`).FindAllSubmatch(css, -1)
	if len(blocks) != 2 {
		t.Fatalf("%d :root blocks, want light and dark", len(blocks))
	}
	light := colours(string(blocks[0][1]))
	dark := colours(string(blocks[1][1]))
	for name, scheme := range map[string]map[string]string{"light": light, "dark": dark} {
		// The dark scheme keeps the light one's badge text colour.
		get := func(v string) string {
			if c, ok := scheme[v]; ok {
				return c
			}
			if c, ok := light[v]; ok {
				return c
			}
			t.Fatalf("%s: no #rrggbb colour %s", name, v)
			return ""
		}
		pairs := [][2]string{{"--fg", "--bg"}, {"--fg", "--card"}, {"--muted", "--bg"}, {"--muted", "--card"}, {"--accent", "--card"}, {"--bg", "--accent"}}
		for v := range scheme {
			if strings.HasPrefix(v, "--s-") && v != "--s-none" {
				pairs = append(pairs, [2]string{"--badge-fg", v})
			}
		}
		for _, p := range pairs {
			if r := contrast(get(p[0]), get(p[1])); r < 4.5 {
				t.Errorf("%s: %s on %s is %.2f:1, under 4.5:1", name, p[0], p[1], r)
			}
		}
	}
}

// colours are a CSS block's custom properties holding #rrggbb colours.
func colours(block string) map[string]string {
	out := make(map[string]string)
	for _, m := range regexp.MustCompile(`(--[a-z_-]+):\s*(#[0-9a-f]{6})`).FindAllStringSubmatch(block, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// contrast is WCAG 2's contrast ratio of two #rrggbb colours.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(v) / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}

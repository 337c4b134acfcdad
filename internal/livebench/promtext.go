package livebench

import (
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format: a metric, its labels
// and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the samples of a Prometheus text exposition,
// skipping comments and lines it cannot read. Enough for the gateway's
// own counters, whose label values hold no escaped quotes.
func parseMetrics(text string) []sample {
	var out []sample
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.name, rest = line[:i], line[j+1:]
			for _, kv := range splitLabels(line[i+1 : j]) {
				k, v, ok := strings.Cut(kv, "=")
				if ok {
					s.labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
				}
			}
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		parts = append(parts, s[start:])
	}
	return parts
}

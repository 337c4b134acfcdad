// Package tomlpos finds the line that defines each key and table of a TOML
// file, so that a mistake found after decoding can name its line. The TOML
// decoder keeps one position per key name, the last, so through it the
// keys of different elements of an array of tables cannot be told apart.
//
// Paths spell keys as toml.Key.String does, with each element of an array
// of tables indexed from 0: "routes[1].behaviours[0].rps".
package tomlpos

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// Index is the line of each table header and "key = value" of a file, in
// file order. Keys inside inline tables are not listed: Line finds them
// through their parent's line.
type Index struct {
	entries []entry
}

type entry struct {
	path string
	line int
}

// Scan indexes data, a file the TOML decoder has accepted. It reads
// headers and keys and skips over values, multi-line strings and arrays
// included; on input that is not TOML it indexes what it recognises.
func Scan(data []byte) *Index {
	var (
		ix     Index
		table  string
		counts = map[string]int{} // array-of-tables path → elements so far
		v      value
		inside bool // the line continues the last key's value
	)
	// resolve makes a dotted name under prefix a path: a part that names
	// an array of tables means its latest element.
	resolve := func(prefix string, parts []string) string {
		p := prefix
		for i, part := range parts {
			if p != "" {
				p += "."
			}
			p += toml.Key{part}.String()
			if n := counts[p]; n > 0 && i < len(parts)-1 {
				p += fmt.Sprintf("[%d]", n-1)
			}
		}
		return p
	}
	for n, raw := range strings.Split(string(data), "\n") {
		if inside {
			inside = v.skip(raw)
			continue
		}
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(line, "[["):
			parts, rest := splitKey(line[2:])
			if parts == nil || !strings.HasPrefix(rest, "]]") {
				continue
			}
			p := resolve("", parts)
			table = fmt.Sprintf("%s[%d]", p, counts[p])
			counts[p]++
			ix.entries = append(ix.entries, entry{table, n + 1})
		case strings.HasPrefix(line, "["):
			parts, rest := splitKey(line[1:])
			if parts == nil || !strings.HasPrefix(rest, "]") {
				continue
			}
			table = resolve("", parts)
			ix.entries = append(ix.entries, entry{table, n + 1})
		default:
			parts, rest := splitKey(line)
			if parts == nil || !strings.HasPrefix(rest, "=") {
				continue
			}
			ix.entries = append(ix.entries, entry{resolve(table, parts), n + 1})
			inside = v.skip(rest[1:])
		}
	}
	return &ix
}

// Line returns the line of path, or of its nearest listed parent (the
// table an inline table's key is written in, say); 0 if none is listed.
func (ix *Index) Line(path string) int {
	for path != "" {
		for _, e := range ix.entries {
			if e.path == path {
				return e.line
			}
		}
		path = path[:max(strings.LastIndexAny(path, ".["), 0)]
	}
	return 0
}

// First returns the path and line of the first key or table that is key
// once its indices are dropped: key as the decoder names it, without the
// element of an array of tables. It returns key.String() and 0 if there is
// none.
func (ix *Index) First(key toml.Key) (string, int) {
	want := key.String()
	for _, e := range ix.entries {
		if dropIndices(e.path) == want {
			return e.path, e.line
		}
	}
	return want, 0
}

// dropIndices turns "routes[1].behaviours[0].kind" into
// "routes.behaviours.kind".
func dropIndices(path string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '[')
		if i < 0 {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i])
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			return b.String()
		}
		path = path[i+j+1:]
	}
}

// splitKey reads the dotted key s starts with, bare or quoted parts, and
// returns its unquoted parts and what follows it, trimmed; nil parts if s
// does not start with a key (a value line of a multi-line array, say).
func splitKey(s string) (parts []string, rest string) {
	s = strings.TrimSpace(s)
	for {
		var part string
		if s == "" {
			return nil, ""
		}
		if q := s[0]; q == '"' || q == '\'' {
			end := strings.IndexByte(s[1:], q)
			if end < 0 {
				return nil, ""
			}
			part, s = s[1:end+1], s[end+2:]
		} else {
			end := strings.IndexFunc(s, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
			})
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, ""
			}
			part, s = s[:end], s[end:]
		}
		parts = append(parts, part)
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, ".") {
			return parts, s
		}
		s = strings.TrimSpace(s[1:])
	}
}

// value is where a value spanning lines is: inside a multi-line string,
// or inside brackets and braces.
type value struct {
	quote string // `"""` or `'''` while in a multi-line string
	depth int    // arrays and inline tables open
}

// skip reads s, the next piece of a value, and reports whether the value
// goes on past it. Strings are skipped whole, so brackets, quotes and
// '#' in them count for nothing.
func (v *value) skip(s string) bool {
	for i := 0; i < len(s); i++ {
		if v.quote != "" {
			switch {
			case v.quote == `"""` && s[i] == '\\':
				i++ // an escaped character, maybe a quote
			case strings.HasPrefix(s[i:], v.quote):
				i += len(v.quote) - 1
				v.quote = ""
			}
			continue
		}
		switch c := s[i]; c {
		case '#':
			return v.depth > 0
		case '[', '{':
			v.depth++
		case ']', '}':
			v.depth = max(v.depth-1, 0)
		case '"', '\'':
			if q := strings.Repeat(string(c), 3); strings.HasPrefix(s[i:], q) {
				v.quote = q
				i += 2
				continue
			}
			for i++; i < len(s) && s[i] != c; i++ {
				if c == '"' && s[i] == '\\' {
					i++
				}
			}
		}
	}
	return v.quote != "" || v.depth > 0
}

package admit

import (
	"os"
	"strings"
	"testing"
)

// docs/security.md lists every block the code defines, so the two cannot
// drift apart: a range or name added to the table must be documented.
func TestSecurityDocListsTheTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][2]string // a row's first two cells
	for _, b := range blocked {
		rows = append(rows, [2]string{"`" + b.prefix.String() + "`", b.reason})
	}
	for _, e := range embedders {
		rows = append(rows, [2]string{"`" + e.prefix.String() + "`", e.name})
	}
	for _, n := range blockedNames {
		name := "`" + n.name + "`"
		if n.sub {
			name += ", and names under it"
		}
		rows = append(rows, [2]string{name, n.reason})
	}
	for _, r := range rows {
		if row := "| " + r[0] + " | " + r[1] + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/security.md has no row starting %q", row)
		}
	}
	// The page sends readers to this file: the path must be this one's.
	if _, err := os.Stat("table.go"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`internal/admit/table.go`") {
		t.Error("docs/security.md does not name internal/admit/table.go as where the table is defined")
	}
}

package route

import (
	"slices"
	"strings"
	"testing"
)

// TestSetNext follows one set through a sequence of reloads: what each
// one tells the engine, which routes keep their Exit, and what the set
// still shows of routes it no longer lists.
func TestSetNext(t *testing.T) {
	t.Parallel()
	type step struct {
		desc                              string
		list                              string
		added, changed, returned, removed []string
		kept                              []string // listed before and now, with the same Exit
		listed                            int
		removedShown                      []string // no Exit, the Route still there
	}
	steps := []step{
		{desc: "a new route joins", list: "a 192.0.2.1:80 region=us\nb 192.0.2.2:80\nc 192.0.2.3:80",
			added: []string{"b", "c"}, kept: []string{"a"}, listed: 3},
		{desc: "new labels keep the exit", list: "a 192.0.2.1:80 region=eu\nb 192.0.2.2:80 max_inflight=3\nc 192.0.2.3:80",
			changed: []string{"a", "b"}, kept: []string{"a", "b", "c"}, listed: 3},
		{desc: "a new password is a new exit, the same id", list: "a http://u:pw2@192.0.2.1:80 region=eu\nb 192.0.2.2:80 max_inflight=3\nc 192.0.2.3:80",
			kept: []string{"b", "c"}, listed: 3},
		{desc: "a route left out drains", list: "a http://u:pw2@192.0.2.1:80 region=eu\nb 192.0.2.2:80 max_inflight=3",
			removed: []string{"c"}, kept: []string{"a", "b"}, listed: 2, removedShown: []string{"c"}},
		{desc: "a removed route is not removed twice", list: "a http://u:pw2@192.0.2.1:80 region=eu\nb 192.0.2.2:80 max_inflight=3",
			kept: []string{"a", "b"}, listed: 2, removedShown: []string{"c"}},
		{desc: "a removed route returns, with new labels", list: "a http://u:pw2@192.0.2.1:80 region=eu\nb 192.0.2.2:80 max_inflight=3\nc 192.0.2.3:80 cost=2",
			changed: []string{"c"}, returned: []string{"c"}, kept: []string{"a", "b"}, listed: 3},
	}
	first, err := NewSet(testRoutes(t, "a 192.0.2.1:80 region=us"), Dialer{})
	if err != nil {
		t.Fatal(err)
	}
	set := first
	for _, st := range steps {
		next, d, err := set.Next(testRoutes(t, st.list))
		if err != nil {
			t.Fatalf("%s: %v", st.desc, err)
		}
		for _, c := range []struct {
			name string
			got  []*Route
			want []string
		}{
			{"added", d.Added, st.added}, {"changed", d.Changed, st.changed},
			{"returned", d.Returned, st.returned}, {"removed", d.Removed, st.removed},
		} {
			if got := ids(c.got); !slices.Equal(got, c.want) {
				t.Errorf("%s: %s %v, want %v", st.desc, c.name, got, c.want)
			}
		}
		for r, x := range next.All() {
			listed := x != nil
			kept := listed && x == set.Exit(r.ID)
			if kept != slices.Contains(st.kept, r.ID) {
				t.Errorf("%s: %s kept its exit: %v, want %v", st.desc, r.ID, kept, !kept)
			}
			if listed && x.Route().ID != r.ID {
				t.Errorf("%s: %s's exit is of another route", st.desc, r.ID)
			}
			if !listed != slices.Contains(st.removedShown, r.ID) {
				t.Errorf("%s: %s listed %v", st.desc, r.ID, listed)
			}
		}
		if next.Listed() != st.listed {
			t.Errorf("%s: %d listed, want %d", st.desc, next.Listed(), st.listed)
		}
		for _, id := range st.removedShown {
			if next.Route(id) == nil || next.Exit(id) != nil {
				t.Errorf("%s: removed %s: route %v, exit %v; want the route, no exit", st.desc, id, next.Route(id), next.Exit(id))
			}
		}
		set = next
	}
	if first.Listed() != 1 || first.Exit("a") == nil || first.Route("b") != nil {
		t.Error("Next changed the set it derived from")
	}
}

func TestSetRefusesDuplicates(t *testing.T) {
	t.Parallel()
	routes := testRoutes(t, "a 192.0.2.1:80\nb 192.0.2.2:80")
	routes[1].ID = "a"
	if _, err := NewSet(routes, Dialer{}); err == nil || !strings.Contains(err.Error(), "duplicate route a") {
		t.Errorf("NewSet: %v, want the duplicate named", err)
	}
	set, err := NewSet(routes[:1], Dialer{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := set.Next(routes); err == nil {
		t.Error("Next took a duplicate")
	}
}

// testRoutes parses lines of "id address [labels]".
func testRoutes(t *testing.T, lines string) []*Route {
	t.Helper()
	var routes []*Route
	for line := range strings.Lines(lines) {
		id, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		list, err := ParseList("test", []byte(rest+" id="+id))
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, &list[0])
	}
	return routes
}

func ids(routes []*Route) []string {
	var out []string
	for _, r := range routes {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

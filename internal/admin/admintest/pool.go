// Package admintest builds what the admin's benchmarks and the
// dashboard's browser tests read: a large pool with evidence, over a real
// engine, and the routes as a gateway publishes them.
package admintest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/route"
)

// Pool is an engine over n routes r00000…, labelled provider=p00…p19
// and region us, eu, ap in turn, each with a blocked record on five of
// targets sites site00.example…, so that the heatmap has that many busy
// columns (pairs exist once there is negative evidence); and the routes'
// set. The addresses only name the routes: nothing is dialled.
func Pool(tb testing.TB, n, targets int) (*engine.Engine, func() *route.Set) {
	tb.Helper()
	var list strings.Builder
	for i := range n {
		fmt.Fprintf(&list, "http://127.0.0.1:%d id=r%05d provider=p%02d region=%s\n", 20000+i%40000, i, i%20, []string{"us", "eu", "ap"}[i%3])
	}
	parsed, err := route.ParseList("pool", []byte(list.String()))
	if err != nil {
		tb.Fatal(err)
	}
	e, err := engine.New(engine.Config{Seed: 1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	routes := make([]*route.Route, len(parsed))
	for i := range parsed {
		routes[i] = &parsed[i]
		if err := e.AddRoute(now, parsed[i].Spec()); err != nil {
			tb.Fatal(err)
		}
		for k := range 5 {
			if err := e.Feedback(now, parsed[i].ID, fmt.Sprintf("site%02d.example", (i+k*7)%targets), engine.Outcome{Class: engine.Blocked}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	set, err := route.NewSet(routes, route.Dialer{})
	if err != nil {
		tb.Fatal(err)
	}
	return e, func() *route.Set { return set }
}

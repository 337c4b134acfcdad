package admin

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/provider"
)

// A provider gateway route shows what its sub-exits did; another route
// shows nothing of the kind.
func TestRouteSubExits(t *testing.T) {
	t.Parallel()
	stats := func(id string) (provider.Stats, bool) {
		return provider.Stats{Live: 3, Minted: 5, Retired: 1, Expired: 1}, strings.HasPrefix(id, "gateway://")
	}
	f, list := newListFixture(t, "gateway://acct:pw@192.0.2.7:7777 preset=brightdata\nhttp://192.0.2.8:80\n",
		engine.Config{Seed: 1}, time.Now(), Options{SubExits: stats})
	for i, want := range []*subExitsJSON{{Live: 3, Minted: 5, Retired: 1, Expired: 1}, nil} {
		var got routeJSON
		f.getJSON(t, "/api/routes/"+url.PathEscape(list[i].ID), &got)
		if (got.SubExits == nil) != (want == nil) || want != nil && *got.SubExits != *want {
			t.Errorf("route %d: sub_exits %+v, want %+v", i, got.SubExits, want)
		}
	}
}

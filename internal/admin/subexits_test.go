package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/provider"
	"github.com/switchyard/switchyard/internal/route"
)

// A provider gateway route shows what its sub-exits did; another route
// shows nothing of the kind.
func TestRouteSubExits(t *testing.T) {
	t.Parallel()
	list, err := route.ParseList("test", []byte("gateway://acct:pw@192.0.2.7:7777 preset=brightdata\nhttp://192.0.2.8:80\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	routes := make([]*route.Route, len(list))
	for i := range list {
		routes[i] = &list[i]
		if err := e.AddRoute(time.Now(), list[i].Spec()); err != nil {
			t.Fatal(err)
		}
	}
	stats := func(id string) (provider.Stats, bool) {
		return provider.Stats{Live: 3, Minted: 5, Retired: 1, Expired: 1}, id == list[0].ID
	}
	srv := NewServer(e, fixedRoutes(t, routes), NewMetrics(e, nil), Options{SubExits: stats})
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	for i, want := range []*subExitsJSON{{Live: 3, Minted: 5, Retired: 1, Expired: 1}, nil} {
		resp, err := hs.Client().Get(hs.URL + "/api/routes/" + url.PathEscape(list[i].ID))
		if err != nil {
			t.Fatal(err)
		}
		var got routeJSON
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET route %d: %d, %v", i, resp.StatusCode, err)
		}
		if (got.SubExits == nil) != (want == nil) || want != nil && *got.SubExits != *want {
			t.Errorf("route %d: sub_exits %+v, want %+v", i, got.SubExits, want)
		}
	}
}

package admin

import (
	"net/http"
	"testing"
)

// TestNodesOutsideACluster: GET /api/nodes is an empty array, and the
// node actions say this gateway is no node, after the token is checked.
func TestNodesOutsideACluster(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Token: token})
	for _, tc := range []struct {
		desc, method, path, auth string
		want                     int
		body                     string
	}{
		{"list", http.MethodGet, "/api/nodes", "", http.StatusOK, "[]\n"},
		{"add without a cluster", http.MethodPost, "/api/nodes/add", "Bearer " + token, http.StatusNotFound, ""},
		{"unknown action", http.MethodPost, "/api/nodes/join", "Bearer " + token, http.StatusNotFound, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			status, _, body := f.do(t, tc.method, tc.path, tc.auth)
			if status != tc.want || (tc.body != "" && string(body) != tc.body) {
				t.Fatalf("%s %s: %d %s, want %d %s", tc.method, tc.path, status, body, tc.want, tc.body)
			}
		})
	}
}

package route

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/provider"
)

func TestParseGatewayRoutes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc, line string
		template   string
		sessions   provider.Config
		pass       bool
		labels     string // Route.Labels
		spec       string // the engine's labels
	}{
		{
			desc:     "template and bounds",
			line:     `gateway://acct:secret@pr.example.net:7777 template="{user}-session-{session}-country-{region}" sessions=50 session_ttl=30m session_idle=1m provider=x`,
			template: "{user}-session-{session}-country-{region}",
			sessions: provider.Config{Max: 50, TTL: 30 * time.Minute, Idle: time.Minute},
			labels:   "provider=x", spec: "provider=x region=*",
		},
		{
			desc:     "preset with its idle timeout and defaults",
			line:     "gateway://acct:secret@pr.oxylabs.io:7777 preset=oxylabs",
			template: "customer-{user}[-cc-{region}][-city-{city}][-sessid-{session}-sesstime-{ttl}]",
			sessions: provider.Config{Max: provider.DefaultMax, TTL: provider.DefaultTTL, Idle: 60 * time.Second},
			spec:     "city=* region=*",
		},
		{
			desc:     "template replaces the preset's, in any order; ids passed through",
			line:     `gateway://acct:secret@192.0.2.1:7777 template="{user}[-s-{session}]" preset=oxylabs session_ids=pass`,
			template: "{user}[-s-{session}]",
			sessions: provider.Config{Max: provider.DefaultMax, TTL: provider.DefaultTTL, Idle: 60 * time.Second},
			pass:     true,
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			routes, err := ParseList("proxies.txt", []byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			r := routes[0]
			gw := r.Gateway
			if gw == nil || r.Scheme != HTTP || !strings.HasPrefix(r.ID, "gateway://") || strings.Contains(r.ID, "acct") {
				t.Fatalf("route %s, scheme %s, gateway %v", r.ID, r.Scheme, gw)
			}
			if gw.Template.String() != tc.template || gw.Sessions != tc.sessions || gw.PassSessions != tc.pass {
				t.Fatalf("gateway %s", gw)
			}
			if got := r.Labels.String(); got != tc.labels {
				t.Fatalf("labels %q, want %q", got, tc.labels)
			}
			if got := r.Spec().Labels.String(); got != tc.spec {
				t.Fatalf("engine labels %q, want %q", got, tc.spec)
			}
			if !strings.HasPrefix(r.Redacted(), "gateway://***:***@") {
				t.Fatalf("Redacted() = %q", r.Redacted())
			}
			for _, s := range []string{r.Redacted(), gw.String(), r.ID} {
				if strings.Contains(s, "secret") || strings.Contains(s, "acct") {
					t.Fatalf("%q shows a credential", s)
				}
			}
		})
	}
}

func TestExitWithUser(t *testing.T) {
	t.Parallel()
	routes, err := ParseList("proxies.txt", []byte("gateway://acct:secret@192.0.2.1:7777 preset=brightdata"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewExit(&routes[0], Dialer{Upstream: NewUpstream(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	y, err := x.WithUser("acct-session-abc", 2)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := y.Route().URL.User.Password()
	if y.Route().URL.User.Username() != "acct-session-abc" || pass != "secret" || y.Sub() != 2 || x.Sub() != 0 {
		t.Fatalf("sub-exit %v of %v", y.Route().URL.Redacted(), x.Route().URL.Redacted())
	}
	if x.Route().URL.User.Username() != "acct" || y.Route().ID != x.Route().ID {
		t.Fatal("WithUser changed the route's own exit or id")
	}
}

package config

import (
	"bytes"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/tomlpos"
)

// writeConfig writes a config file holding body in a fresh directory, with
// a one-route proxy list beside it, and returns the file's path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "proxies.txt"), []byte("direct\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "switchyard.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const routesOK = "[routes]\nfile = \"proxies.txt\"\n"

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		file  string // appended to routesOK unless it sets [routes] itself
		env   []string
		flags []Setting
		want  string // the whole message after the file's path, or a substring
	}{
		{"unknown top-level key", "colour = 1\n" + routesOK, nil, nil, ":1: colour: unknown key"},
		{"unknown section key", "[engine]\nalpah = 0.2\n", nil, nil, ":4: engine.alpah: unknown key"},
		{"unknown key in an array of tables", "[[targets]]\nhosts = [\"*\"]\nrat = 2\n", nil, nil, ":5: targets.rat: unknown key"},
		{"unknown section", "[listn]\nproxy = \"127.0.0.1:1\"\n", nil, nil, ":3: listn: unknown section"},
		{"unknown empty section", "[engine]\nalpha = 0.2\n\n[ probes ] # typo\n", nil, nil, ":6: probes: unknown section"},
		{"unknown array of tables", "[[target]]\nhosts = [\"*\"]\n", nil, nil, ":3: target: unknown section"},
		{"unknown subsection", "[engine]\n[engine.cooldown]\nblocked = \"1m\"\n", nil, nil, ":4: engine.cooldown: unknown section"},
		{"wrong type", "[engine]\nalpha = \"high\"\n", nil, nil, ":4: engine.alpha: incompatible types: TOML value has type string; destination has type float"},
		{"bad duration", "[retry]\nattempt_timeout = \"30 seconds\"\n", nil, nil, `:4: retry.attempt_timeout: invalid duration: "30 seconds"`},
		{"syntax error", "[engine\n", nil, nil, "switchyard.toml:4: routes: expected '.' or ']'"},
		{"engine range", "[engine]\n\nalpha = 1.5\n", nil, nil, ":5: engine.alpha: must be in (0, 1]"},
		{"engine relation in config names", "[engine]\nsuspect_after = 5\ncool_after = 3\n", nil, nil, "engine.cool_after: must be at least suspect_after"},
		{"picker", "[engine]\npicker = \"best\"\n", nil, nil, `:4: engine.picker: "best": want power_of_two or weighted_random`},
		{"cooldown class", "[engine.cooldowns]\nbanned = \"1m\"\n", nil, nil, ":4: engine.cooldowns.banned: not an outcome class"},
		{"cooldown negative", "[engine.cooldowns]\nblocked = \"-1m\"\n", nil, nil, ":4: engine.cooldowns.blocked: must be positive"},
		{"listen address", "[listen]\nproxy = \"8080\"\n", nil, nil, `:4: listen.proxy: "8080": want host:port`},
		{"listen port", "[listen]\nproxy = \"127.0.0.1:99999\"\n", nil, nil, "listen.proxy: \"127.0.0.1:99999\": bad port"},
		{"admin on the proxy's address", "[listen]\nproxy = \"127.0.0.1:8080\"\nadmin = \"127.0.0.1:8080\"\n", nil, nil, ":5: listen.admin: must differ from listen.proxy"},
		{"api on the admin's address", "[listen]\napi = \"127.0.0.1:9090\"\n", nil, nil, ":4: listen.api: must differ from listen.admin"},
		{"api address", "", []string{"SWITCHYARD_LISTEN_API=9091"}, nil, `listen.api (environment variable SWITCHYARD_LISTEN_API): "9091": want host:port`},
		{"unknown fetch key", "[fetch]\nmax_batches = 5\n", nil, nil, ":4: fetch.max_batches: unknown key"},
		{"fetch batch", "[fetch]\nmax_batch = 0\n", nil, nil, ":4: fetch.max_batch: must be positive"},
		{"fetch ttl", "[fetch]\nfeedback_ttl = \"-1s\"\n", nil, nil, ":4: fetch.feedback_ttl: must be positive"},
		{"fetch concurrency", "[fetch]\nconcurrency = 65\n", nil, nil, ":4: fetch.concurrency: 65 is over fetch.max_concurrency (64)"},
		{"mitm key alone", "[mitm]\nca_key = \"ca-key.pem\"\n", nil, nil, ":4: mitm.ca_key: mitm.ca_cert and mitm.ca_key go together: give both or neither"},
		{"mitm bypass", "[mitm]\nbypass = [\"bank.example\", \"a b\"]\n", nil, nil, `:4: mitm.bypass: "a b": want "example.com", "*.example.com" or "*"`},
		{"mitm only", "[mitm]\nonly = [\"*.shop.example\", \"a b\"]\n", nil, nil, `:4: mitm.only: "a b": want "example.com", "*.example.com" or "*"`},
		{"mitm upstream roots", "[mitm]\nupstream_ca = \"none.pem\"\n", nil, nil, ":4: mitm.upstream_ca: open "},
		{"mitm cache", "", []string{"SWITCHYARD_MITM_CERT_CACHE=0"}, nil, "mitm.cert_cache (environment variable SWITCHYARD_MITM_CERT_CACHE): must be positive"},
		{"header timeout", "[server]\nheader_timeout = \"0s\"\n", nil, nil, ":4: server.header_timeout: must be positive"},
		{"idle timeout", "[server]\nidle_timeout = \"0s\"\n", nil, nil, ":4: server.idle_timeout: must be positive"},
		{"body timeout", "[server]\nbody_timeout = \"-1s\"\n", nil, nil, ":4: server.body_timeout: must not be negative"},
		{"body rate", "[server]\nmin_body_rate = -1\n", nil, nil, ":4: server.min_body_rate: must not be negative"},
		{"connection cap", "", []string{"SWITCHYARD_SERVER_MAX_CLIENT_CONNS=-5"}, nil, "server.max_client_conns (environment variable SWITCHYARD_SERVER_MAX_CLIENT_CONNS): must not be negative"},
		{"idle upstream cap", "[server]\nmax_idle_upstream_conns = 0\n", nil, nil, ":4: server.max_idle_upstream_conns: must be positive"},
		{"log format", "[log]\nformat = \"xml\"\n", nil, nil, `log.format: "xml": want text or json`},
		{"attempts", "[retry]\nmax_attempts = 0\n", nil, nil, ":4: retry.max_attempts: must be in [1, 10]"},
		{"timeout", "[retry]\nattempt_timeout = \"0s\"\n", nil, nil, "retry.attempt_timeout: must be positive"},
		{"request timeout zero", "[retry]\nrequest_timeout = \"0s\"\n", nil, nil, ":4: retry.request_timeout: must be positive"},
		{"request timeout below the attempt timeout", "[retry]\nattempt_timeout = \"40s\"\nrequest_timeout = \"30s\"\n", nil, nil, ":5: retry.request_timeout: must be at least retry.attempt_timeout (40s)"},
		{"request timeout from the environment", "", []string{"SWITCHYARD_RETRY_REQUEST_TIMEOUT=1s"}, nil, "retry.request_timeout (environment variable SWITCHYARD_RETRY_REQUEST_TIMEOUT): must be at least retry.attempt_timeout (30s)"},
		{"budget", "[retry]\nbudget_ratio = 2.0\n", nil, nil, "retry.budget_ratio: must be in (0, 1]"},
		{"body", "[retry]\nmax_body_bytes = -1\n", nil, nil, "retry.max_body_bytes: must not be negative"},
		{"probe url", "[probe]\nurl = \"https://example.com/\"\n", nil, nil, "probe.url: \"https://example.com/\": want an http:// URL"},
		{"cidr", "[security]\nallow_cidrs = [\"10.0.0.0/33\"]\n", nil, nil, ":4: security.allow_cidrs: \"10.0.0.0/33\""},
		{"allow host", "[security]\nallow_hosts = [\"a b\"]\n", nil, nil, "security.allow_hosts: \"a b\": want a host name"},
		{"admin token from a missing variable", "[admin]\ntoken = \"env:NO_SUCH_TOKEN\"\n", nil, nil, ":4: admin.token: environment variable NO_SUCH_TOKEN is not set"},
		{"admin token from a missing file", "[admin]\ntoken = \"file:/nonexistent/token\"\n", nil, nil, "admin.token: cannot read /nonexistent/token: no such file or directory"},
		{"admin token from a device", "[admin]\ntoken = \"file:/dev/zero\"\n", nil, nil, "admin.token: cannot read /dev/zero: not a regular file"},
		{"per_route not a switch", "[metrics]\nper_route = \"sometimes\"\n", nil, nil, `:4: metrics.per_route: want true, false or "auto"`},
		{"per_route from the environment", "", []string{"SWITCHYARD_METRICS_PER_ROUTE=on"}, nil,
			`metrics.per_route (environment variable SWITCHYARD_METRICS_PER_ROUTE): want true, false or "auto"`},
		{"pprof without a token", "[admin]\npprof = true\n", nil, nil, ":4: admin.pprof: needs admin.token (or SWITCHYARD_ADMIN_TOKEN): profiles are served to its holders only"},
		{"pprof from the environment without a token", "", []string{"SWITCHYARD_ADMIN_PPROF=true"}, nil, "admin.pprof (environment variable SWITCHYARD_ADMIN_PPROF): needs admin.token"},
		{"pprof without an admin listener", "[listen]\nadmin = \"\"\n[admin]\ntoken = \"t0ken\"\npprof = true\n", nil, nil, ":7: admin.pprof: needs listen.admin"},
		{"routes file a device", "[routes]\nfile = \"/dev/zero\"\n", nil, nil, "routes.file: /dev/zero: not a regular file"},
		{"state url", "[state]\nurl = \"postgres://u:Sekr1tPw@h/db\"\n", nil, nil, `:4: state.url: want "memory", redis://`},
		{"state prefix", "[state]\nprefix = \"a b\"\n", nil, nil, `state.prefix: "a b": letters, digits`},
		{"state timeout", "[state]\ntimeout = \"0s\"\n", nil, nil, "state.timeout: must be positive"},
		{"pacing bound", "[pacing]\nmax_targets = 0\n", nil, nil, "pacing.max_targets: must be positive"},
		{"negative learned wait", "[pacing]\nlearned_max_wait = \"-1s\"\n", nil, nil, "pacing.learned_max_wait: must not be negative"},
		{"learned file in no directory", "[pacing]\nlearned_file = \"/nonexistent/learned.json\"\n", nil, nil,
			":4: pacing.learned_file: /nonexistent/learned.json: its directory /nonexistent is not there"},
		{"learned file with shared state", "[pacing]\nlearned_file = \"learned.json\"\n[state]\nurl = \"redis://127.0.0.1:6379\"\n", nil, nil,
			":4: pacing.learned_file: not with shared state"},
		{"target without hosts", "[[targets]]\nkey = \"x\"\n", nil, nil, "targets[1].hosts: names no host"},
		{"target pattern", "[[targets]]\nhosts = [\"ex*mple.com\"]\n", nil, nil, ":4: targets[1].hosts: \"ex*mple.com\""},
		{"target key", "[[targets]]\nhosts = [\"*\"]\nkey = \"a/b\"\n", nil, nil, ":5: targets[1].key: \"a/b\": only letters"},
		{"probe path", "[[targets]]\nhosts = [\"*\"]\nprobe_path = \"robots.txt\"\n", nil, nil, "targets[1].probe_path: \"robots.txt\": must start with /"},
		{"empty signature", "[[targets]]\nhosts = [\"*\"]\nblock_signatures = [\"\"]\n", nil, nil, "targets[1].block_signatures: an empty signature would match every page"},
		{"lookalike not a boolean", "[[targets]]\nhosts = [\"*\"]\nlookalike = \"off\"\n", nil, nil, ":5: targets.lookalike: incompatible types"},
		{"negative rate on the second target", "[[targets]]\nhosts = [\"a.com\"]\nrate = 1.0\n[[targets]]\nhosts = [\"*\"]\nrate = -1.0\n", nil, nil, ":8: targets[2].rate: must be a finite number ≥ 0"},
		{"pacing part of a target", "[[targets]]\nhosts = [\"img.example.com\"]\nrate = 1.0\n", nil, nil, `:4: targets[1].hosts: "img.example.com" is part of target example.com`},
		{"user name", "[[users]]\nname = \"al-ice\"\npassword = \"x\"\n", nil, nil, ":4: users[1].name: must be letters"},
		{"user twice", "[[users]]\nname = \"a\"\npassword = \"x\"\n[[users]]\nname = \"a\"\npassword = \"y\"\n", nil, nil, ":7: users[2].name: user a is given twice"},
		{"user with both", "[[users]]\nname = \"a\"\npassword = \"x\"\npassword_hash = \"y\"\n", nil, nil, "users[1].password: user a: set exactly one of password and password_hash"},
		{"user with neither", "[[users]]\nname = \"a\"\n", nil, nil, "users[1].password: user a: set exactly one"},
		{"hash not bcrypt", "[[users]]\nname = \"a\"\npassword_hash = \"md5:abc\"\n", nil, nil, ":5: users[1].password_hash: user a: not a bcrypt hash"},
		{"user password from a missing variable", "[[users]]\nname = \"a\"\npassword = \"env:NO_SUCH_PW\"\n", nil, nil, "users[1].password: user a: environment variable NO_SUCH_PW is not set"},
		{"user labels", "[[users]]\nname = \"a\"\npassword = \"x\"\nlabels = \"region\"\n", nil, nil, ":6: users[1].labels: user a:"},
		{"no routes", "[routes]\n", nil, nil, "routes.file: no routes"},
		{"missing routes file", "[routes]\nfile = \"nope.txt\"\n", nil, nil, "nope.txt: no such file or directory"},
		{"bad route line", "[routes]\ninline = [\"direct\", \"http://h\"]\n", nil, nil, "routes.inline: "},
		{"route in both", "[routes]\nfile = \"proxies.txt\"\ninline = [\"direct\"]\n", nil, nil, "route direct is also in"},
		{"env typo", "", []string{"SWITCHYARD_ENGINE_ALPAH=0.2"}, nil, "engine_alpah (environment variable SWITCHYARD_ENGINE_ALPAH): no such setting"},
		{"env section typo", "", []string{"SWITCHYARD_LISTN_PROXY=127.0.0.1:1"}, nil, "listn_proxy (environment variable SWITCHYARD_LISTN_PROXY): no such section"},
		{"env without a key", "", []string{"SWITCHYARD_PROXY=127.0.0.1:1"}, nil, "proxy (environment variable SWITCHYARD_PROXY): no such section"},
		{"env value", "", []string{"SWITCHYARD_ENGINE_ALPHA=high"}, nil, `engine.alpha (environment variable SWITCHYARD_ENGINE_ALPHA): "high" is not a number`},
		{"env range", "[engine]\nalpha = 0.2\n", []string{"SWITCHYARD_ENGINE_ALPHA=7"}, nil, "engine.alpha (environment variable SWITCHYARD_ENGINE_ALPHA): must be in (0, 1]"},
		{"env users", "", []string{"SWITCHYARD_USERS=alice"}, nil, "users (environment variable SWITCHYARD_USERS): entry 1: want user:password"},
		{"flag value", "", nil, []Setting{{Key: "retry.attempt_timeout", Value: "soon", Flag: "attempt-timeout"}}, `retry.attempt_timeout (flag --attempt-timeout): "soon" is not a duration`},
		{"flag range", "", nil, []Setting{{Key: "listen.proxy", Value: "nowhere", Flag: "listen"}}, `listen.proxy (flag --listen): "nowhere": want host:port`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := tc.file
			if !strings.Contains(body, "[routes]") {
				body = routesOK + body
			}
			path := writeConfig(t, body)
			_, err := Load(Source{Path: path, Env: tc.env, Flags: tc.flags})
			if err == nil {
				t.Fatalf("Load accepted:\n%s", body)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Sekr1tPw") {
				t.Errorf("error quotes a password: %q", err)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// The variables the project's tools read are not settings, and a gateway
// they start must not refuse them.
func TestToolVariablesAreNotSettings(t *testing.T) {
	t.Parallel()
	env := []string{"SWITCHYARD_TEST_REDIS=127.0.0.1:6379", "SWITCHYARD_LIVEBENCH_WORKERS=3", "SWITCHYARD_SOAK=1m", "SWITCHYARD_USERS=alice:pw"}
	c, err := Load(Source{Path: writeConfig(t, routesOK), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Users) != 1 {
		t.Errorf("users %+v, want alice from SWITCHYARD_USERS", c.Users)
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, routesOK+"[listen]\nproxy = \"127.0.0.1:1001\"\n[engine]\nalpha = 0.2\n")
	env := []string{"SWITCHYARD_LISTEN_PROXY=127.0.0.1:1002", "SWITCHYARD_ENGINE_GAMMA=3", "SWITCHYARD_SECURITY_ALLOW_CIDRS=10.0.0.0/8, 192.168.0.0/16", "SWITCHYARD_SECURITY_BLOCK_PRIVATE_NETWORKS=true"}
	flag := []Setting{{Key: "listen.proxy", Value: "127.0.0.1:1003", Flag: "listen"}}
	tests := []struct {
		desc      string
		env       []string
		flags     []Setting
		wantProxy string
		wantGamma float64
	}{
		{"file over defaults", []string{}, nil, "127.0.0.1:1001", 2},
		{"environment over file", env, nil, "127.0.0.1:1002", 3},
		{"flags over environment", env, flag, "127.0.0.1:1003", 3},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: path, Env: tc.env, Flags: tc.flags})
			if err != nil {
				t.Fatal(err)
			}
			if c.Listen.Proxy != tc.wantProxy || c.Engine.Gamma != tc.wantGamma || c.Engine.Alpha != 0.2 {
				t.Errorf("proxy %s gamma %v alpha %v, want %s %v 0.2", c.Listen.Proxy, c.Engine.Gamma, c.Engine.Alpha, tc.wantProxy, tc.wantGamma)
			}
			if c.Listen.Admin != "127.0.0.1:9090" || c.Retry.MaxAttempts != 3 {
				t.Errorf("defaults lost: admin %q attempts %d", c.Listen.Admin, c.Retry.MaxAttempts)
			}
		})
	}
	c, err := Load(Source{Path: path, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Security.AllowCIDRs; !reflect.DeepEqual(got, []string{"10.0.0.0/8", "192.168.0.0/16"}) || !c.BlockPrivate() {
		t.Errorf("allow_cidrs %q, block %v", got, c.BlockPrivate())
	}
}

// Load keeps what it parses to validate, so the server never parses
// the labels or the ranges a second time; the parsed forms follow the
// value in force, the environment's over the file's.
func TestParsedForms(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, routesOK+"[security]\nallow_cidrs = [\"10.0.0.0/8\"]\n"+
		"[[users]]\nname = \"a\"\npassword = \"x\"\nlabels = \"region=us,provider=acme\"\n"+
		"[[users]]\nname = \"b\"\npassword = \"y\"\n")
	tests := []struct {
		desc string
		env  []string
		want []netip.Prefix
	}{
		{"from the file", []string{}, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		{"from the environment", []string{"SWITCHYARD_SECURITY_ALLOW_CIDRS=192.168.0.0/16, fd00::/8"},
			[]netip.Prefix{netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fd00::/8")}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: path, Env: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Security.AllowPrefixes; !slices.Equal(got, tc.want) {
				t.Errorf("AllowPrefixes = %v, want %v", got, tc.want)
			}
			want, _ := engine.ParseLabels("region=us,provider=acme")
			if got := c.Users[0].LabelList; got.String() != want.String() || len(got) != 2 {
				t.Errorf("users[1] LabelList = %v, want %v", got, want)
			}
			if got := c.Users[1].LabelList; got != nil {
				t.Errorf("users[2] LabelList = %v, want none", got)
			}
		})
	}
}

// The [server] keys have their defaults, and the file and the
// environment set them under their TOML names.
func TestServerSection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		file string
		env  []string
		want Server
	}{
		{"defaults", "", nil, Server{HeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, BodyTimeout: 20 * time.Second, MinBodyRate: 1024, MaxClientConns: 10000, MaxIdleUpstreamConns: 1024, MaxUpstreamConns: 10000}},
		{"file", "[server]\nheader_timeout = \"5s\"\nidle_timeout = \"30s\"\nbody_timeout = \"0s\"\nmin_body_rate = 0\nmax_client_conns = 0\nmax_idle_upstream_conns = 64\nmax_upstream_conns = 0\n", nil,
			Server{HeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, MaxIdleUpstreamConns: 64}},
		{"environment", "", []string{"SWITCHYARD_SERVER_IDLE_TIMEOUT=1m", "SWITCHYARD_SERVER_MIN_BODY_RATE=64", "SWITCHYARD_SERVER_MAX_CLIENT_CONNS=50", "SWITCHYARD_SERVER_MAX_IDLE_UPSTREAM_CONNS=10", "SWITCHYARD_SERVER_MAX_UPSTREAM_CONNS=200"},
			Server{HeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, BodyTimeout: 20 * time.Second, MinBodyRate: 64, MaxClientConns: 50, MaxIdleUpstreamConns: 10, MaxUpstreamConns: 200}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: writeConfig(t, routesOK+tc.file), Env: append([]string{}, tc.env...)})
			if err != nil {
				t.Fatal(err)
			}
			if c.Server != tc.want {
				t.Errorf("server %+v, want %+v", c.Server, tc.want)
			}
		})
	}
}

func TestRoutesFileIsRelativeToTheConfigFile(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, routesOK)
	c, err := Load(Source{Path: path, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(path), "proxies.txt"); c.Routes.File != want || len(c.RouteList) != 1 {
		t.Errorf("routes file %q (%d routes), want %q", c.Routes.File, len(c.RouteList), want)
	}
}

// TestLearnedFileRelative: [pacing] learned_file is relative to the config
// file, as the other files it names.
func TestLearnedFileRelative(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "state"), 0o700)
	path := filepath.Join(dir, "switchyard.toml")
	os.WriteFile(path, []byte("[routes]\ninline = [\"direct\"]\n[pacing]\nlearned_file = \"state/learned.json\"\n"), 0o644)
	c, err := Load(Source{Path: path, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "learned.json"); c.Pacing.LearnedFile != want {
		t.Errorf("learned_file %q, want %q", c.Pacing.LearnedFile, want)
	}
}

// TestMITMSection reads [mitm]: paths relative to the config file, the
// upstream roots parsed once, flags over the file.
func TestMITMSection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := httptestCertPEM(t)
	os.WriteFile(filepath.Join(dir, "roots.pem"), ca, 0o644)
	os.WriteFile(filepath.Join(dir, "proxies.txt"), []byte("direct\n"), 0o644)
	path := filepath.Join(dir, "switchyard.toml")
	os.WriteFile(path, []byte("[routes]\nfile = \"proxies.txt\"\n[mitm]\nstate_dir = \"state\"\nupstream_ca = \"roots.pem\"\nbypass = [\"*.bank.example\"]\n"), 0o644)
	c, err := Load(Source{Path: path, Env: []string{}, Flags: []Setting{{Key: "mitm.enabled", Value: "true", Flag: "mitm"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := c.MITM
	if !m.Enabled || m.StateDir != filepath.Join(dir, "state") || m.UpstreamCA != filepath.Join(dir, "roots.pem") || m.UpstreamRoots == nil || len(m.Bypass) != 1 {
		t.Errorf("[mitm] read as %+v", m)
	}
	if d := Default().MITM; d.Enabled || d.CertCache != 4096 || (d.StateDir != "" && !strings.HasSuffix(d.StateDir, "switchyard")) {
		t.Errorf("defaults %+v", d)
	}
}

// httptestCertPEM is a CA certificate in PEM: that of a throwaway TLS
// server.
func httptestCertPEM(t *testing.T) []byte {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestWithoutAFile(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Env: []string{"SWITCHYARD_USERS=alice:pw:with:colons"}, Flags: []Setting{{Key: "routes.file", Value: "../../proxies.example.txt", Flag: "proxies"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Users) != 1 || c.Users[0].Name != "alice" || c.Users[0].Password.Value() != "pw:with:colons" {
		t.Errorf("users %+v", c.Users)
	}
	if c.BlockPrivate() {
		t.Error("private networks blocked on a loopback listener")
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok-FROMFILE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `[routes]
inline = ["http://bob-INLINE:pw-INLINE@192.0.2.1:3128 region=us max_inflight=3"]
[admin]
token = "file:`+tokenFile+`"
[[users]]
name = "alice"
password = "env:ALICE_PW"
[[users]]
name = "carol"
password = "pw-LITERAL"
[[users]]
name = "dave"
password_hash = "$2a$10$lQqgSZM0OFJ/c2WgOm8Z0.tNuu2arLuLq8XwiE5wC7/yjIfXDcu6m"
`)
	c, err := Load(Source{Path: path, Env: []string{"ALICE_PW=pw-FROMENV", "SWITCHYARD_STATE_URL=redis://:pw-REDIS@127.0.0.1:6379/0"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Token.Value() != "tok-FROMFILE" || c.Users[0].Password.Value() != "pw-FROMENV" || c.Users[1].Password.Value() != "pw-LITERAL" {
		t.Errorf("secrets not resolved: %q %q %q", c.Admin.Token.Value(), c.Users[0].Password.Value(), c.Users[1].Password.Value())
	}
	var b bytes.Buffer
	if err := c.WriteEffective(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, secret := range []string{"tok-FROMFILE", "pw-FROMENV", "pw-LITERAL", "bob-INLINE", "pw-INLINE", "lQqgSZM0", "pw-REDIS"} {
		if strings.Contains(out, secret) {
			t.Errorf("effective config shows %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{`token = "file:` + tokenFile + `"`, `password = "env:ALICE_PW"`, `password = "***"`, `password_hash = "***"`, `url = "redis://***:***@127.0.0.1:6379/0"`, "http://***:***@192.0.2.1:3128 id=http://192.0.2.1:3128~b0ced0de region=us max_inflight=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %q:\n%s", want, out)
		}
	}
	if s := c.Admin.Token.String(); s != "file:"+tokenFile {
		t.Errorf("Secret prints %q", s)
	}
}

// A secret written in the file as is is allowed but warned of, naming the
// key and its line, never the secret; references, hashes and what the
// environment sets are not.
func TestLiteralSecretsAreWarnedOf(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, routesOK+`[admin]
token = "tok-LITERAL"
[[users]]
name = "alice"
password = "env:ALICE_PW"
[[users]]
name = "carol"
password = "pw-LITERAL"
[[users]]
name = "dave"
password_hash = "$2a$10$lQqgSZM0OFJ/c2WgOm8Z0.tNuu2arLuLq8XwiE5wC7/yjIfXDcu6m"
`)
	c, err := Load(Source{Path: path, Env: []string{"ALICE_PW=pw-FROMENV", "SWITCHYARD_USERS=erin:pw-ENVUSER"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		path + ":4: admin.token is written in the file as is",
		path + ":10: users[2].password is written in the file as is",
	}
	if len(c.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", c.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(c.Warnings[i], w) {
			t.Errorf("warning %q, want it to start %q", c.Warnings[i], w)
		}
		for _, secret := range []string{"tok-LITERAL", "pw-LITERAL", "pw-FROMENV", "pw-ENVUSER"} {
			if strings.Contains(c.Warnings[i], secret) {
				t.Errorf("warning quotes a secret: %q", c.Warnings[i])
			}
		}
	}

	c, err = Load(Source{Path: writeConfig(t, routesOK), Env: []string{"SWITCHYARD_ADMIN_TOKEN=tok-ENV"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("a token from the environment warned: %q", c.Warnings)
	}
}

func TestEngineSection(t *testing.T) {
	t.Parallel()
	section := reflect.TypeFor[Engine]()
	target := reflect.TypeFor[engine.Config]()
	for i := range section.NumField() {
		f := section.Field(i)
		if f.Tag.Get("toml") == "" {
			t.Errorf("Engine.%s has no toml key", f.Name)
		}
		if contains(engineOwn, f.Name) {
			continue
		}
		g, ok := target.FieldByName(f.Name)
		if !ok || g.Type != f.Type {
			t.Errorf("Engine.%s (%s) has no engine.Config field of that name and type", f.Name, f.Type)
		}
	}
	got, err := Default().Engine.EngineConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := engine.DefaultConfig()
	// Rules and the picker are set by name; the rest are not operators' knobs.
	got.Rules, want.Rules = nil, nil
	want.ScoreEventStep, want.Seed = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults differ:\n got %+v\nwant %+v", got, want)
	}

	s := Default().Engine
	s.Picker = "power_of_two"
	s.Cooldowns = map[string]time.Duration{"blocked": 7 * time.Minute, "rate_limited": time.Second}
	c, err := s.EngineConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Picker.(engine.PowerOfTwo); !ok {
		t.Errorf("picker %T", c.Picker)
	}
	if c.Rules.Class[engine.Blocked].Cooldown != 7*time.Minute || engine.DefaultRules().Class[engine.Blocked].Cooldown == 7*time.Minute {
		t.Error("cooldown override not applied, or applied to the default table")
	}
	if want := engine.DefaultRules().Version + "+cooldowns(blocked,rate_limited)"; c.Rules.Version != want {
		t.Errorf("rules version %q, want %q", c.Rules.Version, want)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEverySettingHasAnEnvironmentVariable(t *testing.T) {
	t.Parallel()
	for _, key := range settableKeys() {
		l := &loader{c: new(Config)}
		*l.c = Default()
		value := map[bool]string{true: "1s"}[strings.HasSuffix(key, "timeout") || strings.HasSuffix(key, "_ttl")]
		if err := l.set(key, value, "test"); err != nil {
			var e *Error
			if !errors.As(err, &e) || strings.Contains(e.Msg, "no such setting") || strings.Contains(e.Msg, "cannot be set") {
				t.Errorf("%s (%s): %v", key, EnvName(key), err)
			}
		}
	}
}

func TestKeyLine(t *testing.T) {
	t.Parallel()
	data := []byte("a = 1\n[engine]\n  alpha = 0.2\n[engine.cooldowns]\nblocked = \"1m\"\n[[users]]\nname = \"a\"\n[[users]]\nname = \"b\"\n")
	tests := []struct {
		key  string
		want int
	}{
		{"a", 1}, {"engine.alpha", 3}, {"engine.cooldowns.blocked", 5},
		{"users[1].name", 7}, {"users[2].name", 9}, {"users[?].name", 7}, {"engine.gamma", 2}, {"gamma", 0},
	}
	l := &loader{lines: tomlpos.Scan(data)}
	for _, tc := range tests {
		if got := l.line(tc.key); got != tc.want {
			t.Errorf("line(%s) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

func TestBlockPrivate(t *testing.T) {
	t.Parallel()
	on, off := true, false
	tests := []struct {
		desc   string
		listen string
		api    string // "" keeps the default, loopback
		set    *bool
		want   bool
	}{
		{desc: "loopback listener", listen: "127.0.0.1:8080", want: false},
		{desc: "IPv6 loopback listener", listen: "[::1]:8080", want: false},
		{desc: "localhost listener", listen: "localhost:8080", want: false},
		{desc: "all interfaces", listen: ":8080", want: true},
		{desc: "public address", listen: "0.0.0.0:8080", want: true},
		{desc: "turned off", listen: ":8080", set: &off, want: false},
		{desc: "turned on", listen: "127.0.0.1:8080", set: &on, want: true},
		{desc: "fetch API on all interfaces", listen: "127.0.0.1:8080", api: ":9091", want: true},
		{desc: "fetch API on all interfaces, turned off", listen: "127.0.0.1:8080", api: ":9091", set: &off, want: false},
	}
	for _, tc := range tests {
		c := Default()
		c.Listen.Proxy, c.Security.BlockPrivateNetworks = tc.listen, tc.set
		if tc.api != "" {
			c.Listen.API = tc.api
		}
		if got := c.BlockPrivate(); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.desc, got, tc.want)
		}
	}
}

func TestEnvUsers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		in      string
		want    map[string]string // user → password
		wantErr string
	}{
		{desc: "two users", in: "alice:pw1,bob:pw2", want: map[string]string{"alice": "pw1", "bob": "pw2"}},
		{desc: "password with colons", in: "alice:a:b:c", want: map[string]string{"alice": "a:b:c"}},
		{desc: "dotted name", in: "svc.crawler_1:x", want: map[string]string{"svc.crawler_1": "x"}},
		{desc: "empty", in: "", wantErr: "names no user"},
		{desc: "no colon", in: "alice:pw1,bobSekr1tPw", wantErr: "entry 2: want user:password"},
		{desc: "dash in name", in: "al-ice:Sekr1tPw", wantErr: "entry 1: user name"},
		{desc: "space in name", in: "alice:pw1, bob:Sekr1tPw", wantErr: "entry 2: user name"},
		{desc: "empty password", in: "alice:", wantErr: "empty password"},
		{desc: "trailing comma", in: "alice:Sekr1tPw,", wantErr: "entry 2"},
		{desc: "duplicate", in: "alice:Sekr1tPw,alice:x", wantErr: "user alice is given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Env: []string{"SWITCHYARD_USERS=" + tc.in}, Flags: []Setting{{Key: "routes.inline", Value: "direct", Flag: "x"}}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "Sekr1tPw") {
					t.Fatalf("err %v, want %q and no password", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(c.Users) != len(tc.want) {
				t.Fatalf("got %v, %v", c, err)
			}
			for _, u := range c.Users {
				if u.Password.Value() != tc.want[u.Name] {
					t.Errorf("%s: password %q, want %q", u.Name, u.Password.Value(), tc.want[u.Name])
				}
			}
		})
	}
}

func TestConfigFileMustBeRegular(t *testing.T) {
	t.Parallel()
	if _, err := Load(Source{Path: "/dev/zero", Env: []string{}}); err == nil || !strings.Contains(err.Error(), "/dev/zero: not a regular file") {
		t.Fatalf("Load(/dev/zero): %v", err)
	}
}

// A state URL is shown with neither its user name nor its password, and
// one that does not parse not at all.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://***:***@127.0.0.1:6379/0"},
		{"redis://acct-KEY:pw@redis.example:6379/2", "redis://***:***@redis.example:6379/2"},
		{"redis://acct-KEY@redis.example:6379", "redis://***@redis.example:6379"},
		{"redis://user:p%zzw@host:6379", "***"},
	}
	for _, tc := range tests {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// admin.pprof is off by default and turns on with a token to guard it,
// from the file or the environment.
func TestAdminPprof(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		file string
		env  []string
		want bool
	}{
		{desc: "default off", file: routesOK},
		{desc: "file, token from the environment", file: routesOK + "[admin]\npprof = true\n", env: []string{"SWITCHYARD_ADMIN_TOKEN=t0ken"}, want: true},
		{desc: "environment", file: routesOK + "[admin]\ntoken = \"t0ken\"\n", env: []string{"SWITCHYARD_ADMIN_PPROF=true"}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: writeConfig(t, tc.file), Env: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			if c.Admin.Pprof != tc.want {
				t.Errorf("admin.pprof %v, want %v", c.Admin.Pprof, tc.want)
			}
		})
	}
}

// TestTargetRules: a [[targets]] rule's settings reach the policy of the
// hosts it matches; built-in signatures and the lookalike detector are on
// unless a rule turns them off.
func TestTargetRules(t *testing.T) {
	t.Parallel()
	file := "[[targets]]\nhosts = [\"plain.example\"]\nbuiltin_signatures = false\nlookalike = false\nhedge = false\n" +
		"[[targets]]\nhosts = [\"*\"]\nblock_signatures = [\"denied\"]\n"
	c, err := Load(Source{Path: writeConfig(t, routesOK+file), Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	rules := c.TargetRules()
	if _, p := rules.Resolve("plain.example"); p == nil || !p.NoBuiltinSignatures || !p.NoLookalike || !p.NoHedge {
		t.Errorf("plain.example: policy %+v, want built-in signatures, the lookalike detector and hedges off", p)
	}
	if _, p := rules.Resolve("shop.example"); p == nil || p.NoBuiltinSignatures || p.NoLookalike || len(p.BlockSignatures) != 1 {
		t.Errorf("shop.example: policy %+v, want built-in signatures and the lookalike detector on and one of its own", p)
	}
}

// metrics.per_route is auto by default, and takes a TOML boolean, "auto"
// or the same from the environment and flags.
func TestMetricsPerRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		file  string
		env   []string
		flags []Setting
		want  admin.PerRoute
	}{
		{desc: "default auto", file: routesOK, want: admin.PerRouteAuto},
		{desc: "a boolean", file: routesOK + "[metrics]\nper_route = false\n", want: admin.PerRouteOff},
		{desc: "true", file: routesOK + "[metrics]\nper_route = true\n", want: admin.PerRouteOn},
		{desc: "auto as a string", file: routesOK + "[metrics]\nper_route = \"auto\"\n", want: admin.PerRouteAuto},
		{desc: "the environment over the file", file: routesOK + "[metrics]\nper_route = false\n", env: []string{"SWITCHYARD_METRICS_PER_ROUTE=true"}, want: admin.PerRouteOn},
		{desc: "a flag over the environment", file: routesOK, env: []string{"SWITCHYARD_METRICS_PER_ROUTE=true"},
			flags: []Setting{{Key: "metrics.per_route", Value: "false", Flag: "metrics-per-route"}}, want: admin.PerRouteOff},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			c, err := Load(Source{Path: writeConfig(t, tc.file), Env: tc.env, Flags: tc.flags})
			if err != nil {
				t.Fatal(err)
			}
			if c.Metrics.PerRoute != tc.want {
				t.Errorf("metrics.per_route %v, want %v", c.Metrics.PerRoute, tc.want)
			}
			// check-config prints it in a form that loads back.
			var b bytes.Buffer
			if err := c.WriteEffective(&b); err != nil {
				t.Fatal(err)
			}
			if want := "per_route = \"" + tc.want.String() + "\""; !strings.Contains(b.String(), want) {
				t.Errorf("effective config without %s:\n%s", want, b.String())
			}
		})
	}
}

package livebench

import (
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/freeport"
	"github.com/switchyard/switchyard/internal/mitm"
)

// stopGrace is how long a stopped gateway may take to exit before it is
// killed. The load's clients are gone by then, so nothing is in flight
// that deserves the gateway's own 30 s shutdown grace.
const stopGrace = 3 * time.Second

// switchyardBinary returns a func that gives the binary to measure: given
// (Options.Binary), or ./cmd/switchyard of this module built into dir,
// once.
func switchyardBinary(given, dir string) func() (string, error) {
	if given != "" {
		return func() (string, error) { return filepath.Abs(given) }
	}
	return moduleBinary("./cmd/switchyard", filepath.Join(dir, "switchyard"))
}

// moduleBinary returns a func that builds pkg, a main package of this
// module, into bin, once, and gives its path.
func moduleBinary(pkg, bin string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	})
}

// binaryAndAddr gives a gateway process's binary and a free address on
// 127.0.0.1 for it to listen on.
func binaryAndAddr(binary func() (string, error)) (bin, listen string, err error) {
	if bin, err = binary(); err != nil {
		return "", "", err
	}
	listen, err = freeport.Addr()
	return bin, listen, err
}

// moduleRoot is the directory of the main module, from the go command.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// switchyardContender runs the real gateway as a new user's quick start
// would: a proxy list and flags, no config file; with intercept, --mitm
// too, its clients trusting the CA it uses (made beforehand in its state
// directory) and the gateway trusting the sites' (as an operator's
// mitm.upstream_ca would for a site with a private CA).
func switchyardContender(name string, binary func() (string, error), intercept bool) contender {
	missing := always
	if intercept {
		missing = overHTTPS
	}
	return contender{name: name, missing: missing, start: func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error) {
		bin, list, err := binaryAndList(binary, f, dir)
		if err != nil {
			return nil, err
		}
		g, adminURL, err := quickStart(bin, list, f, opts, filepath.Join(dir, "switchyard.log"))
		if err != nil {
			return nil, err
		}
		if intercept {
			state := filepath.Join(dir, "state")
			ca, _, err := mitm.LoadOrCreate(state, mitm.Options{})
			if err != nil {
				return nil, err
			}
			g.args = append(g.args, "--mitm", "--state-dir", state)
			g.env = append(slices.Clip(g.env), "SWITCHYARD_MITM_UPSTREAM_CA="+f.caFile)
			g.roots = x509.NewCertPool()
			g.roots.AppendCertsFromPEM(ca.CertPEM())
		}
		s, err := runGateway(ctx, g, opts.Workers)
		if err != nil {
			return nil, err
		}
		s.notes = func(ctx context.Context) []string {
			return append([]string{binaryNote(bin, opts)}, switchyardNotes(ctx, adminURL, f)...)
		}
		return s, nil
	}}
}

// binaryAndList gives the switchyard binary to run and the path of the
// fleet's proxy list, written into dir.
func binaryAndList(binary func() (string, error), f *fleet, dir string) (bin, list string, err error) {
	if bin, err = binary(); err != nil {
		return "", "", err
	}
	list = filepath.Join(dir, "proxies.txt")
	return bin, list, os.WriteFile(list, []byte(proxyList(f.urls())), 0o600)
}

// quickStart is the gateway process of bin that a new user's quick start
// runs over the proxy list at list: flags only, no config file, listening
// on free addresses of 127.0.0.1, its output to log. adminURL is its admin
// listener's.
func quickStart(bin, list string, f *fleet, opts Options, log string) (g gatewayProcess, adminURL string, err error) {
	listen, err := freeport.Addr()
	if err != nil {
		return g, "", err
	}
	admin, err := freeport.Addr()
	if err != nil {
		return g, "", err
	}
	adminURL = "http://" + admin
	return gatewayProcess{
		bin: bin, args: []string{"serve", "--listen", listen, "--admin", admin, "--proxies", list},
		env: opts.SwitchyardEnv, log: log,
		listen: listen, ready: httpOK(adminURL + "/readyz"), roots: f.roots,
	}, adminURL, nil
}

// binaryNote is the report's line on the switchyard binary measured and
// the environment it was given.
func binaryNote(bin string, opts Options) string {
	head := "switchyard binary: " + bin + " (" + binaryVersion(bin) + ")"
	if len(opts.SwitchyardEnv) > 0 {
		head += ", environment " + strings.Join(opts.SwitchyardEnv, " ")
	}
	return head
}

// binaryVersion says which source bin was built from: the VCS revision
// the go command stamped into it, "+modified" for a dirty tree.
func binaryVersion(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "build info unreadable: " + err.Error()
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return info.GoVersion + ", no VCS revision stamped"
	}
	if modified {
		rev += "+modified"
	}
	return info.GoVersion + ", revision " + rev
}

// incidents lists the target incidents the gateway has open (the site is
// failing, not the exits: penalties frozen), from /api/targets.
func incidents(ctx context.Context, adminURL string) string {
	text, _, err := get(ctx, adminURL+"/api/targets")
	if err != nil {
		return err.Error()
	}
	var open struct {
		Incidents []struct{ Target, Class string }
	}
	if err := json.Unmarshal([]byte(text), &open); err != nil {
		return "unreadable: " + err.Error()
	}
	if len(open.Incidents) == 0 {
		return "none"
	}
	parts := make([]string, len(open.Incidents))
	for i, in := range open.Incidents {
		parts[i] = in.Target + " (" + in.Class + ")"
	}
	return strings.Join(parts, ", ")
}

// events summarizes the gateway's recent state and incident events (as
// many as /api/events keeps): state changes by new state, route-wide or
// per target, and incidents opened and closed by target.
func events(ctx context.Context, adminURL string) string {
	text, _, err := get(ctx, adminURL+"/api/events")
	if err != nil {
		return err.Error()
	}
	var evs []struct {
		Kind, Target, To, Class string
		Open                    bool
	}
	if err := json.Unmarshal([]byte(text), &evs); err != nil {
		return "unreadable: " + err.Error()
	}
	counts := make(map[string]float64)
	for _, e := range evs {
		switch {
		case e.Kind == "incident" && e.Open:
			counts["incident opened on "+e.Target+" ("+e.Class+")"]++
		case e.Kind == "incident":
			counts["incident closed on "+e.Target]++
		case e.Target != "":
			counts["→"+e.To+" per target"]++
		default:
			counts["→"+e.To+" route-wide"]++
		}
	}
	return fmt.Sprintf("%d kept: %s", len(evs), formatCounts(counts))
}

// proxyList is the proxy list file of exits, one line each, each route
// named by its exit's place in the fleet, as HAProxy's servers are: the
// same from run to run, as what a gateway keeps across them
// (pacing.learned_file) is by route id.
func proxyList(exits []*url.URL) string {
	var b strings.Builder
	b.WriteString("# livebench fleet\n")
	for i, u := range exits {
		fmt.Fprintf(&b, "%s id=%s\n", u, exitName(i))
	}
	return b.String()
}

// exitName names the fleet's i-th exit.
func exitName(i int) string { return fmt.Sprintf("exit%02d", i) }

// adminClient talks to admin endpoints directly, whatever the
// environment's proxy settings.
var adminClient = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}

// httpOK is a readiness check: GET u answers 200.
func httpOK(u string) func(context.Context) error {
	return func(ctx context.Context) error {
		body, status, err := get(ctx, u)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("%s: %d %s", u, status, strings.TrimSpace(body))
		}
		return err
	}
}

// get fetches u with adminClient.
func get(ctx context.Context, u string) (body string, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return string(b), resp.StatusCode, err
}

// switchyardNotes says what the gateway thought, from its /metrics: its
// attempts by outcome class and by kind of exit, and the routes' states
// at the end.
func switchyardNotes(ctx context.Context, adminURL string, f *fleet) []string {
	text, _, err := get(ctx, adminURL+"/metrics")
	if err != nil {
		return []string{"switchyard /metrics: " + err.Error()}
	}
	samples := parseMetrics(text)
	kinds := make(map[string]string) // route id → kind of exit
	for i := range f.exits {
		kinds[exitName(i)] = f.world.shapes[i].kind(f.world.sites)
	}
	byClass := make(map[string]float64)
	byKind := make(map[string]map[string]float64)
	states := make(map[string]float64)
	for _, s := range samples {
		switch s.name {
		case "switchyard_attempts_total":
			byClass[s.labels["class"]] += s.value
			k := kinds[s.labels["route"]]
			if byKind[k] == nil {
				byKind[k] = make(map[string]float64)
			}
			byKind[k][s.labels["class"]] += s.value
		case "switchyard_routes":
			states[s.labels["state"]] += s.value
		}
	}
	notes := []string{
		"switchyard attempts by class: " + formatCounts(byClass),
		"switchyard routes by state at the end: " + formatCounts(states),
		"switchyard target incidents open at the end: " + incidents(ctx, adminURL),
		"switchyard recent events: " + events(ctx, adminURL),
	}
	for _, k := range sortedKeys(byKind) {
		notes = append(notes, "switchyard attempts on "+k+" exits: "+formatCounts(byKind[k]))
	}
	for _, site := range f.world.sites {
		if n := learnedPace(ctx, adminURL, site); n != "" {
			notes = append(notes, "switchyard pacing learned at the end on "+site+": "+n)
		}
	}
	return notes
}

// learnedPace summarizes what the gateway learned of site's limits, from
// /api/targets/{site}/pace: the rates its exits are held to, all gateways
// together, and this gateway's share; "" when it learned none.
func learnedPace(ctx context.Context, adminURL, site string) string {
	text, status, err := get(ctx, adminURL+"/api/targets/"+url.PathEscape(site)+"/pace")
	switch {
	case err != nil:
		return err.Error()
	case status == http.StatusNotFound:
		return ""
	case status != http.StatusOK:
		return fmt.Sprintf("%d %s", status, strings.TrimSpace(text))
	}
	var pace struct {
		Tolerance, Frozen float64
		Gateways          int
		Pairs             []struct {
			Rate, Own float64
			Guess     bool
		}
	}
	if err := json.Unmarshal([]byte(text), &pace); err != nil {
		return "unreadable: " + err.Error()
	}
	var rates, own []float64
	guessed := 0
	for _, p := range pace.Pairs {
		if p.Rate > 0 {
			rates = append(rates, p.Rate)
			own = append(own, p.Own)
			if p.Guess {
				guessed++
			}
		}
	}
	if len(rates) == 0 && pace.Tolerance == 0 {
		return ""
	}
	n := fmt.Sprintf("%d exits held", len(rates))
	if len(rates) > 0 {
		n += fmt.Sprintf(" at %.2f requests/s (median; %.2f–%.2f; %d guessed), this gateway's share %.2f (median)",
			median(rates), slices.Min(rates), slices.Max(rates), guessed, median(own))
	}
	if pace.Tolerance > 0 {
		n += fmt.Sprintf(", tolerance %.1f requests a window", pace.Tolerance)
	}
	if pace.Frozen > 0 {
		n += fmt.Sprintf(", frozen at %.2f", pace.Frozen)
	}
	return n + fmt.Sprintf(", %d gateway(s)", max(pace.Gateways, 1))
}

// median is the middle of v's values (the upper one of an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// validate checks every section, resolves secrets and loads the routes.
func (l *loader) validate() error {
	for _, check := range []func() error{
		l.checkListen, l.checkServer, l.checkLog, l.checkEngine, l.checkRetry, l.checkProbe,
		l.checkSecurity, l.checkAdmin, l.checkPacing, l.checkFetch, l.checkState, l.checkMITM, l.checkCluster, l.checkTargets, l.checkUsers, l.loadRoutes,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (l *loader) checkListen() error {
	if err := checkAddr(l.c.Listen.Proxy); err != nil {
		return l.errAt("listen.proxy", err.Error())
	}
	if l.c.Listen.Admin != "" {
		if err := checkAddr(l.c.Listen.Admin); err != nil {
			return l.errAt("listen.admin", err.Error())
		}
		if _, port, _ := net.SplitHostPort(l.c.Listen.Admin); port != "0" && l.c.Listen.Admin == l.c.Listen.Proxy {
			return l.errAt("listen.admin", "must differ from listen.proxy")
		}
	}
	if l.c.Listen.API == "" {
		return nil
	}
	if err := checkAddr(l.c.Listen.API); err != nil {
		return l.errAt("listen.api", err.Error())
	}
	if _, port, _ := net.SplitHostPort(l.c.Listen.API); port != "0" {
		switch l.c.Listen.API {
		case l.c.Listen.Proxy:
			return l.errAt("listen.api", "must differ from listen.proxy")
		case l.c.Listen.Admin:
			return l.errAt("listen.api", "must differ from listen.admin")
		}
	}
	return nil
}

func (l *loader) checkFetch() error {
	f := l.c.Fetch
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"fetch.max_request_bytes", f.MaxRequestBytes > 0},
		{"fetch.max_response_bytes", f.MaxResponseBytes > 0},
		{"fetch.max_batch", f.MaxBatch > 0},
		{"fetch.concurrency", f.Concurrency > 0},
		{"fetch.max_concurrency", f.MaxConcurrency > 0},
		{"fetch.feedback_ttl", f.FeedbackTTL > 0},
		{"fetch.max_feedback", f.MaxFeedback > 0},
	} {
		if !c.ok {
			return l.errAt(c.key, "must be positive")
		}
	}
	if f.Concurrency > f.MaxConcurrency {
		return l.errAt("fetch.concurrency", fmt.Sprintf("%d is over fetch.max_concurrency (%d)", f.Concurrency, f.MaxConcurrency))
	}
	return nil
}

// checkAddr accepts "host:port" with a numeric port (0 picks a free one).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: bad port", addr)
	}
	return nil
}

func (l *loader) checkServer() error {
	s := l.c.Server
	switch {
	case s.HeaderTimeout <= 0:
		return l.errAt("server.header_timeout", "must be positive")
	case s.IdleTimeout <= 0:
		return l.errAt("server.idle_timeout", "must be positive")
	case s.BodyTimeout < 0:
		return l.errAt("server.body_timeout", "must not be negative")
	case s.MinBodyRate < 0:
		return l.errAt("server.min_body_rate", "must not be negative")
	case s.MaxClientConns < 0:
		return l.errAt("server.max_client_conns", "must not be negative")
	case s.MaxIdleUpstreamConns < 1:
		return l.errAt("server.max_idle_upstream_conns", "must be positive")
	case s.MaxUpstreamConns < 0:
		return l.errAt("server.max_upstream_conns", "must not be negative (0: no cap)")
	}
	return nil
}

func (l *loader) checkLog() error {
	if f := l.c.Log.Format; f != "text" && f != "json" {
		return l.errAt("log.format", fmt.Sprintf("%q: want text or json", f))
	}
	return nil
}

func (l *loader) checkEngine() error {
	_, err := l.c.Engine.EngineConfig()
	var e *Error
	if errors.As(err, &e) {
		return l.errAt(e.Key, e.Msg)
	}
	return err
}

func (l *loader) checkRetry() error {
	r := l.c.Retry
	switch {
	case r.MaxAttempts < 1 || r.MaxAttempts > 10:
		return l.errAt("retry.max_attempts", "must be in [1, 10]")
	case r.AttemptTimeout <= 0:
		return l.errAt("retry.attempt_timeout", "must be positive")
	case r.RequestTimeout <= 0:
		return l.errAt("retry.request_timeout", "must be positive (it bounds all of a request's attempts; there is no unlimited)")
	case r.RequestTimeout < r.AttemptTimeout:
		return l.errAt("retry.request_timeout", fmt.Sprintf("must be at least retry.attempt_timeout (%v)", r.AttemptTimeout))
	case !(r.BudgetRatio > 0 && r.BudgetRatio <= 1):
		return l.errAt("retry.budget_ratio", "must be in (0, 1]")
	case !(r.HedgeRatio >= 0 && r.HedgeRatio <= r.BudgetRatio):
		return l.errAt("retry.hedge_ratio", "must be in [0, budget_ratio]")
	case r.MaxBodyBytes < 0:
		return l.errAt("retry.max_body_bytes", "must not be negative")
	}
	return nil
}

func (l *loader) checkProbe() error {
	if p := l.c.Probe.URL; p != "" {
		if u, err := url.Parse(p); err != nil || u.Scheme != "http" || u.Host == "" {
			return l.errAt("probe.url", fmt.Sprintf("%q: want an http:// URL", p))
		}
	}
	return nil
}

func (l *loader) checkSecurity() error {
	sec := &l.c.Security
	sec.AllowPrefixes = nil
	for _, s := range sec.AllowCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return l.errAt("security.allow_cidrs", fmt.Sprintf("%q: want a CIDR range such as 10.1.0.0/16", s))
		}
		sec.AllowPrefixes = append(sec.AllowPrefixes, p)
	}
	for _, h := range sec.AllowHosts {
		if !hostName.MatchString(h) {
			return l.errAt("security.allow_hosts", fmt.Sprintf("%q: want a host name", h))
		}
	}
	return nil
}

// BlockPrivate says whether SSRF admission is on: as configured, else on
// for a proxy or fetch API reachable beyond loopback (docs/security.md).
func (c *Config) BlockPrivate() bool {
	if b := c.Security.BlockPrivateNetworks; b != nil {
		return *b
	}
	return !c.LoopbackOnly()
}

// LoopbackOnly reports whether the front doors that carry traffic, the
// proxy and the fetch API (when on), listen on loopback addresses only,
// out of other machines' reach.
func (c *Config) LoopbackOnly() bool {
	return loopback(c.Listen.Proxy) && (c.Listen.API == "" || loopback(c.Listen.API))
}

// loopback reports whether addr ("host:port") is on a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (l *loader) checkAdmin() error {
	if err := l.c.Admin.Token.resolve(l.lookupEnv); err != nil {
		return l.errAt("admin.token", err.Error())
	}
	switch {
	case !l.c.Admin.Pprof:
	case l.c.Admin.Token.Value() == "":
		return l.errAt("admin.pprof", "needs admin.token (or SWITCHYARD_ADMIN_TOKEN): profiles are served to its holders only")
	case l.c.Listen.Admin == "":
		return l.errAt("admin.pprof", "needs listen.admin: profiles are served on the admin listener")
	}
	return nil
}

func (l *loader) lookupEnv(name string) (string, bool) {
	v, ok := l.env[name]
	return v, ok
}

func (l *loader) checkPacing() error {
	if l.c.Pacing.MaxTargets < 1 {
		return l.errAt("pacing.max_targets", "must be positive")
	}
	if l.c.Pacing.LearnedMaxWait < 0 {
		return l.errAt("pacing.learned_max_wait", "must not be negative")
	}
	if f := l.c.Pacing.LearnedFile; f != "" {
		if l.c.State.Shared() {
			return l.errAt("pacing.learned_file", "not with shared state: the store keeps what the sites taught for every gateway")
		}
		// Saved beside itself and renamed over it: its directory must be there.
		if fi, err := os.Stat(filepath.Dir(f)); err != nil || !fi.IsDir() {
			return l.errAt("pacing.learned_file", fmt.Sprintf("%s: its directory %s is not there", f, filepath.Dir(f)))
		}
	}
	return nil
}

func (l *loader) checkState() error {
	st := l.c.State
	if st.Shared() {
		u, err := url.Parse(st.URL)
		if err != nil || !slices.Contains([]string{"redis", "rediss", "redis-cluster", "rediss-cluster"}, u.Scheme) || u.Host == "" {
			// The URL may hold a password: never quote it.
			return l.errAt("state.url", `want "memory", redis://[:password@]host:port/db or redis-cluster://host:port?addr=host:port`)
		}
	}
	switch {
	case !keyPrefix.MatchString(st.Prefix):
		return l.errAt("state.prefix", fmt.Sprintf("%q: letters, digits and _.:- only", st.Prefix))
	case st.Timeout <= 0:
		return l.errAt("state.timeout", "must be positive")
	case st.Resync <= 0:
		return l.errAt("state.resync", "must be positive")
	}
	return nil
}

// minClusterSecret is the shortest cluster secret taken: every node token
// is derived from it, and a short one can be guessed offline from one.
const minClusterSecret = 16

// nodeID is what a node id may hold: it appears in headers, metrics and
// logs.
var nodeID = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

func (l *loader) checkCluster() error {
	if err := l.c.Cluster.Secret.resolve(l.lookupEnv); err != nil {
		return l.errAt("cluster.secret", err.Error())
	}
	c := l.c.Cluster
	if c.NodeID != "" && !nodeID.MatchString(c.NodeID) {
		return l.errAt("cluster.node_id", fmt.Sprintf("%q: 1 to 64 letters, digits and _.:- only", clipValue(c.NodeID)))
	}
	for i, p := range c.Peers {
		if err := checkAddr(p); err != nil {
			return l.errAt("cluster.peers", fmt.Sprintf("peer %d: %v", i+1, err))
		}
	}
	if c.DNS != "" {
		if err := checkDNSName(c.DNS); err != nil {
			return l.errAt("cluster.dns", err.Error())
		}
	}
	for _, d := range []struct {
		key string
		ok  bool
	}{
		{"cluster.dns_interval", c.DNSInterval > 0},
		{"cluster.check_interval", c.CheckInterval > 0},
		{"cluster.check_timeout", c.CheckTimeout > 0},
		{"cluster.down_after", c.DownAfter > 0},
		{"cluster.up_after", c.UpAfter > 0},
	} {
		if !d.ok {
			return l.errAt(d.key, "must be positive")
		}
	}
	if c.MaxFailover < 0 {
		return l.errAt("cluster.max_failover", "must not be negative")
	}
	var tlsSet []string
	for _, k := range []struct{ key, v string }{{"cluster.tls_cert", c.TLSCert}, {"cluster.tls_key", c.TLSKey}, {"cluster.tls_ca", c.TLSCA}} {
		if k.v != "" {
			tlsSet = append(tlsSet, k.key)
		}
	}
	switch len(tlsSet) {
	case 0:
	case 3:
		if _, _, err := l.c.Cluster.ClusterConfig().TLS(); err != nil {
			key := "cluster.tls_cert"
			if strings.Contains(err.Error(), "tls_ca:") {
				key = "cluster.tls_ca"
			}
			return l.errAt(key, strings.TrimPrefix(err.Error(), "cluster: "))
		}
	default:
		return l.errAt(tlsSet[0], "set cluster.tls_cert, cluster.tls_key and cluster.tls_ca together, or none")
	}
	if len(c.Peers) == 0 && c.DNS == "" {
		return nil
	}
	switch {
	case !c.Secret.IsSet():
		return l.errAt("cluster.secret", `required with cluster.peers or cluster.dns: nodes prove themselves with tokens derived from it (give it as "env:NAME" or "file:PATH", the same on every node)`)
	case len(c.Secret.Value()) < minClusterSecret:
		return l.errAt("cluster.secret", fmt.Sprintf("shorter than %d bytes: a node token would let it be guessed", minClusterSecret))
	case l.c.Listen.API == "":
		return l.errAt("cluster.peers", "nodes talk over the fetch API's gRPC: set listen.api")
	}
	return nil
}

// checkDNSName accepts "name:port" (A and AAAA records) or
// "_service._proto.name" (SRV records).
func checkDNSName(name string) error {
	if strings.HasPrefix(name, "_") {
		if !hostName.MatchString(name) {
			return fmt.Errorf("%q: not a DNS name", clipValue(name))
		}
		return nil
	}
	host, _, err := net.SplitHostPort(name)
	if err != nil || checkAddr(name) != nil || !hostName.MatchString(host) {
		return fmt.Errorf("%q: want name:port (A and AAAA records) or _service._proto.name (SRV records)", clipValue(name))
	}
	return nil
}

// clipValue cuts what a message quotes of a value to 64 bytes.
func clipValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// keyPrefix is what a Redis key prefix may hold.
var keyPrefix = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// hostName is a DNS name as a host pattern or allow-list may hold it.
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$`)

// targetKey is what a target key may hold: it appears in metrics and URLs.
var targetKey = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,253}$`)

func (l *loader) checkMITM() error {
	m := &l.c.MITM
	switch {
	case (m.CACert == "") != (m.CAKey == ""):
		key := map[bool]string{true: "mitm.ca_cert", false: "mitm.ca_key"}[m.CACert != ""] // the one given
		return l.errAt(key, "mitm.ca_cert and mitm.ca_key go together: give both or neither")
	case m.Enabled && m.CACert == "" && m.StateDir == "":
		return l.errAt("mitm.state_dir", "no default without a home directory: set it, or mitm.ca_cert and mitm.ca_key")
	case m.CertCache <= 0:
		return l.errAt("mitm.cert_cache", "must be positive")
	}
	for _, list := range []struct {
		key   string
		hosts []string
	}{{"mitm.only", m.Only}, {"mitm.bypass", m.Bypass}} {
		for _, h := range list.hosts {
			if err := checkHostPattern(h); err != nil {
				return l.errAt(list.key, err.Error())
			}
		}
	}
	if m.UpstreamCA != "" {
		data, err := os.ReadFile(m.UpstreamCA)
		if err != nil {
			return l.errAt("mitm.upstream_ca", err.Error())
		}
		m.UpstreamRoots = x509.NewCertPool()
		if !m.UpstreamRoots.AppendCertsFromPEM(data) {
			return l.errAt("mitm.upstream_ca", m.UpstreamCA+" holds no PEM certificate")
		}
	}
	return nil
}

// checkHostPattern checks a host pattern as [[targets]] hosts,
// mitm.only and mitm.bypass write them.
func checkHostPattern(h string) error {
	if h != "*" && !hostName.MatchString(strings.TrimPrefix(h, "*.")) {
		return fmt.Errorf("%q: want \"example.com\", \"*.example.com\" or \"*\"", h)
	}
	return nil
}

func (l *loader) checkTargets() error {
	for i, t := range l.c.Targets {
		at := func(key string) string { return fmt.Sprintf("targets[%d].%s", i+1, key) }
		if len(t.Hosts) == 0 {
			return l.errAt(at("hosts"), "names no host: want \"example.com\", \"*.example.com\" or \"*\"")
		}
		for _, h := range t.Hosts {
			if err := checkHostPattern(h); err != nil {
				return l.errAt(at("hosts"), err.Error())
			}
		}
		if t.Key != "" && !targetKey.MatchString(t.Key) {
			return l.errAt(at("key"), fmt.Sprintf("%q: only letters, digits and _.:- are allowed", t.Key))
		}
		if t.ProbePath != "" && !strings.HasPrefix(t.ProbePath, "/") {
			return l.errAt(at("probe_path"), fmt.Sprintf("%q: must start with /", t.ProbePath))
		}
		for _, s := range t.BlockSignatures {
			if s == "" {
				return l.errAt(at("block_signatures"), "an empty signature would match every page")
			}
		}
		var le *pacing.LimitsError
		if err := t.Limits().Validate(); errors.As(err, &le) {
			return l.errAt(at(le.Field), "must be a finite number ≥ 0")
		}
		// Pacing is per target: without a key, the hosts must be whole
		// targets (registrable domains) for their requests to be paced.
		if t.Key == "" && !t.Limits().IsZero() {
			for _, h := range t.Hosts {
				if d := strings.TrimPrefix(h, "*."); h != "*" && target.DefaultKey(d) != strings.ToLower(strings.TrimSuffix(d, ".")) {
					return l.errAt(at("hosts"), fmt.Sprintf("%q is part of target %s, which pacing applies to as a whole: name %s, or set key to pace these hosts as their own target", h, target.DefaultKey(d), target.DefaultKey(d)))
				}
			}
		}
	}
	return nil
}

// userName is what a user name may hold: no "-", which separates the
// control parameters in the proxy username, and no ":".
var userName = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

func (l *loader) checkUsers() error {
	seen := map[string]bool{}
	for i := range l.c.Users {
		u := &l.c.Users[i]
		at := func(key string) string { return fmt.Sprintf("users[%d].%s", i+1, key) }
		switch {
		case !userName.MatchString(u.Name):
			return l.errAt(at("name"), "must be letters, digits, '_' or '.'")
		case seen[u.Name]:
			return l.errAt(at("name"), fmt.Sprintf("user %s is given twice", u.Name))
		case u.Password.IsSet() == u.PasswordHash.IsSet():
			return l.errAt(at("password"), fmt.Sprintf("user %s: set exactly one of password and password_hash", u.Name))
		}
		seen[u.Name] = true
		if err := u.PasswordHash.resolve(l.lookupEnv); err != nil {
			return l.errAt(at("password_hash"), fmt.Sprintf("user %s: %v", u.Name, err))
		}
		if u.PasswordHash.IsSet() {
			// The message never quotes the hash: it is a secret too.
			if _, err := bcrypt.Cost([]byte(u.PasswordHash.Value())); err != nil {
				return l.errAt(at("password_hash"), fmt.Sprintf("user %s: not a bcrypt hash ($2a$, $2b$ or $2y$; make one with htpasswd -nbB)", u.Name))
			}
		}
		if err := u.Password.resolve(l.lookupEnv); err != nil {
			return l.errAt(at("password"), fmt.Sprintf("user %s: %v", u.Name, err))
		}
		if u.Password.IsSet() && u.Password.Value() == "" {
			return l.errAt(at("password"), fmt.Sprintf("user %s: empty password", u.Name))
		}
		var err error
		if u.LabelList, err = engine.ParseLabels(u.Labels); err != nil {
			return l.errAt(at("labels"), fmt.Sprintf("user %s: %v", u.Name, err))
		}
	}
	return nil
}

// parseEnvUsers parses SWITCHYARD_USERS, "alice:pw1,bob:pw2": the quick
// start's plain users. A password may contain ':' (the name ends at the
// first). Errors name the entry by position and never quote it: it may
// hold a password. Nothing is trimmed: a space is part of a password.
func parseEnvUsers(v string) ([]User, error) {
	const name = "SWITCHYARD_USERS"
	fail := func(msg string) error { return &Error{Key: "users", From: "environment variable " + name, Msg: msg} }
	if v == "" {
		return nil, fail("set but names no user (unset it to turn client auth off)")
	}
	var users []User
	for i, entry := range strings.Split(v, ",") {
		user, password, ok := strings.Cut(entry, ":")
		switch {
		case !ok:
			return nil, fail(fmt.Sprintf("entry %d: want user:password", i+1))
		case !userName.MatchString(user):
			return nil, fail(fmt.Sprintf("entry %d: user name must be letters, digits, '_' or '.'", i+1))
		case password == "":
			return nil, fail(fmt.Sprintf("entry %d: user %s has an empty password", i+1, user))
		}
		users = append(users, User{Name: user, Password: LiteralSecret(password)})
	}
	return users, nil
}

// loadRoutes parses the routes file and the inline routes; together they
// must name at least one route, each id once.
func (l *loader) loadRoutes() error {
	r := l.c.Routes
	if r.File == "" && len(r.Inline) == 0 {
		return l.errAt("routes.file", "no routes: set routes.file (or --proxies) or routes.inline")
	}
	var list []route.Route
	if r.File != "" {
		fromFile, err := route.LoadList(r.File)
		if err != nil {
			return l.errAt("routes.file", err.Error())
		}
		list = fromFile
	}
	if len(r.Inline) > 0 {
		name := "routes.inline entry"
		if l.file != "" {
			name = l.file + " routes.inline entry"
		}
		inline, err := route.ParseList(name, []byte(strings.Join(r.Inline, "\n")))
		if err != nil {
			return &Error{Key: "routes.inline", Msg: err.Error()}
		}
		first := make(map[string]bool, len(list))
		for _, rt := range list {
			first[rt.ID] = true
		}
		for _, rt := range inline {
			if first[rt.ID] {
				return &Error{Key: "routes.inline", Msg: fmt.Sprintf("entry %d: route %s is also in %s", rt.Line, rt.ID, r.File)}
			}
		}
		l.c.inlineFrom = len(list)
		list = append(list, inline...)
	}
	l.c.RouteList = list
	return nil
}

// Package config turns a TOML file, SWITCHYARD_<SECTION>_<KEY> environment
// variables and command-line flags into one validated Config
// (docs/design/008-gateway.md). Defaults are applied in one pass (Default),
// then the file, then the environment, then flags; every error names the
// key, with file:line when the value came from the file.
// switchyard.example.toml documents every key.
package config

import (
	"crypto/x509"
	"net/netip"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/redisstore"
	"github.com/switchyard/switchyard/internal/admin"
	"github.com/switchyard/switchyard/internal/cluster"
	"github.com/switchyard/switchyard/internal/fetchapi"
	"github.com/switchyard/switchyard/internal/gateway"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/pacing"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/target"
)

// Config is everything a gateway process needs to start. Only Load makes a
// valid one.
type Config struct {
	Listen   Listen   `toml:"listen"`
	Server   Server   `toml:"server"`
	Log      Log      `toml:"log"`
	Routes   Routes   `toml:"routes"`
	Engine   Engine   `toml:"engine"`
	Retry    Retry    `toml:"retry"`
	Probe    Probe    `toml:"probe"`
	Security Security `toml:"security"`
	Admin    Admin    `toml:"admin"`
	Metrics  Metrics  `toml:"metrics"`
	Pacing   Pacing   `toml:"pacing"`
	Fetch    Fetch    `toml:"fetch"`
	State    State    `toml:"state"`
	MITM     MITM     `toml:"mitm"`
	Cluster  Cluster  `toml:"cluster"`
	Targets  []Target `toml:"targets"`
	Users    []User   `toml:"users"`

	// RouteList is the routes of Routes.File and Routes.Inline, parsed.
	RouteList []route.Route `toml:"-"`
	// Warnings are what Load let pass but the operator should hear of, one
	// line each, for the caller to log: a secret written in the file as
	// is. They never quote a secret.
	Warnings []string `toml:"-"`
	// inlineFrom is where Routes.Inline starts in RouteList.
	inlineFrom int
}

// Listen says where the process listens. Changing it needs a restart.
type Listen struct {
	Proxy string `toml:"proxy"` // the forward proxy; default 127.0.0.1:8080
	Admin string `toml:"admin"` // admin API and metrics; default 127.0.0.1:9090, "" for none
	// API is the fetch API, gRPC and HTTP JSON on one port
	// (docs/design/009-fetch-api.md); default 127.0.0.1:9091, "" for none.
	API string `toml:"api"`
}

// Server bounds the forward proxy's client connections, so that idle,
// slow or too many clients cannot hold the gateway's sockets. Changing it
// needs a restart.
type Server struct {
	// HeaderTimeout bounds reading a request's headers: from the accept
	// for a connection's first request, from the first byte for later
	// ones. Default 10s.
	HeaderTimeout time.Duration `toml:"header_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long between
	// requests. CONNECT tunnels are not requests: it never applies to
	// them. Default 2m.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// BodyTimeout is how far a request body may fall behind MinBodyRate
	// (so also the longest it may stall) before the connection is cut;
	// 0 turns the check off. Default 20s.
	BodyTimeout time.Duration `toml:"body_timeout"`
	// MinBodyRate is the slowest a request body may arrive, in bytes/s;
	// 0 leaves BodyTimeout a bound on stalls alone. Default 1024.
	MinBodyRate int64 `toml:"min_body_rate"`
	// MaxClientConns caps the open client connections, tunnels included;
	// one more is closed as soon as it is accepted. 0 means no cap.
	// Default 10000.
	MaxClientConns int `toml:"max_client_conns"`
	// MaxIdleUpstreamConns caps the idle connections the gateway keeps to
	// upstream proxies (to targets, for direct and SOCKS5 routes and
	// https:// through any) across all routes, the least recently used
	// closed first: routes naming the same proxy with the same credentials
	// share them, so the descriptors held stay bounded whatever the size
	// of the pool. Must be positive; default 1024.
	MaxIdleUpstreamConns int `toml:"max_idle_upstream_conns"`
	// MaxUpstreamConns caps the connections open to upstream proxies (to
	// targets, for direct routes) at once, in use or idle, tunnels
	// included; an attempt past it is answered 503 local_resources and
	// blames no route. 0 means no cap but the descriptor limit. Default
	// 10000.
	MaxUpstreamConns int `toml:"max_upstream_conns"`
}

// Log configures the log on stderr.
type Log struct {
	Format string `toml:"format"` // "text" (default) or "json"
}

// Routes are the exits, in the proxy-list syntax proxies.example.txt
// documents: from a file (relative to the config file), inline, or both.
type Routes struct {
	File   string   `toml:"file"`
	Inline []string `toml:"inline"`
}

// Engine holds the engine's knobs. Each field is the engine.Config field of
// the same name (see its documentation); Default fills them with the
// engine's defaults so the effective config shows the values in force.
type Engine struct {
	Alpha               float64       `toml:"alpha"`
	Gamma               float64       `toml:"gamma"`
	Sharpness           float64       `toml:"sharpness"`
	LatencyDecay        time.Duration `toml:"latency_decay"`
	LatencyForget       time.Duration `toml:"latency_forget"`
	DeadlineFactor      float64       `toml:"deadline_factor"`
	DeadlineFloor       time.Duration `toml:"deadline_floor"`
	UncheckedCandidates bool          `toml:"unchecked_candidates"`
	Prior               float64       `toml:"prior"`
	PriorSamples        float64       `toml:"prior_samples"`
	Window              time.Duration `toml:"window"`
	MinVolume           int           `toml:"min_volume"`
	SuspectAfter        int           `toml:"suspect_after"`
	SuspectRate         float64       `toml:"suspect_rate"`
	CoolAfter           int           `toml:"cool_after"`
	CoolRate            float64       `toml:"cool_rate"`
	RecoverAfter        int           `toml:"recover_after"`
	SuspectWeight       float64       `toml:"suspect_weight"`
	CooldownCap         time.Duration `toml:"cooldown_cap"`
	RetryAfterCap       time.Duration `toml:"retry_after_cap"`
	ProbeSuccesses      int           `toml:"probe_successes"`
	SlowStart           time.Duration `toml:"slow_start"`
	SlowStartFloor      float64       `toml:"slow_start_floor"`
	EjectAfter          int           `toml:"eject_after"`
	EjectTargets        int           `toml:"eject_targets"`
	EjectTime           time.Duration `toml:"eject_time"`
	EjectCap            time.Duration `toml:"eject_cap"`
	MaxRemovedShare     float64       `toml:"max_removed_share"`
	OverwhelmingAfter   int           `toml:"overwhelming_after"`
	PanicThreshold      float64       `toml:"panic_threshold"`
	IncidentRoutes      int           `toml:"incident_routes"`
	IncidentShare       float64       `toml:"incident_share"`
	IncidentWindow      time.Duration `toml:"incident_window"`
	LeaseTTL            time.Duration `toml:"lease_ttl"`
	SessionTTL          time.Duration `toml:"session_ttl"`
	PairTTL             time.Duration `toml:"pair_ttl"`
	PaceStart           float64       `toml:"pace_start"`
	PaceFloor           float64       `toml:"pace_floor"`
	PaceGrowth          float64       `toml:"pace_growth"`
	PaceMax             float64       `toml:"pace_max"`
	PaceWindow          time.Duration `toml:"pace_window"`
	TierEscalateBelow   float64       `toml:"tier_escalate_below"`
	TierCalm            time.Duration `toml:"tier_calm"`
	TierCalmMax         time.Duration `toml:"tier_calm_max"`

	// Picker is "power_of_two" (default) or "weighted_random".
	Picker string `toml:"picker"`
	// Cooldowns overrides the base cooldown of outcome classes, by class
	// name ("blocked", "proxy_connect_failed", …).
	Cooldowns map[string]time.Duration `toml:"cooldowns"`
}

// Retry is the attempt loop's budget (docs/design/007-attempts.md).
type Retry struct {
	MaxAttempts    int           `toml:"max_attempts"`    // attempts per request, the first included; default 3
	AttemptTimeout time.Duration `toml:"attempt_timeout"` // dial to response headers; default 30s
	// RequestTimeout bounds all of a request's attempts together, from
	// when its first route is asked for (pacing.learned_max_wait included)
	// to the response headers (for CONNECT: until the tunnel is built);
	// past it the client gets 504 request_timeout. At least
	// AttemptTimeout; 0 is refused, there is no "no limit". Default 60s:
	// one attempt may run its whole attempt_timeout and a retry still have
	// as long, while a client is never held 3 × 30s.
	RequestTimeout time.Duration `toml:"request_timeout"`
	BudgetRatio    float64       `toml:"budget_ratio"`   // pool-wide retries and hedges per request; default 0.2
	HedgeRatio     float64       `toml:"hedge_ratio"`    // pool-wide hedges per request, within budget_ratio; 0 turns hedging off; default 0.05
	MaxBodyBytes   int64         `toml:"max_body_bytes"` // largest request body buffered for a retry; default 1 MiB
}

// Probe configures the probes that test cooled routes off users' traffic.
type Probe struct {
	// URL is an http:// page neutral probes fetch through each route; ""
	// makes them a tunnel through the route's proxy to port 443 of a host
	// users' traffic reached (of a name reserved never to resolve until one
	// is known: the proxy answers for the credentials all the same).
	URL string `toml:"url"`
}

// Security is SSRF admission (docs/security.md).
type Security struct {
	// BlockPrivateNetworks refuses internal destinations; unset means on
	// unless listen.proxy is a loopback address.
	BlockPrivateNetworks *bool    `toml:"block_private_networks"`
	AllowCIDRs           []string `toml:"allow_cidrs"` // ranges exempt from the blocks
	AllowHosts           []string `toml:"allow_hosts"` // host names exempt from the blocks
	// ResolveProxyTargets resolves the targets of proxy routes at the
	// gateway too, refusing names that resolve to blocked addresses.
	ResolveProxyTargets bool `toml:"resolve_proxy_targets"`

	// AllowPrefixes is AllowCIDRs, parsed by Load.
	AllowPrefixes []netip.Prefix `toml:"-"`
}

// Admin configures the admin listener's actions.
type Admin struct {
	// Token is the bearer token of admin actions (drain, eject, restore);
	// empty makes the admin read-only.
	Token Secret `toml:"token"`
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on
	// the admin listener, to holders of Token only, which it requires:
	// profiles show the process's memory and code paths. Default false.
	Pprof bool `toml:"pprof"`
}

// Metrics shapes /metrics. Changing it needs a restart.
type Metrics struct {
	// PerRoute exports the series labelled by route
	// (switchyard_attempts_total, switchyard_route_inflight,
	// switchyard_route_score): true, false, or "auto" (the default), on
	// while the pool has at most admin.PerRouteAutoMax (1000) routes and
	// off once a reload grows it past them. Without them the pool's
	// series stay.
	PerRoute admin.PerRoute `toml:"per_route"`
}

// Pacing bounds the memory of per-target pacing.
type Pacing struct {
	MaxTargets int `toml:"max_targets"` // targets (and route×target pairs) remembered; default 10000
	// LearnedMaxWait is how long a request waits for an exit when all of
	// its target's are at the rates the target's 429s and bans taught,
	// before it gets 429 with Retry-After. Default 0: answer at once, so
	// that the client's worker moves on to other work (measured in
	// docs/design/005-cost.md).
	LearnedMaxWait time.Duration `toml:"learned_max_wait"`
	// LearnedFile keeps what the sites' 429s and bans taught (each exit's
	// rate at each site, a site's tolerance) across restarts: read at start, written every half
	// minute and at shutdown. Default "": a restart learns it again.
	// Relative to the config file; not with shared state, which keeps it
	// for every gateway.
	LearnedFile string `toml:"learned_file"`
}

// Fetch bounds the fetch API (docs/design/009-fetch-api.md). Changing it
// needs a restart.
type Fetch struct {
	// MaxRequestBytes caps one JSON request body and one gRPC message.
	// Default 4 MiB.
	MaxRequestBytes int `toml:"max_request_bytes"`
	// MaxResponseBytes is the most of an answer's body a fetch keeps; a
	// longer one is cut there and marked truncated. Default 16 MiB.
	MaxResponseBytes int64 `toml:"max_response_bytes"`
	// MaxBatch caps the requests of one batch. Default 10000.
	MaxBatch int `toml:"max_batch"`
	// Concurrency is how many requests of one batch or stream are carried
	// at once unless a batch asks for fewer; MaxConcurrency caps what a
	// batch may ask. Defaults 8 and 64.
	Concurrency    int `toml:"concurrency"`
	MaxConcurrency int `toml:"max_concurrency"`
	// FeedbackTTL is how long after a fetch, or an answer relayed by the
	// proxy (X-Switchyard-Feedback), its attempts take a late verdict, and
	// MaxFeedback how many of the fetches' attempts are remembered for it
	// (the oldest forgotten first). Defaults 15m and 100000.
	FeedbackTTL time.Duration `toml:"feedback_ttl"`
	MaxFeedback int           `toml:"max_feedback"`
}

// State says where the engine's shared state lives
// (docs/design/004-redis-store.md).
type State struct {
	// URL is "memory" (this process alone) or a Redis URL shared by every
	// gateway process pointed at it: redis://[:password@]host:port/db
	// (rediss:// for TLS), or redis-cluster://host:port?addr=host:port&…
	// for a Redis Cluster. Default "memory".
	URL string `toml:"url"`
	// Prefix starts every Redis key: one per deployment. Default
	// "switchyard".
	Prefix string `toml:"prefix"`
	// Timeout bounds one Redis call on the request path; past it the
	// gateway serves from local state until Redis answers. Default 100ms.
	Timeout time.Duration `toml:"timeout"`
	// Resync is the period of the full resync that heals missed change
	// notifications. Default 10s.
	Resync time.Duration `toml:"resync"`
}

// MITM is TLS interception (docs/design/012-mitm.md): the gateway answers
// CONNECTs itself and serves the HTTPS requests inside as it serves plain
// ones, observed and retried. Changing it needs a restart.
type MITM struct {
	Enabled bool `toml:"enabled"` // default false: tunnels are spliced blind
	// StateDir keeps the CA generated on first use (mitm-ca.pem, and
	// mitm-ca-key.pem written 0600); default switchyard/ under the user's
	// config directory ($XDG_CONFIG_HOME or ~/.config). Relative to the
	// config file.
	StateDir string `toml:"state_dir"`
	// CACert and CAKey, given together, are PEM files of a CA of the
	// operator's, used instead of one in StateDir. Relative to the config
	// file.
	CACert string `toml:"ca_cert"`
	CAKey  string `toml:"ca_key"`
	// Only, when not empty, are the hosts whose tunnels are intercepted, as
	// [[targets]] hosts are written: the sites whose answers matter (429s,
	// bans, captchas), every other tunnel plain and at a plain tunnel's
	// cost. Default empty: every host but Bypass's.
	Only []string `toml:"only"`
	// Bypass are the hosts whose tunnels stay plain, as [[targets]] hosts
	// are written: pinned apps, banks. It wins over Only.
	Bypass []string `toml:"bypass"`
	// UpstreamCA is a PEM bundle that sites fetched over TLS (inside
	// intercepted tunnels, and https:// fetches of the fetch API) are
	// verified against instead of the system's roots. Relative to the
	// config file.
	UpstreamCA string `toml:"upstream_ca"`
	// CertCache is how many hosts' minted certificates are kept. Default
	// 4096.
	CertCache int `toml:"cert_cache"`

	// UpstreamRoots is UpstreamCA, parsed; nil for the system's.
	UpstreamRoots *x509.CertPool `toml:"-"`
}

// Cluster makes this gateway a node of a cluster of nodes that each own
// exits (docs/design/013-cluster.md): every node takes requests and runs
// each on the node whose exits fit it. Nodes talk over the fetch API's
// gRPC (listen.api). Each field is the cluster.Config field of the same
// name; the defaults are cluster.DefaultConfig's. A reload applies peers
// and dns; the rest needs a restart.
type Cluster struct {
	// NodeID names this node; SWITCHYARD_NODE_ID overrides it. "" means
	// the host's name, with a loud warning.
	NodeID string `toml:"node_id"`
	// Secret is shared by every node; each node's token is derived from
	// it. Required with peers or dns; at least 16 bytes; best given as
	// "env:NAME" or "file:PATH".
	Secret Secret `toml:"secret"`
	// Peers are the nodes' API addresses (their listen.api), host:port;
	// this node's own may be listed, so that one list serves all.
	Peers []string `toml:"peers"`
	// DNS is a name whose records are peers: "name:port" (A and AAAA
	// records) or "_service._proto.name" (SRV records); "" for none.
	DNS           string        `toml:"dns"`
	DNSInterval   time.Duration `toml:"dns_interval"`   // re-resolution period; default 30s
	CheckInterval time.Duration `toml:"check_interval"` // health checks of every peer; default 5s
	CheckTimeout  time.Duration `toml:"check_timeout"`  // one check; default 2s
	DownAfter     int           `toml:"down_after"`     // failed checks in a row that take a peer out; default 2
	UpAfter       int           `toml:"up_after"`       // passed checks in a row that put it back; default 2
	// MaxFailover is how many more nodes a GET, HEAD or OPTIONS is sent
	// to after its node failed in transport; 0 means none. Default 2.
	MaxFailover int `toml:"max_failover"`
	// TLSCert and TLSKey are PEM files of this node's certificate and
	// key, TLSCA of the CA that signs every node's: all three or none.
	// With them the API listener serves TLS (to users too) and calls to
	// peers are TLS checked against the CA; "" for h2c.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	TLSCA   string `toml:"tls_ca"`
}

// ClusterConfig is the section as internal/cluster takes it.
func (c Cluster) ClusterConfig() cluster.Config {
	return cluster.Config{
		Secret: c.Secret.Value(), Peers: c.Peers, DNS: c.DNS, DNSInterval: c.DNSInterval,
		CheckInterval: c.CheckInterval, CheckTimeout: c.CheckTimeout, DownAfter: c.DownAfter, UpAfter: c.UpAfter, MaxFailover: c.MaxFailover,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSCA: c.TLSCA,
	}
}

// Shared reports whether the state is in Redis.
func (s State) Shared() bool { return s.URL != "memory" }

// Target is a rule for the sites whose host matches one of Hosts: the
// first rule that matches a host, in file order, applies.
type Target struct {
	// Hosts are "example.com" (that host), "*.example.com" (its
	// subdomains) or "*" (every host).
	Hosts []string `toml:"hosts"`
	// Key names the target these hosts count as; "" keeps the default, the
	// registrable domain (eTLD+1).
	Key string `toml:"key"`
	// ProbePath is the path half-open probes fetch on the target; default "/".
	ProbePath string `toml:"probe_path"`
	// BlockSignatures are body substrings that mark an answer as a soft
	// ban (content_invalid), such as a captcha page's title, searched as
	// the built-in signatures are (README, Soft bans).
	BlockSignatures []string `toml:"block_signatures"`
	// BuiltinSignatures, when false, turns off the built-in signatures of
	// anti-bot challenge and block pages for these hosts; default true.
	BuiltinSignatures *bool `toml:"builtin_signatures"`
	// Lookalike, when false, turns off the lookalike detector for these
	// hosts, which finds soft bans no signature knows (a route answering
	// one page for different URLs while the others' pages differ; README,
	// Soft bans); default true.
	Lookalike *bool `toml:"lookalike"`

	// Pacing of the target, separate from breakers: a paced request waits
	// at most MaxWait, then gets 429 with Retry-After. Zero means unlimited.
	Rate          float64       `toml:"rate"`           // requests/s
	Burst         int           `toml:"burst"`          // default ceil(rate)
	MaxConcurrent int           `toml:"max_concurrent"` // requests in flight
	MaxWait       time.Duration `toml:"max_wait"`       // queueing allowed; 0 refuses at once
	MaxQueue      int           `toml:"max_queue"`      // waiting requests; default 100
	PairRate      float64       `toml:"pair_rate"`      // politeness: requests/s per route to this target
	PairBurst     int           `toml:"pair_burst"`     // default ceil(pair_rate)

	// Hedge, when false, never hedges requests to the target, as for a
	// site where a duplicate GET costs (a counter, a quota); default true.
	Hedge *bool `toml:"hedge"`
}

// User is a client allowed through the proxy (docs/design/008-gateway.md).
type User struct {
	Name string `toml:"name"` // letters, digits, '_' or '.'
	// PasswordHash is a bcrypt hash ($2a$, $2b$ or $2y$), as made by
	// "htpasswd -nbB", or a reference to one. Exactly one of PasswordHash
	// and Password is set.
	PasswordHash Secret `toml:"password_hash"`
	// Password is the plain password, best given as "env:NAME".
	Password Secret `toml:"password"`
	// Labels are hard constraints the user cannot escape, e.g.
	// "provider=acme".
	Labels string `toml:"labels"`

	// LabelList is Labels, parsed by Load.
	LabelList engine.Labels `toml:"-"`
}

// Default is the configuration in force before the file, the environment
// and flags: every default in one place.
func Default() Config {
	g, r, cl, f := gateway.DefaultConfig(), redisstore.DefaultOptions(), cluster.DefaultConfig(), fetchapi.DefaultOptions()
	c := Config{
		Listen: Listen{Proxy: "127.0.0.1:8080", Admin: "127.0.0.1:9090", API: "127.0.0.1:9091"},
		Server: Server{HeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, BodyTimeout: 20 * time.Second, MinBodyRate: 1024, MaxClientConns: 10000, MaxUpstreamConns: g.MaxUpstreamConns,
			MaxIdleUpstreamConns: g.MaxIdleUpstreamConns},
		Log: Log{Format: "text"},
		Retry: Retry{MaxAttempts: g.MaxAttempts, AttemptTimeout: g.AttemptTimeout, RequestTimeout: g.RequestTimeout,
			BudgetRatio: g.Budget.BudgetRatio, HedgeRatio: g.Budget.HedgeRatio, MaxBodyBytes: g.MaxBodyBytes},
		Metrics: Metrics{PerRoute: admin.PerRouteAuto},
		Pacing:  Pacing{MaxTargets: 10000},
		Fetch: Fetch{MaxRequestBytes: f.MaxRequestBytes, MaxResponseBytes: g.MaxFetchBody, MaxBatch: f.MaxBatch, Concurrency: f.Concurrency,
			MaxConcurrency: f.MaxConcurrency, FeedbackTTL: f.FeedbackTTL, MaxFeedback: f.MaxFeedback},
		State: State{URL: "memory", Prefix: r.Prefix, Timeout: r.Timeout, Resync: r.Resync},
		MITM:  MITM{StateDir: mitm.DefaultStateDir(), CertCache: mitm.DefaultCacheSize},
		Cluster: Cluster{DNSInterval: cl.DNSInterval, CheckInterval: cl.CheckInterval, CheckTimeout: cl.CheckTimeout,
			DownAfter: cl.DownAfter, UpAfter: cl.UpAfter, MaxFailover: cl.MaxFailover},
	}
	c.Engine = engineDefaults()
	return c
}

// TargetRules are the [[targets]] rules, compiled.
func (c *Config) TargetRules() *target.Rules {
	rules := make([]target.Rule, len(c.Targets))
	for i, t := range c.Targets {
		rules[i] = target.Rule{Hosts: t.Hosts, Key: t.Key, Policy: target.Policy{
			ProbePath: t.ProbePath, BlockSignatures: t.BlockSignatures, Pace: t.Limits(), NoHedge: t.Hedge != nil && !*t.Hedge,
			NoBuiltinSignatures: t.BuiltinSignatures != nil && !*t.BuiltinSignatures,
			NoLookalike:         t.Lookalike != nil && !*t.Lookalike,
		}}
	}
	return target.New(rules)
}

// Limits is the target's pacing as the pacer (internal/pacing) applies it.
func (t Target) Limits() pacing.Limits {
	return pacing.Limits{
		Rate: t.Rate, Burst: t.Burst, MaxConcurrent: t.MaxConcurrent, MaxWait: t.MaxWait,
		MaxQueue: t.MaxQueue, PairRate: t.PairRate, PairBurst: t.PairBurst,
	}
}

// WithRoutes is the default configuration over routes, for callers that
// build the route list themselves (the demo, tests).
func WithRoutes(routes []route.Route) *Config {
	c := Default()
	c.RouteList = routes
	return &c
}

package livebench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options are one benchmark run's settings. Zero fields mean the defaults
// below; optionsFromEnv reads them from SWITCHYARD_LIVEBENCH_* variables.
type Options struct {
	// Duration of the load, per contender per pool (LiveFleet) or per
	// cell (LiveCost). Default 15s.
	Duration time.Duration
	// Rounds splits each contender's Duration into this many runs,
	// interleaved with the other contenders' in a rotating order, so that
	// a machine whose load drifts biases no contender; each run starts
	// from a fresh fleet and a fresh contender. Default 1.
	Rounds int
	// Workers run tasks back to back. Default 32.
	Workers int
	// Timeout of one client attempt, waiting for a route excluded (of
	// one request or tunnel in LiveCost). Default 3s.
	Timeout time.Duration
	// Attempts a client makes per task, the first included. Default 3.
	Attempts int
	// Seed fixes the fleet's jitter and flakiness and the load's draws.
	// Default 1.
	Seed uint64
	// Contenders to run, by name; empty means all.
	Contenders []string
	// Binary is a switchyard binary to measure; "" builds ./cmd/switchyard
	// of this module.
	Binary string
	// SwitchyardEnv are KEY=VALUE settings added to the gateway's
	// environment (SWITCHYARD_RETRY_ATTEMPT_TIMEOUT=1s …), for what-ifs;
	// empty is the quick start the benchmark measures by default.
	SwitchyardEnv []string
	// Dir keeps the contenders' files (proxy lists, configs, the gateways'
	// logs) after the run; "" uses a temporary directory, removed after.
	Dir string
	// CaptchaMarker is what captcha pages carry. Default
	// DefaultCaptchaMarker.
	CaptchaMarker string
	// HTTPS makes the sites speak TLS (certificates of a CA of the run's)
	// and the load fetch https:// pages, through CONNECT tunnels: the
	// traffic most crawlers send, which a gateway sees inside only when it
	// intercepts TLS (the switchyard-mitm contender).
	HTTPS bool
}

// The defaults of Options.
const (
	defaultDuration = 15 * time.Second
	defaultWorkers  = 32
	defaultTimeout  = 3 * time.Second
	defaultAttempts = 3
)

func (o Options) withDefaults() Options {
	if o.Duration <= 0 {
		o.Duration = defaultDuration
	}
	if o.Workers <= 0 {
		o.Workers = defaultWorkers
	}
	if o.Rounds <= 0 {
		o.Rounds = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.Attempts <= 0 {
		o.Attempts = defaultAttempts
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.CaptchaMarker == "" {
		o.CaptchaMarker = DefaultCaptchaMarker
	}
	return o
}

// wants reports whether contender name is to run.
func (o Options) wants(name string) bool {
	if len(o.Contenders) == 0 {
		return true
	}
	return slices.Contains(o.Contenders, name)
}

// envPrefix starts every variable optionsFromEnv reads.
const envPrefix = "SWITCHYARD_LIVEBENCH_"

// optionsFromEnv reads SWITCHYARD_LIVEBENCH_DURATION and _TIMEOUT (Go
// durations), _WORKERS, _ROUNDS, _ATTEMPTS, _SEED, _CONTENDERS (comma-separated
// names) and _CAPTCHA_MARKER through getenv (os.Getenv outside tests);
// unset variables keep the defaults.
func optionsFromEnv(getenv func(string) string) (Options, error) {
	var o Options
	vars := []struct {
		key   string
		parse func(string) error
	}{
		{"DURATION", func(v string) (err error) { o.Duration, err = time.ParseDuration(v); return err }},
		{"TIMEOUT", func(v string) (err error) { o.Timeout, err = time.ParseDuration(v); return err }},
		{"WORKERS", func(v string) (err error) { o.Workers, err = strconv.Atoi(v); return err }},
		{"ROUNDS", func(v string) (err error) { o.Rounds, err = strconv.Atoi(v); return err }},
		{"ATTEMPTS", func(v string) (err error) { o.Attempts, err = strconv.Atoi(v); return err }},
		{"SEED", func(v string) (err error) { o.Seed, err = strconv.ParseUint(v, 10, 64); return err }},
		{"CONTENDERS", func(v string) error {
			for _, c := range strings.Split(v, ",") {
				if c = strings.TrimSpace(c); c != "" {
					o.Contenders = append(o.Contenders, c)
				}
			}
			return nil
		}},
		{"BINARY", func(v string) error { o.Binary = v; return nil }},
		{"SWITCHYARD_ENV", func(v string) error {
			for _, kv := range strings.Split(v, ",") {
				if kv = strings.TrimSpace(kv); kv != "" {
					if !strings.Contains(kv, "=") {
						return fmt.Errorf("%q is not KEY=VALUE", kv)
					}
					o.SwitchyardEnv = append(o.SwitchyardEnv, kv)
				}
			}
			return nil
		}},
		{"DIR", func(v string) error { o.Dir = v; return nil }},
		{"CAPTCHA_MARKER", func(v string) error { o.CaptchaMarker = v; return nil }},
		{"HTTPS", func(v string) (err error) { o.HTTPS, err = strconv.ParseBool(v); return err }},
	}
	for _, e := range vars {
		if v := strings.TrimSpace(getenv(envPrefix + e.key)); v != "" {
			if err := e.parse(v); err != nil {
				return Options{}, fmt.Errorf("%s%s: %w", envPrefix, e.key, err)
			}
		}
	}
	return o.withDefaults(), nil
}

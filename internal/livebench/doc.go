// Package livebench is the live, black-box fleet benchmark (README,
// Measuring the real path): a fleet of fake exits with fault shapes on
// 127.0.0.1, fake sites behind them, and a fixed number of crawler workers
// whose throughput is the score. The exits answer as real ones do, a fast
// one in about 100 ms and a slow one in about a second, so that at the
// default 32 workers (~300 requests a second) the score measures the
// contenders' choices, not their CPU. The real switchyard binary, two of
// them sharing one Redis (switchyard-shared, when redis-server is
// installed), HAProxy (leastconn) when installed, glider when installed,
// client-side round-robin and a ground-truth oracle each carry the same
// load over a fresh copy of the same fleet, one after the other, and the
// report gives each contender's completed tasks per second as a ratio to
// the oracle's.
// Beside each pool's table it prints what the simulator of `switchyard
// bench` makes of the same pool, translated into a scenario (the same
// exits, sites and crawler; simulated.go), by the policies that stand for
// the contenders: where the two disagree, the simulator is wrong until
// shown otherwise.
//
// Nothing here dials anything but 127.0.0.1: exits forward only *.test
// hosts, and only to the local site server; there is no DNS.
//
// The benchmark never runs under plain `go test`:
//
//	go test -run '^$' -bench LiveFleet -benchtime 1x ./internal/livebench
//
// SWITCHYARD_LIVEBENCH_DURATION (default 15s), _WORKERS (32), _ROUNDS (1;
// more interleave the contenders against a drifting machine load),
// _CONTENDERS (a comma-separated subset) and _BINARY (a switchyard binary
// to measure instead of building this module's) tune it, _HTTPS=1 makes
// the load https:// pages through CONNECT tunnels (adding the
// switchyard-mitm contender), and _DIR keeps the gateways' logs; see
// Options.
//
// BenchmarkLiveCost measures the gateway's own cost instead (README, The
// gateway's own cost; issue 17): ten exits that add no delay and keep
// connections alive, one site answering a 4 KB page at once, and, one
// after the other on fresh fleets, the clients going straight to the
// exits in rotation (direct: the baseline), HAProxy in roundrobin when
// installed, go-floor (./floorproxy: the least a Go forward proxy on
// net/http does, to tell what Go costs from what the gateway adds), and
// the switchyard quick start. Its cells are absolute-form
// GETs at 1, 16 and 64 keep-alive connections, CONNECT tunnels set up 16
// at a time (one GET inside each, then closed), and 100 MiB pulled
// through one tunnel at a time, each for _DURATION (per cell here) split
// over _ROUNDS; the report gives each cell's rate, p50, p99 and the
// gateway process's CPU per op, then switchyard ÷ haproxy, switchyard ÷
// go-floor, go-floor ÷ haproxy and the added p99 over direct:
//
//	SWITCHYARD_LIVEBENCH_DURATION=15s SWITCHYARD_LIVEBENCH_ROUNDS=3 go test -run '^$' -bench LiveCost -benchtime 1x -timeout 20m ./internal/livebench
//
// The README keeps the figures of its latest runs, with the day's
// machine: on a 2-core machine shared with other work only ratios mean
// anything.
package livebench

// Package livebench is the live, black-box fleet benchmark (README,
// Measuring the real path): a fleet of fake exits with fault shapes on
// 127.0.0.1, fake sites behind them, and a fixed number of crawler workers
// whose throughput is the score. The exits answer as real ones do, a fast
// one in about 100 ms and a slow one in about a second, so that at the
// default 32 workers (~300 requests a second) the score measures the
// contenders' choices, not their CPU. The real switchyard binary, HAProxy
// (leastconn) when installed, glider when installed, client-side
// round-robin and a ground-truth oracle each carry the same load over a
// fresh copy of the same fleet, one after the other, and the report gives
// each contender's completed tasks per second as a ratio to the oracle's.
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
package livebench

package livebench

import (
	"strings"
	"testing"
	"time"
)

func TestRunPoolInRounds(t *testing.T) {
	t.Parallel()
	p := pool{name: "tiny", about: "two fast exits and a dead one", shapes: []Shape{fast(), dead(), fast()}}
	absent := contender{name: "absent", missing: func(Options) string { return "not installed here" }}
	opts := Options{Duration: 600 * time.Millisecond, Rounds: 2, Workers: 4, Timeout: 500 * time.Millisecond}.withDefaults()
	rep, err := runPool(t.Context(), p, []contender{oracleContender(), absent, roundRobinContender()}, opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.rows) != 2 || rep.rows[0].contender != "oracle" || rep.rows[1].contender != "round_robin" {
		t.Fatalf("rows %+v", rep.rows)
	}
	if len(rep.skipped) != 1 || !strings.Contains(rep.skipped[0], "absent: skipped, not installed here") {
		t.Fatalf("skipped %v", rep.skipped)
	}
	for _, r := range rep.rows {
		// Two rounds of 300 ms each, added up.
		if r.res.elapsed < 600*time.Millisecond || r.res.elapsed > 3*time.Second {
			t.Errorf("%s: elapsed %v over two rounds", r.contender, r.res.elapsed)
		}
		if r.res.completed == 0 || r.exitAttempts() == 0 || r.exitRequests[1] != 0 {
			t.Errorf("%s: completed %d, exit requests %v", r.contender, r.res.completed, r.exitRequests)
		}
	}
	// The exits also saw the attempts cut at the end of each round: at
	// most one per worker per round.
	o := rep.rows[0]
	if n, sent := o.exitAttempts(), int64(o.res.attempts); n < sent || n > sent+int64(opts.Workers*opts.Rounds) {
		t.Errorf("the oracle's exits counted %d requests (%v) for its %d attempts (%v, %d cut)", n, o.exitRequests, sent, o.res.outcomes, o.res.cut)
	}
}

// TestRunPoolOverHTTPS runs the load as https:// pages through CONNECT
// tunnels to sites speaking TLS; a contender meant for HTTPS alone is
// skipped over plain HTTP. Not parallel: its TLS handshakes would starve
// the other tests' timed loads.
func TestRunPoolOverHTTPS(t *testing.T) {
	p := pool{name: "tiny", about: "two fast exits and a dead one", shapes: []Shape{fast(), dead(), fast()}}
	onlyHTTPS := contender{name: "only-https", missing: overHTTPS}
	for _, https := range []bool{false, true} {
		opts := Options{Duration: time.Second, Workers: 4, Timeout: 2 * time.Second, HTTPS: https}.withDefaults()
		cs := []contender{oracleContender(), roundRobinContender()}
		if !https {
			cs = append(cs, onlyHTTPS)
		}
		rep, err := runPool(t.Context(), p, cs, opts, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.rows {
			if r.res.completed == 0 || r.exitRequests[1] != 0 {
				t.Errorf("https=%v %s: completed %d, exit requests %v", https, r.contender, r.res.completed, r.exitRequests)
			}
		}
		if !https && (len(rep.skipped) != 1 || !strings.Contains(rep.skipped[0], "runs only over HTTPS")) {
			t.Errorf("skipped %v", rep.skipped)
		}
	}
}

package livebench

import (
	"strings"
	"testing"
	"time"
)

func TestRunPoolInRounds(t *testing.T) {
	t.Parallel()
	p := pool{name: "tiny", about: "two fast exits and a dead one", shapes: []Shape{fast(), dead(), fast()}}
	absent := contender{name: "absent", missing: func() string { return "not installed here" }}
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
		t.Errorf("the oracle's exits counted %d requests for its %d attempts", n, sent)
	}
}

package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func TestEngineBeatsRoundRobin(t *testing.T) {
	t.Parallel()
	sw, err := Run("switchyard", engine.WeightedRandom{}, 6000, 7)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := Run("round_robin", &engine.RoundRobin{}, 6000, 7)
	if err != nil {
		t.Fatal(err)
	}
	perTask := func(r Result) float64 { return float64(r.Attempts) / float64(r.Completed) }
	if perTask(sw) >= perTask(rr) {
		t.Errorf("attempts per completed task: switchyard %.2f, round-robin %.2f", perTask(sw), perTask(rr))
	}
	if sw.Share["dead"]*10 > rr.Share["dead"] {
		t.Errorf("dead exit attempts: switchyard %d, round-robin %d", sw.Share["dead"], rr.Share["dead"])
	}
	if sw.Latency >= rr.Latency {
		t.Errorf("mean latency: switchyard %v, round-robin %v", sw.Latency, rr.Latency)
	}
}

func TestPrint(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := Print(&buf, 2000, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"switchyard", "round_robin", "dead", "cooling"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

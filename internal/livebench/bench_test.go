package livebench

import (
	"os"
	"testing"
)

// BenchmarkLiveFleet runs every contender over every pool and prints one
// table per pool; the metrics are each contender's throughput ratio to the
// oracle. Each sub-benchmark measures once whatever b.N is (run it with
// -benchtime 1x); it takes about (contenders × Duration) per pool.
//
//	go test -run '^$' -bench LiveFleet -benchtime 1x ./internal/livebench
//	SWITCHYARD_LIVEBENCH_DURATION=5s go test -run '^$' -bench 'LiveFleet/a_' -benchtime 1x ./internal/livebench
func BenchmarkLiveFleet(b *testing.B) {
	opts, dir := benchSetup(b)
	cs := contenders(switchyardBinary(opts.Binary, dir))
	for _, p := range pools() {
		b.Run(p.name, func(b *testing.B) {
			rep, err := runPool(b.Context(), p, cs, opts, dir)
			if err != nil {
				b.Fatal(err)
			}
			if !opts.HTTPS { // the simulator's gateway sees every answer: not a blind tunnel's
				if rep.simulated, err = simulate(p, opts); err != nil {
					b.Fatal(err)
				}
			}
			rep.write(os.Stdout)
			for name, v := range rep.vsOracle() {
				if name != "oracle" && rep.oracleRate() > 0 {
					b.ReportMetric(v, name+"/oracle")
				}
			}
			b.ReportMetric(rep.oracleRate(), "oracle_tasks/s")
		})
	}
}

// BenchmarkLiveCost measures the gateway's own cost beside HAProxy's over
// ten exits that add no delay, and prints the cells' table and the
// ratios; the metrics are switchyard ÷ haproxy per cell and the headline
// figures. It measures once whatever b.N is (run it with -benchtime 1x);
// it takes about (contenders × 5 × Duration), Duration being per cell.
//
//	SWITCHYARD_LIVEBENCH_DURATION=15s SWITCHYARD_LIVEBENCH_ROUNDS=3 go test -run '^$' -bench LiveCost -benchtime 1x -timeout 20m ./internal/livebench
func BenchmarkLiveCost(b *testing.B) {
	opts, dir := benchSetup(b)
	rep, err := runCost(b.Context(), costContenders(switchyardBinary(opts.Binary, dir), dir), opts, dir)
	if err != nil {
		b.Fatal(err)
	}
	rep.write(os.Stdout)
	rep.reportMetrics(b.ReportMetric)
}

// benchSetup reads the options from the environment and gives the
// directory for the contenders' files: Options.Dir, made if need be, or
// a temporary one.
func benchSetup(b *testing.B) (Options, string) {
	opts, err := optionsFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	if opts.Dir == "" {
		return opts, b.TempDir()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return opts, opts.Dir
}

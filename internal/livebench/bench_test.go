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
	opts, err := optionsFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	dir := opts.Dir
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	cs := contenders(switchyardBinary(opts.Binary, dir))
	for _, p := range pools() {
		b.Run(p.name, func(b *testing.B) {
			rep, err := runPool(b.Context(), p, cs, opts, dir)
			if err != nil {
				b.Fatal(err)
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

package server

import (
	"testing"
	"time"

	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// BenchmarkForwardedHop compares, in one run, a fetch run on the entry
// (its own exit) with one forwarded a hop to the node whose exit fits,
// alternating them, and reports both times and their ratio: the cost of
// the hop (docs/design/013-cluster.md, Measurements).
func BenchmarkForwardedHop(b *testing.B) {
	site := newCountingSite(b)
	nodes := startCluster(b, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rb"})
	client := pb.NewFetcherClient(nodes[0].conn(b))
	var local, forwarded time.Duration
	n := 0
	for b.Loop() {
		for _, r := range []string{"ra", "rb"} {
			start := time.Now()
			out, err := client.Fetch(b.Context(), &pb.FetchRequest{Url: site.URL, Labels: region(r)})
			if err != nil || out.GetError() != nil || (r == "rb") != (out.GetEntry() == "a") {
				b.Fatalf("%s: %v %v", r, err, out)
			}
			if r == "ra" {
				local += time.Since(start)
			} else {
				forwarded += time.Since(start)
			}
		}
		n++
	}
	b.ReportMetric(float64(local.Microseconds())/float64(n), "local-µs/fetch")
	b.ReportMetric(float64(forwarded.Microseconds())/float64(n), "forwarded-µs/fetch")
	b.ReportMetric(float64(forwarded)/float64(local), "forwarded/local")
}

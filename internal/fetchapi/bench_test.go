package fetchapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// BenchmarkFetchVsForward measures, in one run on one pool (a keep-alive
// fake proxy in front of a local site), a GET carried by the forward
// proxy and the same GET asked of the fetch API over gRPC and over JSON,
// from 8 concurrent clients: requests/s and latency per path, whose ratio
// is the API's cost over the proxy's. The gateway and its engine are the
// same for all three.
func BenchmarkFetchVsForward(b *testing.B) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "<html>the price is 42</html>")
	}))
	defer site.Close()
	v := newEnv(b, testOptions{}, routetest.NewProxy(b, routetest.Behavior{KeepAlive: true}))
	gw := httptest.NewServer(v.g)
	defer gw.Close()
	gwURL, _ := url.Parse(gw.URL)
	const clients = 8
	proxied := &http.Transport{Proxy: http.ProxyURL(gwURL), MaxIdleConnsPerHost: clients}
	defer proxied.CloseIdleConnections()
	plain := &http.Transport{MaxIdleConnsPerHost: clients}
	defer plain.CloseIdleConnections()
	req := &pb.FetchRequest{Url: site.URL + "/item"}
	body, _ := protojson.Marshal(req)
	paths := []struct {
		name string
		one  func() error
	}{
		{"forward_proxy", func() error {
			resp, err := (&http.Client{Transport: proxied}).Get(site.URL + "/item")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}},
		{"fetch_grpc", func() error {
			resp, err := v.client.Fetch(context.Background(), req)
			if err == nil && resp.GetError() != nil {
				err = fmt.Errorf("%v", resp.GetError())
			}
			return err
		}},
		{"fetch_json", func() error {
			resp, err := (&http.Client{Transport: plain}).Post("http://"+v.addr+"/v1/fetch", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}},
	}
	for _, p := range paths {
		b.Run("path="+p.name, func(b *testing.B) {
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					start := time.Now()
					if err := p.one(); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
			}
		})
	}
}

// BenchmarkBatch10k sends one Batch of 10,000 URLs over gRPC at the
// default concurrency and reads the results as they come: requests/s, and
// the peak of the process's heap in use above where it started, sampled
// every 10ms, which stays near the requests' own message however long the
// batch, since results are streamed rather than gathered.
func BenchmarkBatch10k(b *testing.B) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "<html>the price is 42</html>")
	}))
	defer site.Close()
	v := newEnv(b, testOptions{}, routetest.NewProxy(b, routetest.Behavior{KeepAlive: true}), routetest.NewProxy(b, routetest.Behavior{KeepAlive: true}))
	req := &pb.BatchRequest{}
	for i := range 10000 {
		req.Requests = append(req.Requests, &pb.FetchRequest{Url: fmt.Sprintf("%s/item/%d", site.URL, i)})
	}
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapInuse, ms.HeapInuse
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapInuse)
				}
			}
		}()
		start := time.Now()
		stream, err := v.client.Batch(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			r, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if r.GetResponse().GetStatus() != 200 {
				b.Fatalf("result %v", r)
			}
			n++
		}
		close(stop)
		<-sampled
		if n != len(req.Requests) {
			b.Fatalf("%d results of %d", n, len(req.Requests))
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "req/s")
		b.ReportMetric(float64(peak-base)/(1<<20), "peak-heap-MiB")
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard/switchyard/internal/freeport"
	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// freeAddr is a 127.0.0.1 address nothing listens on now, for a child
// process to listen on: the peers' list must name it before it starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// childNode is a switchyard serve process of a cluster test.
type childNode struct {
	id, api, admin string
	bin, config    string
	cmd            *exec.Cmd
	done           chan struct{}
}

func (n *childNode) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(n.bin, "serve", "--config", n.config)
	cmd.Env = append(os.Environ(), "SWITCHYARD_NODE_ID="+n.id, "CLUSTER_SECRET=child-cluster-secret-0123456789")
	logf, err := os.Create(n.config + ".log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	t.Cleanup(func() {
		kill(cmd, done)
		if t.Failed() {
			log, _ := os.ReadFile(logf.Name())
			t.Logf("node %s's log:\n%s", n.id, log)
		}
	})
}

// kill ends the node's process with SIGKILL, as a crash would, and waits
// for it.
func (n *childNode) kill() { kill(n.cmd, n.done) }

func kill(cmd *exec.Cmd, done chan struct{}) {
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// nodes is the node's GET /api/nodes, nil when it does not answer.
func (n *childNode) nodes() []struct {
	ID, State string
	Address   string
} {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + n.admin + "/api/nodes")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out []struct {
		ID, State string
		Address   string
	}
	json.NewDecoder(resp.Body).Decode(&out)
	return out
}

// sees reports whether n sees the node at addr in state.
func (n *childNode) sees(addr, state string) bool {
	for _, st := range n.nodes() {
		if st.Address == addr && st.State == state {
			return true
		}
	}
	return false
}

// inflight is the requests in flight through n's routes (GET /api/routes).
func (n *childNode) inflight() int {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + n.admin + "/api/routes")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var routes []struct{ Inflight int }
	json.NewDecoder(resp.Body).Decode(&routes)
	total := 0
	for _, r := range routes {
		total += r.Inflight
	}
	return total
}

// waitUntil polls cond for up to 15 s (child processes start slowly on a
// loaded machine).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterSurvivesSIGKILL runs three switchyard processes as a cluster
// and SIGKILLs one holding requests in flight under a load of GETs and
// POSTs through another: no GET is lost, no POST reaches the site twice,
// the killed node leaves rotation and comes back when started again.
func TestClusterSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "switchyard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	gate := make(chan struct{})
	var mu sync.Mutex
	posts := map[string]int{} // guarded by mu
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			posts[r.Header.Get("X-Request-Id")]++
			mu.Unlock()
		}
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	}))
	defer site.Close()
	ids, regions := []string{"a", "b", "c"}, []string{"ra", "rx", "rx"}
	nodes := make([]*childNode, 3)
	var peers []string
	for i, id := range ids {
		nodes[i] = &childNode{id: id, api: freeAddr(t), admin: freeAddr(t), bin: bin, config: filepath.Join(dir, id+".toml")}
		peers = append(peers, strconv.Quote(nodes[i].api))
	}
	for i, n := range nodes {
		proxy := routetest.NewProxy(t, routetest.Behavior{})
		list := filepath.Join(dir, n.id+".txt")
		if err := os.WriteFile(list, []byte(proxy.URL.String()+" id=exit-"+n.id+" region="+regions[i]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("[listen]\nproxy = %q\nadmin = %q\napi = %q\n[routes]\nfile = %q\n[cluster]\nsecret = \"env:CLUSTER_SECRET\"\npeers = [%s, %s, %s]\ncheck_interval = \"100ms\"\n",
			freeAddr(t), n.admin, n.api, list, peers[0], peers[1], peers[2])
		if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		n.start(t)
	}
	a, c := nodes[0], nodes[2]
	for _, other := range nodes[1:] {
		waitUntil(t, "a sees "+other.id+" up", func() bool { return a.sees(other.api, "up") })
	}
	cc, err := grpc.NewClient("passthrough:///"+a.api, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewFetcherClient(cc)
	const total, workers = 200, 6
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		method, code string
		err          error
	}
	results := make([]result, total)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				method := http.MethodGet
				if i%2 == 1 {
					method = http.MethodPost
				}
				out, err := client.Fetch(ctx, &pb.FetchRequest{Method: method, Url: site.URL, Labels: []*pb.Label{{Key: "region", Value: "rx"}},
					Headers: []*pb.Header{{Name: "X-Request-Id", Value: strconv.Itoa(i)}}})
				results[i] = result{method: method, code: out.GetError().GetCode(), err: err}
			}
		})
	}
	go func() {
		defer close(jobs)
		for i := range total {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var onC int
	waitUntil(t, "requests in flight on c", func() bool { onC = c.inflight(); return onC > 0 })
	c.kill()
	waitUntil(t, "a sees c down", func() bool { return a.sees(c.api, "down") })
	close(gate)
	wg.Wait()
	failed := 0
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("%s %d: %v", r.method, i, r.err)
		case r.method == http.MethodGet && r.code != "":
			t.Errorf("GET %d lost: %s", i, r.code)
		case r.method == http.MethodPost:
			mu.Lock()
			n := posts[strconv.Itoa(i)]
			mu.Unlock()
			if n > 1 || (r.code == "" && n != 1) {
				t.Errorf("POST %d reached the site %d times (error %q)", i, n, r.code)
			}
			if r.code != "" {
				failed++
			}
		}
	}
	t.Logf("%d requests through a, c SIGKILLed with %d in flight: 0 GETs lost, %d POSTs failed with a clear error, none twice", total, onC, failed)
	c.start(t)
	waitUntil(t, "a sees c up again", func() bool { return a.sees(c.api, "up") })
}

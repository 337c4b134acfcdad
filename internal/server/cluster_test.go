package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchyard/switchyard/internal/cluster"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/mitm"
	"github.com/switchyard/switchyard/internal/route/routetest"
	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// testSecret is the cluster secret of the tests' nodes.
const testSecret = "test-cluster-secret-0123456789"

// testNode is one node of a test cluster on 127.0.0.1: its own fake
// upstream proxy (labels region=<its region>), listeners, and the server
// running until stop.
type testNode struct {
	id       string
	proxy    *routetest.Proxy
	api      string // its listen.api
	admin    string
	proxyAt  string         // its forward proxy
	log      logtest.Buffer // its server's log
	cfg      *config.Config // as it started
	srv      *Server
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// nodeSpec says how a test node differs.
type nodeSpec struct {
	id, region string
	secret     string             // "" for testSecret
	ssrf       bool               // admission on, 127.0.0.1 allowed
	tls        [3]string          // cluster.tls_cert, tls_key, tls_ca; none for h2c
	exit       routetest.Behavior // its exit's
	targets    []config.Target    // its [[targets]] rules
	tune       func(*config.Config)
}

// startCluster starts one node per spec, each listing every node's API
// address as its peers (its own included, as one shared list would), and
// waits until every node sees every other one with the same secret up.
func startCluster(t testing.TB, specs ...nodeSpec) []*testNode {
	t.Helper()
	apis := make([]net.Listener, len(specs))
	peers := make([]string, len(specs))
	for i := range specs {
		apis[i] = listen(t)
		peers[i] = apis[i].Addr().String()
	}
	nodes := make([]*testNode, len(specs))
	for i, sp := range specs {
		n := &testNode{id: sp.id, proxy: routetest.NewProxy(t, sp.exit), api: peers[i]}
		cfg := configOf(t, n.proxy.URL.String()+" id=exit-"+sp.id+" region="+sp.region+"\n")
		secret := sp.secret
		if secret == "" {
			secret = testSecret
		}
		cfg.Cluster.NodeID, cfg.Cluster.Secret, cfg.Cluster.Peers = sp.id, config.LiteralSecret(secret), peers
		cfg.Cluster.CheckInterval, cfg.Cluster.CheckTimeout = 50*time.Millisecond, time.Second
		cfg.Listen.API = peers[i]
		cfg.Admin.Token = config.LiteralSecret(adminToken)
		cfg.Cluster.TLSCert, cfg.Cluster.TLSKey, cfg.Cluster.TLSCA = sp.tls[0], sp.tls[1], sp.tls[2]
		cfg.Targets = sp.targets
		if sp.tune != nil {
			sp.tune(cfg)
		}
		if sp.ssrf {
			on := true
			cfg.Security.BlockPrivateNetworks, cfg.Security.AllowCIDRs = &on, []string{"127.0.0.1/32"}
			cfg.Security.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		}
		n.cfg = cfg
		n.run(t, apis[i])
		nodes[i] = n
	}
	for i, n := range nodes {
		for j, other := range nodes {
			if i != j && (specs[i].secret == specs[j].secret) {
				waitFor(t, func() bool { return n.state(other.api) == "up" })
			}
		}
	}
	return nodes
}

// run starts n's server from n.cfg with its API on api; t's cleanup stops
// it.
func (n *testNode) run(t testing.TB, api net.Listener) {
	t.Helper()
	adm := listen(t)
	n.admin = adm.Addr().String()
	px := listen(t)
	n.proxyAt = px.Addr().String()
	s, err := New(n.cfg, Listeners{Proxy: px, API: api, Admin: adm}, slog.New(slog.NewTextHandler(&n.log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	n.srv, n.done = s, make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- s.Run(ctx, 0) }()
	t.Cleanup(n.stop)
}

// restart is a new run of the stopped node n, on the same API address.
func (n *testNode) restart(t testing.TB) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", n.api)
	if err != nil {
		t.Fatal(err)
	}
	again := &testNode{id: n.id, proxy: n.proxy, api: n.api, cfg: n.cfg}
	again.run(t, ln)
	return again
}

// stop ends the node at once (grace 0: connections cut, as a crash
// would), and waits for its Run to return.
func (n *testNode) stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		<-n.done
	})
}

// state is how n sees the node at addr.
func (n *testNode) state(addr string) string {
	for _, st := range n.srv.cluster.Nodes() {
		if st.Address == addr {
			return st.State
		}
	}
	return ""
}

// fetchJSON posts req to n's POST /v1/fetch.
func (n *testNode) fetchJSON(t *testing.T, req *pb.FetchRequest) (*http.Response, *pb.FetchResponse) {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://"+n.api+"/v1/fetch", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := &pb.FetchResponse{}
	if err := protojson.Unmarshal(raw, out); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
	}
	return resp, out
}

// conn is a gRPC connection to n's API, closed with the test.
func (n *testNode) conn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+n.api, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func region(r string) []*pb.Label { return []*pb.Label{{Key: "region", Value: r}} }

// countingSite is a site on 127.0.0.1 that counts each request id (the
// X-Request-Id header) it receives, by method, and holds the requests to
// /held until release.
type countingSite struct {
	*httptest.Server
	gate chan struct{} // closed by release
	mu   sync.Mutex
	seen map[string]int // guarded by mu: method + " " + id → requests
}

func newCountingSite(t testing.TB) *countingSite {
	s := &countingSite{seen: map[string]int{}, gate: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen[r.Method+" "+r.Header.Get("X-Request-Id")]++
		s.mu.Unlock()
		if r.URL.Path == "/held" {
			select {
			case <-s.gate:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *countingSite) release() { close(s.gate) }

func (s *countingSite) count(method, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[method+" "+id]
}

// TestClusterRunsARequestWhereItsExitsAre sends requests to node a: the
// labels only c's exits carry run on c, one hop, marked with the entry;
// a's own labels run on a; over JSON and gRPC alike.
func TestClusterRunsARequestWhereItsExitsAre(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rb"}, nodeSpec{id: "c", region: "rc"})
		a, b, c := nodes[0], nodes[1], nodes[2]
		for _, tc := range []struct {
			desc, region, node, entry string
			exit                      *routetest.Proxy
		}{
			{"forwarded to c", "rc", "c", "a", c.proxy},
			{"forwarded to b", "rb", "b", "a", b.proxy},
			{"run on the entry", "ra", "a", "", a.proxy},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				before := tc.exit.Requests()
				resp, out := a.fetchJSON(t, &pb.FetchRequest{Url: site.URL + "/p", Labels: region(tc.region)})
				if out.GetStatus() != 200 || out.GetError() != nil {
					t.Fatalf("answer %d, error %v", out.GetStatus(), out.GetError())
				}
				if out.GetNode() != tc.node || out.GetEntry() != tc.entry || resp.Header.Get("X-Switchyard-Node") != tc.node || resp.Header.Get("X-Switchyard-Entry") != tc.entry {
					t.Fatalf("node %q entry %q (headers %q %q), want %q %q", out.GetNode(), out.GetEntry(),
						resp.Header.Get("X-Switchyard-Node"), resp.Header.Get("X-Switchyard-Entry"), tc.node, tc.entry)
				}
				for _, at := range out.GetTrace().GetAttempts() {
					if at.GetNode() != tc.node || at.GetRoute() != "exit-"+tc.node {
						t.Errorf("attempt %v: want node %s through exit-%s", at, tc.node, tc.node)
					}
				}
				if tc.exit.Requests() != before+1 {
					t.Errorf("the node's exit carried %d requests, want 1", tc.exit.Requests()-before)
				}
			})
		}
		// gRPC: the answer's header names the node and the entry.
		var md metadata.MD
		out, err := pb.NewFetcherClient(a.conn(t)).Fetch(t.Context(), &pb.FetchRequest{Url: site.URL, Labels: region("rc")}, grpc.Header(&md))
		if err != nil || out.GetNode() != "c" || out.GetEntry() != "a" || strings.Join(md.Get("x-switchyard-node"), ",") != "c" || strings.Join(md.Get("x-switchyard-entry"), ",") != "a" {
			t.Fatalf("gRPC: %v, %v, header %v", out, err, md)
		}
		// A late verdict given to the entry reaches the node that ran it.
		fb, err := pb.NewFetcherClient(a.conn(t)).Feedback(t.Context(), &pb.FeedbackRequest{AttemptId: out.GetTrace().GetAttempts()[0].GetAttemptId(), Verdict: "content_invalid"})
		if err != nil || fb.GetRoute() != "exit-c" || fb.GetTarget() != "127.0.0.1" {
			t.Fatalf("feedback through the entry: %v, %v", fb, err)
		}
		nodesJSON := getNodes(t, a)
		if len(nodesJSON) != 3 || !nodesJSON[0].Self || nodesJSON[0].ID != "a" {
			t.Fatalf("/api/nodes: %+v", nodesJSON)
		}
		for _, n := range nodesJSON[1:] {
			if n.State != "up" || n.Routes != 1 || n.LastCheck.IsZero() || (n.ID == "c" && n.ForwardedOut != 2) {
				t.Errorf("/api/nodes: %+v", n)
			}
		}
		if in := getNodes(t, c)[0].ForwardedIn; in != 2 {
			t.Errorf("c counts %d forwards in, want 2", in)
		}
		metrics := adminGet(t, a, "/metrics")
		for _, want := range []string{`switchyard_cluster_nodes{state="up"} 3`, `switchyard_cluster_node_up{address="` + c.api + `",node="c"} 1`,
			`switchyard_cluster_forwarded_out_total{address="` + c.api + `",node="c"} 2`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if !strings.Contains(adminGet(t, c, "/metrics"), "switchyard_cluster_forwarded_in_total 2") {
			t.Error("c's /metrics lacks switchyard_cluster_forwarded_in_total 2")
		}
	})
}

// adminGet is the body of GET path on n's admin listener.
func adminGet(t *testing.T, n *testNode, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + n.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func getNodes(t *testing.T, n *testNode) []cluster.NodeStatus {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + n.admin + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []cluster.NodeStatus
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForwardedRequestsRunWhereTheyArrive sends b a forward, as a node
// configured to forward again would receive one: b runs it itself, though
// only c's exits fit (no route fits: an error, and c never sees it).
func TestForwardedRequestsRunWhereTheyArrive(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rb"}, nodeSpec{id: "c", region: "rc"})
		b, c := nodes[1], nodes[2]
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-switchyard-node", "a", "x-switchyard-node-token", cluster.Token(testSecret, "a"), "x-switchyard-entry", "a")
		out, err := pb.NewFetcherClient(b.conn(t)).Fetch(ctx, &pb.FetchRequest{Url: site.URL, Labels: region("rc")})
		if err != nil {
			t.Fatal(err)
		}
		if out.GetNode() != "b" || out.GetEntry() != "" || out.GetError().GetCode() != "no_matching_route" || c.proxy.Requests() != 0 {
			t.Fatalf("forward to b: node %q entry %q error %v; c's exit carried %d", out.GetNode(), out.GetEntry(), out.GetError(), c.proxy.Requests())
		}
		// The marker without a node's token is refused.
		forged := metadata.AppendToOutgoingContext(t.Context(), "x-switchyard-entry", "a")
		if _, err := pb.NewFetcherClient(b.conn(t)).Fetch(forged, &pb.FetchRequest{Url: site.URL}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("forged forward: %v", err)
		}
	})
}

// TestNoTimeLeftToForward: a request that leaves the entry less time than
// it keeps to relay an answer (forwardSlack: here its own timeout_ms, as
// a caller's deadline would) is not forwarded: it fails at once, naming
// the node it would have gone to, which never sees it.
func TestNoTimeLeftToForward(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "c", region: "rc"})
		out, err := pb.NewFetcherClient(nodes[0].conn(t)).Fetch(t.Context(), &pb.FetchRequest{Url: site.URL, Labels: region("rc"), TimeoutMs: 100})
		if err != nil {
			t.Fatal(err)
		}
		at := out.GetTrace().GetAttempts()
		if out.GetError().GetCode() != "node_failed" || !strings.Contains(out.GetError().GetMessage(), "no time left") ||
			len(at) != 1 || at[0].GetNode() != "c" || at[0].GetClass() != "node_unavailable" {
			t.Errorf("answer %v, trace %v; want node_failed naming c, no time left", out.GetError(), at)
		}
		if n := nodes[1].proxy.Requests(); n != 0 {
			t.Errorf("c's exit carried %d requests, want none", n)
		}
	})
}

// TestBatchAndStreamRunWhereTheirExitsAre sends node a a batch and a
// stream of requests with c's labels and a's: each runs where its exits
// are, as a single fetch does; a stream marked as forwarded without a
// node's token is refused, as a fetch is.
func TestBatchAndStreamRunWhereTheirExitsAre(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "c", region: "rc"})
		fc := pb.NewFetcherClient(nodes[0].conn(t))
		wantNode := []string{"c", "a", "c", "a"}
		var reqs []*pb.FetchRequest
		for _, n := range wantNode {
			reqs = append(reqs, &pb.FetchRequest{Url: site.URL, Labels: region("r" + n)})
		}
		check := func(how string, r *pb.BatchResult) {
			t.Helper()
			out, i := r.GetResponse(), r.GetIndex()
			if i < 0 || i >= int64(len(wantNode)) || out.GetStatus() != 200 || out.GetNode() != wantNode[i] {
				t.Errorf("%s result %d: node %q, status %d, error %v; want node %s", how, i, out.GetNode(), out.GetStatus(), out.GetError(), wantNode[min(max(i, 0), int64(len(wantNode)-1))])
			}
		}
		batch, err := fc.Batch(t.Context(), &pb.BatchRequest{Requests: reqs, Concurrency: 2})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r, err := batch.Recv(); err != io.EOF; r, err = batch.Recv() {
			if err != nil {
				t.Fatal(err)
			}
			check("batch", r)
			n++
		}
		stream, err := fc.Stream(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for i, req := range reqs {
			if err := stream.Send(&pb.StreamRequest{Id: int64(i), Request: req}); err != nil {
				t.Fatal(err)
			}
		}
		stream.CloseSend()
		for r, err := stream.Recv(); err != io.EOF; r, err = stream.Recv() {
			if err != nil {
				t.Fatal(err)
			}
			check("stream", r)
			n++
		}
		if n != 2*len(reqs) {
			t.Errorf("%d results, want %d", n, 2*len(reqs))
		}
		forged := metadata.AppendToOutgoingContext(t.Context(), "x-switchyard-entry", "a")
		batch, err = fc.Batch(forged, &pb.BatchRequest{Requests: reqs[:1]})
		if err == nil {
			_, err = batch.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("a batch marked forwarded, no node token: %v, want Unauthenticated", err)
		}
	})
}

// TestWrongSecret runs a node whose secret differs: each side sees the
// other unauthenticated (not down), "test connection" says wrong_token,
// and no request goes there.
func TestWrongSecret(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rb"}, nodeSpec{id: "x", region: "rx", secret: "another-secret-0123456789"})
		a, x := nodes[0], nodes[2]
		waitFor(t, func() bool { return a.state(x.api) == "unauthenticated" && x.state(a.api) == "unauthenticated" })
		probe := adminPost(t, a, "/api/nodes/test", `{"address":"`+x.api+`"}`)
		if !strings.Contains(probe, `"verdict":"wrong_token"`) || !strings.Contains(probe, `"reachable":true`) || strings.Contains(probe, testSecret) {
			t.Fatalf("test connection: %s", probe)
		}
		_, out := a.fetchJSON(t, &pb.FetchRequest{Url: site.URL, Labels: region("rx")})
		if out.GetNode() != "a" || out.GetError().GetCode() != "no_matching_route" || x.proxy.Requests() != 0 {
			t.Fatalf("labels only x has: node %q error %v, x's exit carried %d", out.GetNode(), out.GetError(), x.proxy.Requests())
		}
		// The operator removes it, then adds it back.
		if got := adminPost(t, a, "/api/nodes/remove", `{"address":"`+x.api+`"}`); got != "" {
			t.Fatalf("remove: %q", got)
		}
		if nodes := getNodes(t, a); len(nodes) != 2 {
			t.Fatalf("after remove: %+v", nodes)
		}
		if got := adminPost(t, a, "/api/nodes/add", `{"address":"`+x.api+`"}`); got != "" {
			t.Fatalf("add: %q", got)
		}
		waitFor(t, func() bool { return a.state(x.api) == "unauthenticated" })
		// Neither secret nor any token is logged, though both sides
		// refused calls and said why.
		if !strings.Contains(a.log.String(), "wrong or missing node token") {
			t.Errorf("a did not log x's refused calls:\n%s", a.log.String())
		}
		for _, n := range nodes {
			for _, secret := range []string{testSecret, "another-secret-0123456789", cluster.Token(testSecret, "a"), cluster.Token("another-secret-0123456789", "x")} {
				if strings.Contains(n.log.String(), secret) {
					t.Errorf("%s's log holds a secret or a token", n.id)
				}
			}
		}
	})
}

// adminPost posts body to n's admin path with the admin token, and
// returns the answer.
func adminPost(t *testing.T, n *testNode, path, body string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+n.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	return string(raw)
}

const adminToken = "test-admin-token"

// TestSSRFIsRefusedAtTheEntry sends a hostile destination to an entry
// with admission on, with labels only another node's exits carry: refused
// at the entry, never forwarded.
func TestSSRFIsRefusedAtTheEntry(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra", ssrf: true}, nodeSpec{id: "c", region: "rc"})
		a, c := nodes[0], nodes[1]
		for _, target := range []string{"http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::ffff:127.0.0.2]/"} {
			resp, out := a.fetchJSON(t, &pb.FetchRequest{Url: target, Labels: region("rc")})
			if resp.StatusCode != http.StatusForbidden || out.GetError().GetCode() != "blocked_destination" {
				t.Errorf("%s: %d %v", target, resp.StatusCode, out.GetError())
			}
		}
		if got := getNodes(t, a)[1].ForwardedOut; got != 0 || c.proxy.Requests() != 0 {
			t.Fatalf("forwarded %d, c's exit carried %d", got, c.proxy.Requests())
		}
	})
}

// TestKillANodeUnderLoad stops node c abruptly (its connections cut, as a
// crash would) while it holds requests in flight, and while GETs and POSTs
// for labels b and c both carry stream through entry a: no GET is lost
// (those on c fail over to b), no POST reaches the site twice, a POST
// whose node died gets a clear error, and c leaves rotation at once.
func TestKillANodeUnderLoad(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rx"}, nodeSpec{id: "c", region: "rx"})
		a, c := nodes[0], nodes[2]
		client := pb.NewFetcherClient(a.conn(t))
		const total, workers = 300, 6
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		type result struct {
			method, id, node, code string
			failedOver             bool
			err                    error
		}
		results := make([]result, total)
		jobs := make(chan int)
		var done sync.WaitGroup
		for range workers {
			done.Go(func() {
				for i := range jobs {
					method := http.MethodGet
					if i%2 == 1 {
						method = http.MethodPost
					}
					id := "req-" + strconv.Itoa(i)
					out, err := client.Fetch(ctx, &pb.FetchRequest{Method: method, Url: site.URL + "/held", Labels: region("rx"),
						Headers: []*pb.Header{{Name: "X-Request-Id", Value: id}}, Body: []byte("order")})
					r := result{method: method, id: id, node: out.GetNode(), code: out.GetError().GetCode(), err: err}
					for _, at := range out.GetTrace().GetAttempts() {
						r.failedOver = r.failedOver || at.GetClass() == "node_unavailable"
					}
					results[i] = r
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
		// The first requests wait at the site, spread over b and c: c
		// stops with some in flight, and the site lets them all go once
		// a has seen it go.
		waitFor(t, func() bool { return inflight(c) > 0 })
		stopped := make(chan struct{})
		killed := time.Now()
		go func() { c.stop(); close(stopped) }()
		waitFor(t, func() bool { return a.state(c.api) == "down" })
		outOfRotation := time.Since(killed)
		site.release()
		done.Wait()
		<-stopped
		var gets, posts, postsFailed, failedOver int
		for _, r := range results {
			switch {
			case r.err != nil:
				t.Errorf("%s %s: %v", r.method, r.id, r.err)
			case r.method == http.MethodGet:
				gets++
				if r.code != "" {
					t.Errorf("GET %s lost: %s", r.id, r.code)
				}
			default:
				posts++
				if n := site.count(http.MethodPost, r.id); n > 1 || (r.code == "" && n != 1) {
					t.Errorf("POST %s reached the site %d times (error %q)", r.id, n, r.code)
				}
				if r.code != "" {
					postsFailed++
					if r.code != "node_unavailable" {
						t.Errorf("POST %s: error %q, want node_unavailable", r.id, r.code)
					}
				}
			}
			if r.failedOver && r.code == "" {
				failedOver++
			}
		}
		if gets+posts != total || failedOver+postsFailed == 0 {
			t.Fatalf("%d GETs and %d POSTs of %d; %d failed over, %d POSTs failed: nothing was in flight on c", gets, posts, total, failedOver, postsFailed)
		}
		if st := a.state(c.api); st != "down" {
			t.Errorf("c is %s to a, want down", st)
		}
		t.Logf("%d GETs, all answered (%d failed over from c); %d POSTs, %d failed with a clear error, none twice; c out of a's rotation %v after the kill (polled every 5ms)",
			gets, failedOver, posts, postsFailed, outOfRotation.Round(time.Millisecond))
		// Restarted on its address, c comes back after up_after checks.
		c.restart(t)
		waitFor(t, func() bool { return a.state(c.api) == "up" })
	})
}

// inflight is the requests in flight through n's routes.
func inflight(n *testNode) int {
	total := 0
	for _, r := range n.srv.Engine().Routes() {
		total += r.Inflight
	}
	return total
}

// TestReloadAppliesPeers reloads a node's peer list: a peer no longer
// listed leaves at once, one listed again comes back up, and no restart is
// asked for.
func TestReloadAppliesPeers(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rb"})
		a, b := nodes[0], nodes[1]
		alone := *a.cfg
		alone.Cluster.Peers = []string{a.api}
		if err := a.srv.Reload(&alone); err != nil {
			t.Fatal(err)
		}
		if got := getNodes(t, a); len(got) != 1 || !got[0].Self {
			t.Fatalf("reloaded alone: %+v", got)
		}
		if err := a.srv.Reload(a.cfg); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return a.state(b.api) == "up" })
		if pending := a.srv.restartRequired(); len(pending) != 0 {
			t.Fatalf("restart asked for %v", pending)
		}
	})
}

// TestEntryAvoidsANodeBannedOnTheTarget bans c's exit on the site (403):
// once c's Ping says its route cools for that target, the entry sends the
// site's requests for labels b and c both carry to b alone.
func TestEntryAvoidsANodeBannedOnTheTarget(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "b", region: "rx"},
			nodeSpec{id: "c", region: "rx", exit: routetest.Behavior{HostStatus: map[string]int{"127.0.0.1": http.StatusForbidden}}})
		a, c := nodes[0], nodes[2]
		// A forward to c, as from a: it runs there and is blocked.
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-switchyard-node", "a", "x-switchyard-node-token", cluster.Token(testSecret, "a"), "x-switchyard-entry", "a")
		out, err := pb.NewFetcherClient(c.conn(t)).Fetch(ctx, &pb.FetchRequest{Url: site.URL, Labels: region("rx")})
		if err != nil || out.GetError().GetCode() != "blocked" {
			t.Fatalf("through c: %v, %v", out, err)
		}
		waitFor(t, func() bool {
			for _, n := range getNodes(t, a) {
				if n.ID == "c" && n.Cooling["127.0.0.1"] == 1 {
					return true
				}
			}
			return false
		})
		for range 10 {
			if _, out := a.fetchJSON(t, &pb.FetchRequest{Url: site.URL, Labels: region("rx")}); out.GetNode() != "b" || out.GetError() != nil {
				t.Fatalf("ran on %q: %v", out.GetNode(), out.GetError())
			}
		}
	})
}

// proxyDo sends req through n's forward proxy.
func (n *testNode) proxyDo(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: n.proxyAt})}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestProxyRequestsRunWhereTheirExitsAre sends absolute-form requests to
// node a's forward proxy: labels only c's exit carries run on c (a GET and
// a POST, its body once at the site), a's own run on a, a sticky session
// stays on a, and a hostile destination is refused at a.
func TestProxyRequestsRunWhereTheirExitsAre(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra", ssrf: true}, nodeSpec{id: "c", region: "rc"})
		a, c := nodes[0], nodes[1]
		for _, tc := range []struct {
			desc, method, labels, session, url string
			status                             int
			node, entry, errCode               string
		}{
			{desc: "GET for c's labels", method: http.MethodGet, labels: "region=rc", url: site.URL + "/g", status: 200, node: "c", entry: "a"},
			{desc: "POST for c's labels", method: http.MethodPost, labels: "region=rc", url: site.URL + "/p", status: 200, node: "c", entry: "a"},
			{desc: "a's own labels", method: http.MethodGet, labels: "region=ra", url: site.URL + "/own", status: 200},
			{desc: "a session stays here", method: http.MethodGet, labels: "region=rc", session: "s1", url: site.URL + "/s", status: 503},
			{desc: "hostile destination", method: http.MethodGet, labels: "region=rc", url: "http://169.254.169.254/latest/", status: 403, errCode: "blocked_destination"},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				req, err := http.NewRequest(tc.method, tc.url, strings.NewReader("order"))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Switchyard-Labels", tc.labels)
				req.Header.Set("X-Request-Id", tc.desc)
				if tc.session != "" {
					req.Header.Set("X-Switchyard-Session", tc.session)
				}
				resp, body := a.proxyDo(t, req)
				if resp.StatusCode != tc.status || resp.Header.Get("X-Switchyard-Node") != tc.node || resp.Header.Get("X-Switchyard-Entry") != tc.entry ||
					(tc.errCode != "" && resp.Header.Get("X-Switchyard-Error") != tc.errCode) {
					t.Fatalf("%d %q node %q entry %q error %q", resp.StatusCode, body, resp.Header.Get("X-Switchyard-Node"), resp.Header.Get("X-Switchyard-Entry"), resp.Header.Get("X-Switchyard-Error"))
				}
				if tc.status == 200 && (body != "ok" || site.count(tc.method, tc.desc) != 1) {
					t.Fatalf("body %q, the site saw it %d times", body, site.count(tc.method, tc.desc))
				}
			})
		}
		if got := getNodes(t, a)[1].ForwardedOut; got != 2 || c.proxy.Requests() != 2 {
			t.Fatalf("forwarded %d, c's exit carried %d: want 2 and 2", got, c.proxy.Requests())
		}
	})
}

// TestConnectRunsWhereItsExitIs opens CONNECT tunnels through node a's
// forward proxy: for labels only c's exit carries, the tunnel is built on
// c, one hop, and carries bytes both ways; a CONNECT claiming to come
// from an entry without its token is refused.
func TestConnectRunsWhereItsExitIs(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		echo := routetest.ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra"}, nodeSpec{id: "c", region: "rc"})
		a, c := nodes[0], nodes[1]
		for _, tc := range []struct {
			desc, header string
			status       int
			node, entry  string
		}{
			{"c's labels", "X-Switchyard-Labels: region=rc\r\n", 200, "c", "a"},
			{"a forged entry", "X-Switchyard-Labels: region=rc\r\nX-Switchyard-Entry: b\r\nX-Switchyard-Entry-Token: guess\r\n", 403, "", ""},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				conn, err := net.Dial("tcp", a.proxyAt)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", echo, echo, tc.header)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.status || resp.Header.Get("X-Switchyard-Node") != tc.node || resp.Header.Get("X-Switchyard-Entry") != tc.entry {
					t.Fatalf("%d node %q entry %q", resp.StatusCode, resp.Header.Get("X-Switchyard-Node"), resp.Header.Get("X-Switchyard-Entry"))
				}
				if tc.status != 200 {
					return
				}
				if resp.Header.Get("X-Switchyard-Route") != "exit-c" {
					t.Errorf("route %q, want exit-c", resp.Header.Get("X-Switchyard-Route"))
				}
				if _, err := io.WriteString(conn, "ping"); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 4)
				if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
					t.Fatalf("through the tunnel: %q, %v", got, err)
				}
			})
		}
		if got := getNodes(t, c)[0].ForwardedIn; got != 1 || c.proxy.Requests() != 1 {
			t.Fatalf("c ran %d forwards, its exit carried %d: want 1 and 1", got, c.proxy.Requests())
		}
	})
}

// TestEntryPacesWhatItForwards gives entry a the rule max_concurrent = 1
// for every target: while one forwarded request waits at the site,
// another for the same site is refused paced at a, never reaching c.
func TestEntryPacesWhatItForwards(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := newCountingSite(t)
		nodes := startCluster(t, nodeSpec{id: "a", region: "ra", targets: []config.Target{{Hosts: []string{"*"}, MaxConcurrent: 1}}}, nodeSpec{id: "c", region: "rc"})
		a, c := nodes[0], nodes[1]
		held := make(chan *pb.FetchResponse, 1)
		client := pb.NewFetcherClient(a.conn(t))
		go func() {
			out, _ := client.Fetch(t.Context(), &pb.FetchRequest{Url: site.URL + "/held", Labels: region("rc")})
			held <- out
		}()
		// Held at the site, not only leased at c: the count below is the
		// site's.
		waitFor(t, func() bool { return inflight(c) == 1 && site.count(http.MethodGet, "") == 1 })
		_, out := a.fetchJSON(t, &pb.FetchRequest{Url: site.URL + "/second", Labels: region("rc")})
		if out.GetError().GetCode() != "paced" || out.GetNode() != "" || site.count(http.MethodGet, "") != 1 {
			t.Fatalf("second: node %q error %v; the site saw %d", out.GetNode(), out.GetError(), site.count(http.MethodGet, ""))
		}
		site.release()
		if first := <-held; first.GetNode() != "c" || first.GetError() != nil {
			t.Fatalf("first: %v", first)
		}
	})
}

// TestInterceptedRequestsRunWhereTheirExitsAre sends HTTPS through entry
// a, which intercepts TLS: the CONNECT stays at a, and each request inside
// runs where its labels' exits are, c here, one hop, as an absolute-form
// one would; c verifies the site with its own roots.
func TestInterceptedRequestsRunWhereTheirExitsAre(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure "+r.URL.Path) }))
		defer site.Close()
		siteRoots := x509.NewCertPool()
		siteRoots.AddCert(site.Certificate())
		state := t.TempDir()
		nodes := startCluster(t,
			nodeSpec{id: "a", region: "ra", tune: func(c *config.Config) { c.MITM.Enabled, c.MITM.StateDir = true, state }},
			nodeSpec{id: "c", region: "rc", tune: func(c *config.Config) { c.MITM.UpstreamRoots = siteRoots }})
		a, c := nodes[0], nodes[1]
		ca, _, err := mitm.LoadOrCreate(state, mitm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		trust := x509.NewCertPool()
		trust.AppendCertsFromPEM(ca.CertPEM())
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: a.proxyAt}), TLSClientConfig: &tls.Config{RootCAs: trust}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, site.URL+"/page", nil)
		req.Header.Set("X-Switchyard-Labels", "region=rc")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "secure /page" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Switchyard-Node") != "c" || resp.Header.Get("X-Switchyard-Entry") != "a" || resp.Header.Get("X-Switchyard-Route") != "exit-c" {
			t.Errorf("answer headers %v: want it run on c's exit, entered at a", resp.Header)
		}
		if got := getNodes(t, c)[0].ForwardedIn; got != 1 {
			t.Errorf("c ran %d forwards, want 1", got)
		}
	})
}

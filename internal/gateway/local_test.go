//go:build linux

package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// localChildEnv marks the copy of the test binary that runs
// TestLocalResourcesAreNotEvidence's body: it lowers its own descriptor
// limit, which no other test may share.
const localChildEnv = "SWITCHYARD_TEST_LOCAL_RESOURCES_CHILD"

// A gateway out of file descriptors (the real EMFILE of socket(), its
// RLIMIT_NOFILE lowered and filled) blames no route: the forwarded request
// and the CONNECT are answered 503 local_resources with Retry-After after
// one attempt each (another route would meet the same wall), the engine
// takes no evidence, the metric counts each, one log line says so for
// both, and once descriptors are back the same routes carry traffic.
// Run in a child process: the limit is process-wide.
func TestLocalResourcesAreNotEvidence(t *testing.T) {
	if os.Getenv(localChildEnv) == "" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestLocalResourcesAreNotEvidence$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), localChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestLocalResourcesAreNotEvidence")) {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	site := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "fine") })
	siteAddr := strings.TrimPrefix(site.URL, "http://")
	rec := &recorder{}
	logs := &logtest.Buffer{}
	v := newEnv(t, Config{Observer: rec, Log: slog.New(slog.NewTextHandler(logs, nil))},
		proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""), proxyLine(routetest.NewProxy(t, routetest.Behavior{}), ""))
	before := []engine.Health{v.health(t, 0), v.health(t, 1)}

	// One client connection, served once (an origin-form request is
	// answered 400 without a route), so that the gateway has accepted it
	// before no descriptor is left to accept with.
	c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(req string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(req)[0]})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin-form: %d, want 400", resp.StatusCode)
	}

	release := exhaustDescriptors(t)
	got := []*http.Response{
		send("GET " + site.URL + "/ HTTP/1.1\r\nHost: " + siteAddr + "\r\n\r\n"),
		send("CONNECT " + siteAddr + " HTTP/1.1\r\nHost: " + siteAddr + "\r\n\r\n"),
	}
	release()

	for i, resp := range got {
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(headerError) != "local_resources" ||
			resp.Header.Get("Retry-After") != "1" || resp.Header.Get(headerAttempts) != "1" {
			t.Errorf("request %d: %d %s=%q Retry-After=%q attempts=%q; want 503 local_resources, Retry-After 1, 1 attempt", i,
				resp.StatusCode, headerError, resp.Header.Get(headerError), resp.Header.Get("Retry-After"), resp.Header.Get(headerAttempts))
		}
	}
	rec.mu.Lock()
	if want := []string{"emfile", "emfile"}; !slices.Equal(rec.local, want) {
		t.Errorf("local errors observed %v, want %v", rec.local, want)
	}
	if want := []engine.Class{engine.Canceled, engine.Canceled}; !slices.Equal(rec.attempts, want) {
		t.Errorf("attempts observed %v, want %v", rec.attempts, want)
	}
	rec.mu.Unlock()
	for i := range 2 {
		if h := v.health(t, i); h.Samples != before[i].Samples || h.ConsecFail != 0 || h.State != before[i].State {
			t.Errorf("route %d: %d samples, %d failures in a row, %v; want no evidence: %d samples, 0, %v", i,
				h.Samples, h.ConsecFail, h.State, before[i].Samples, before[i].State)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"the gateway is out of local resources"); n != 1 {
		t.Errorf("%d log lines about local resources, want 1 for both failures:\n%s", n, logs.String())
	}

	for i := range 2 {
		resp, err := v.client(t, "").Get(site.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(headerAttempts) != "1" {
			t.Errorf("after: request %d: %d after %s attempts, want 200 at once", i, resp.StatusCode, resp.Header.Get(headerAttempts))
		}
	}
}

// exhaustDescriptors lowers the process's RLIMIT_NOFILE to a little above
// the descriptors open and opens /dev/null until none is left; release
// closes them and restores the limit.
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	low := orig
	low.Cur = uint64(len(open) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
	release = func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
			t.Error(err)
		}
	}
	for range low.Cur + 1 { // bounded: no more can be open than the limit
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			return release
		}
		if err != nil {
			release()
			t.Fatal(err)
		}
		fillers = append(fillers, f)
	}
	release()
	t.Fatalf("still opening descriptors past RLIMIT_NOFILE %d", low.Cur)
	return nil
}

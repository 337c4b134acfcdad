package livebench

import (
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/freeport"
)

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		stat    string
		want    time.Duration
		wantErr bool
	}{
		{"plain", "1234 (switchyard) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0", 3 * time.Second, false},
		{"a name with spaces and parentheses", "1234 (a (b) c) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0", 100 * time.Millisecond, false},
		{"short", "1234 (x) S 1 2", 0, true},
		{"no name", "1234 x S", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := parseStatCPU([]byte(tt.stat), 100)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("got %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProcessStopsItsGroup(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// The shell starts a child and waits: stop must end both, the group.
	p, err := startProcess(sh, []string{"-c", "sleep 60 & wait"}, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.cpuTime(); err != nil {
		t.Fatalf("cpu of a running process: %v", err)
	}
	done := make(chan struct{})
	go func() {
		p.stop(5 * time.Second)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return")
	}
}

func TestWaitReadyGivesUp(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p, err := startProcess(sh, []string{"-c", "echo failing to start; exit 3"}, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(time.Second)
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	err = p.waitReady(t.Context(), 10*time.Second, dialable(addr))
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "failing to start") {
		t.Fatalf("err = %v", err)
	}
}

func TestSubprocessEnvDropsOurSettings(t *testing.T) {
	t.Setenv("SWITCHYARD_LIVEBENCH_DURATION", "1s")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("LIVEBENCH_KEPT", "yes")
	env := strings.Join(subprocessEnv(), "\n")
	if strings.Contains(env, "SWITCHYARD_") || strings.Contains(env, "HTTP_PROXY") || !strings.Contains(env, "LIVEBENCH_KEPT=yes") {
		t.Fatalf("env:\n%s", env)
	}
}

func TestGatewayConfigs(t *testing.T) {
	t.Parallel()
	exits := []*url.URL{{Scheme: "http", Host: "127.0.0.1:1001"}, {Scheme: "http", Host: "127.0.0.1:1002"}}
	for _, balance := range []string{"leastconn", "roundrobin"} {
		cfg := haproxyConfig("127.0.0.1:9000", exits, balance)
		for _, want := range []string{
			"mode http", "balance " + balance + "\n", "retries 3", "option redispatch",
			"timeout connect 5s", "timeout server 30s", "timeout client 30s",
			"bind 127.0.0.1:9000", "server exit00 127.0.0.1:1001 check\n", "server exit01 127.0.0.1:1002 check\n",
		} {
			if !strings.Contains(cfg, want) {
				t.Errorf("haproxy config lacks %q:\n%s", want, cfg)
			}
		}
	}
	args := strings.Join(gliderArgs("127.0.0.1:9000", exits, "http://shop.test/"), " ")
	if want := "-listen http://127.0.0.1:9000 -strategy lha -check http://shop.test/ -forward http://127.0.0.1:1001 -forward http://127.0.0.1:1002"; args != want {
		t.Errorf("glider args %q, want %q", args, want)
	}
	if list := proxyList(exits); !strings.HasSuffix(list, "http://127.0.0.1:1001 id=exit00\nhttp://127.0.0.1:1002 id=exit01\n") {
		t.Errorf("proxy list %q", list)
	}
}

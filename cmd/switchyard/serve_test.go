package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

// addrOf waits (bounded) for serve to log the address of listener msg.
func addrOf(t *testing.T, log *logtest.Buffer, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="` + msg + `" addr=(\S+)`)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %q in the log:\n%s", msg, log.String())
	return ""
}

func TestServeEndToEnd(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer site.Close()
	list := filepath.Join(t.TempDir(), "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int)
	go func() {
		done <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--api", "127.0.0.1:0", "--proxies", list}, log, nil)
	}()
	proxyAddr := addrOf(t, log, "forward proxy listening")
	adminAddr := addrOf(t, log, "admin listening")

	proxyURL, _ := url.Parse("http://" + proxyAddr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Second}
	resp, err := client.Get(site.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" || resp.Header.Get("X-Switchyard-Route") != "direct" {
		t.Fatalf("through the gateway: %q, route %q", body, resp.Header.Get("X-Switchyard-Route"))
	}
	for _, path := range []string{"/healthz", "/readyz", "/api/routes", "/metrics"} {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "proxies.txt")
	os.WriteFile(bad, []byte("direct\nhttp://u:Sekr1tPw@192.0.2.1\n"), 0o644)
	tests := []struct {
		desc string
		args []string
		want string
	}{
		{"no list", []string{}, "no routes: set routes.file (or --proxies)"},
		{"missing file", []string{"--proxies", filepath.Join(dir, "nope.txt")}, "nope.txt"},
		{"bad probe url", []string{"--proxies", bad, "--probe-url", "ftp://x"}, "probe.url (flag --probe-url)"},
		{"bad line", []string{"--proxies", bad}, "proxies.txt:2: missing port"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			log := &logtest.Buffer{}
			if code := serve(context.Background(), tt.args, log, nil); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if !strings.Contains(log.String(), tt.want) || strings.Contains(log.String(), "Sekr1tPw") {
				t.Fatalf("output %q, want it to mention %q and no password", log.String(), tt.want)
			}
		})
	}
}

// TestServeNamesABusyListener starts serve with one listener's address
// already taken, as by a second gateway on one machine: it exits 1 naming
// that listener's setting and how to move it.
func TestServeNamesABusyListener(t *testing.T) {
	t.Parallel()
	list := filepath.Join(t.TempDir(), "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)
	tests := []struct {
		flag, want string
	}{
		{"listen", "listen.proxy 127.0.0.1:"},
		{"admin", "listen.admin 127.0.0.1:"},
		{"api", "listen.api 127.0.0.1:"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			t.Parallel()
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			args := map[string]string{"listen": "127.0.0.1:0", "admin": "127.0.0.1:0", "api": "127.0.0.1:0"}
			args[tt.flag] = busy.Addr().String()
			log := &logtest.Buffer{}
			code := serve(context.Background(), []string{"--listen", args["listen"], "--admin", args["admin"], "--api", args["api"], "--proxies", list}, log, nil)
			if code != 1 || !strings.Contains(log.String(), tt.want) || !strings.Contains(log.String(), "in use") || !strings.Contains(log.String(), "--"+tt.flag) {
				t.Errorf("exit %d, output %q; want 1 and %q, in use, --%s", code, log.String(), tt.want, tt.flag)
			}
		})
	}
}

// startServe runs serve over a list of just "direct" and returns the proxy
// and admin addresses, a stop function and the exit code channel.
func startServe(t *testing.T) (proxyAddr, adminAddr string, stop context.CancelFunc, done chan int) {
	t.Helper()
	list := filepath.Join(t.TempDir(), "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done = make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--api", "127.0.0.1:0", "--proxies", list}, log, nil)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	return addrOf(t, log, "forward proxy listening"), addrOf(t, log, "admin listening"), cancel, done
}

func TestServeFinishesInFlightRequestsOnShutdown(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "late but whole")
	}))
	defer site.Close()
	proxyAddr, _, stop, done := startServe(t)
	proxyURL, _ := url.Parse("http://" + proxyAddr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get(site.URL)
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{string(b), err}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the site")
	}
	stop() // shutdown begins with the request in flight
	close(release)
	r := <-got
	if r.err != nil || r.body != "late but whole" {
		t.Fatalf("in-flight request: %q, %v", r.body, r.err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		done <- code // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop after the request finished")
	}
}

// TestServeWithCurl drives the gateway with the curl binary, the way users
// first meet it, when curl is installed.
func TestServeWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Switchyard-Session") != "" || r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("control headers reached the site: %v", r.Header)
		}
		io.WriteString(w, "hello curl")
	}))
	defer site.Close()
	tlsSite := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello tunnel")
	}))
	defer tlsSite.Close()
	proxyAddr, _, _, _ := startServe(t)
	tests := []struct {
		desc string
		args []string
		want string
	}{
		{"absolute-form", []string{"-sS", "-i", "-x", "http://" + proxyAddr, "-H", "X-Switchyard-Session: s1", site.URL}, "X-Switchyard-Route: direct"},
		{"body", []string{"-sS", "-x", "http://" + proxyAddr, site.URL}, "hello curl"},
		{"CONNECT with username control", []string{"-sS", "-k", "-x", "http://acct-session-s2:pw@" + proxyAddr, tlsSite.URL}, "hello tunnel"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, curl, append(tt.args, "--noproxy", "")...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tt.want) {
				t.Fatalf("curl %v: %v\n%s", tt.args, err, out)
			}
		})
	}
}

// Users from the environment are enforced, requests are logged in the
// chosen format, and no secret reaches stderr, the answers' headers or the
// admin listener: users' passwords, the admin token, proxy credentials,
// query strings.
func TestServeWithUsers(t *testing.T) {
	t.Setenv("SWITCHYARD_USERS", "alice:Sekr1t:Pw,bob:0therPw")
	t.Setenv("SWITCHYARD_ADMIN_TOKEN", "Adm1nT0ken")
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer site.Close()
	list := filepath.Join(t.TempDir(), "proxies.txt")
	// The second route refuses connections: requests through it are
	// retried on direct, and its failures are logged.
	os.WriteFile(list, []byte("direct\nhttp://Pr0xyUser:Pr0xyPw@"+routetest.ClosedPort(t)+"\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--api", "127.0.0.1:0", "--proxies", list, "--log-format", "json"}, log, nil)
	}()
	re := regexp.MustCompile(`"msg":"forward proxy listening","addr":"([^"]+)"`)
	var proxyAddr string
	for deadline := time.Now().Add(5 * time.Second); proxyAddr == ""; time.Sleep(5 * time.Millisecond) {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			proxyAddr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening line:\n%s", log)
		}
	}
	m := regexp.MustCompile(`"msg":"admin listening","addr":"([^"]+)"`).FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("no admin listening line:\n%s", log)
	}
	adminAddr := m[1]
	var shown strings.Builder // what clients and admin readers see
	for _, tc := range []struct {
		user *url.Userinfo
		want int
	}{
		{nil, 407},
		{url.UserPassword("alice-session-s1", "wrong"), 407},
		{url.UserPassword("alice", "Sekr1t:Pw"), 200}, // no session: a refused route is retried on direct
	} {
		u := &url.URL{Scheme: "http", Host: proxyAddr, User: tc.user}
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 5 * time.Second}
		resp, err := client.Get(site.URL + "/?key=Qu3ryTok")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		client.CloseIdleConnections()
		shown.WriteString(resp.Header.Get("X-Switchyard-Route") + "\n")
		if resp.StatusCode != tc.want {
			t.Fatalf("%v: %d, want %d", tc.user, resp.StatusCode, tc.want)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); strings.Count(log.String(), `"msg":"request"`) < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("want 3 request lines:\n%s", log)
		}
	}
	for _, path := range []string{"/metrics", "/api/routes", "/api/events"} {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&shown, resp.Body)
		resp.Body.Close()
	}
	if !strings.Contains(shown.String(), "http://127.0.0.1:") {
		t.Fatalf("the admin listener does not show the proxy route:\n%s", shown.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	out := log.String()
	for _, secret := range []string{"Sekr1t", "0therPw", "wrong", "Qu3ryTok", "Adm1nT0ken", "Pr0xyUser", "Pr0xyPw"} {
		for where, text := range map[string]string{"stderr": out, "answers and admin": shown.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("%s hold %q:\n%s", where, secret, text)
			}
		}
	}
	if !strings.Contains(out, `"user":"alice"`) || !strings.Contains(out, `"status":407`) {
		t.Errorf("request lines lack the user or the 407:\n%s", out)
	}
}

// A malformed SWITCHYARD_USERS or --log-format stops start-up, naming the
// problem but never the password.
func TestServeRejectsBadUsers(t *testing.T) {
	list := filepath.Join(t.TempDir(), "proxies.txt")
	os.WriteFile(list, []byte("direct\n"), 0o644)
	tests := []struct {
		desc, users string
		args        []string
		want        string
	}{
		{desc: "no colon", users: "aliceSekr1tPw", want: "entry 1: want user:password"},
		{desc: "bad name", users: "alice:x,b-ob:Sekr1tPw", want: "entry 2: user name"},
		{desc: "set but empty", users: "", want: "names no user"},
		{desc: "bad log format", users: "alice:Sekr1tPw", args: []string{"--log-format", "xml"}, want: "log.format (flag --log-format)"},
		{desc: "duplicate", users: "alice:Sekr1tPw,alice:x", want: "user alice is given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv("SWITCHYARD_USERS", tc.users)
			log := &logtest.Buffer{}
			args := append([]string{"--listen", "127.0.0.1:0", "--admin", "", "--api", "", "--proxies", list}, tc.args...)
			if code := serve(context.Background(), args, log, nil); code != 2 {
				t.Fatalf("exit %d, want 2:\n%s", code, log)
			}
			if !strings.Contains(log.String(), tc.want) || strings.Contains(log.String(), "Sekr1tPw") {
				t.Fatalf("output %q, want it to mention %q and no password", log, tc.want)
			}
		})
	}
}

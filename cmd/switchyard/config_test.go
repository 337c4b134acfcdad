package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
)

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[routes]\ninline = [\"http://u:Sekr1tPw@192.0.2.1:3128\"]\n[engine]\nalpha = 3.0\n"), 0o600)
	perRoute := filepath.Join(dir, "per-route.toml")
	os.WriteFile(perRoute, []byte("[routes]\ninline = [\"direct\"]\n[metrics]\nper_route = \"often\"\n"), 0o600)
	secret := filepath.Join(dir, "secret.toml")
	os.WriteFile(secret, []byte("[routes]\ninline = [\"http://u:Sekr1tPw@192.0.2.1:3128\"]\n[admin]\ntoken = \"T0kenSekr1t\"\n"), 0o600)
	tests := []struct {
		desc     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{desc: "the example", args: []string{"--config", "../../switchyard.example.toml"}, wantCode: 0, wantOut: "[engine]\n  alpha = 0.3"},
		{desc: "secrets redacted, a literal one warned of", args: []string{"--config", secret}, wantCode: 0, wantOut: `token = "***"`,
			wantErr: "warning: " + secret + ":4: admin.token is written in the file as is"},
		{desc: "bad value", args: []string{"--config", bad}, wantCode: 1, wantErr: "bad.toml:4: engine.alpha: must be in (0, 1]\n"},
		{desc: "the example's metrics", args: []string{"--config", "../../switchyard.example.toml"}, wantCode: 0, wantOut: "[metrics]\n  per_route = \"auto\""},
		{desc: "bad per_route", args: []string{"--config", perRoute}, wantCode: 1, wantErr: `per-route.toml:4: metrics.per_route: want true, false or "auto"`},
		{desc: "missing file", args: []string{"--config", filepath.Join(dir, "nope.toml")}, wantCode: 1, wantErr: "nope.toml: no such file"},
		{desc: "no file named", args: nil, wantCode: 2, wantErr: "usage"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var out, errs bytes.Buffer
			if code := checkConfig(tc.args, &out, &errs); code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s%s", code, tc.wantCode, out.String(), errs.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) || !strings.Contains(errs.String(), tc.wantErr) {
				t.Errorf("stdout:\n%s\nstderr:\n%s\nwant %q / %q", out.String(), errs.String(), tc.wantOut, tc.wantErr)
			}
			for _, secret := range []string{"Sekr1tPw", "T0kenSekr1t"} {
				if strings.Contains(out.String()+errs.String(), secret) {
					t.Errorf("output holds %q", secret)
				}
			}
		})
	}
}

// A hangup reloads the config file: a bad file is refused and the running
// configuration stays; a good one adds routes and keeps the others' state.
func TestServeReloadsOnHangup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "switchyard.toml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("[listen]\nproxy = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\n[routes]\ninline = [\"direct\"]\n")
	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	hup := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { done <- serve(ctx, []string{"--config", path}, log, hup) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d:\n%s", code, log)
		}
	}()
	admin := addrOf(t, log, "admin listening")
	routes := func() []string {
		resp, err := http.Get("http://" + admin + "/api/routes")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list []struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range list {
			ids = append(ids, r.ID) // states follow the candidates' checks
		}
		return ids
	}
	waitLog := func(msg string, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); strings.Count(log.String(), msg) < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log:\n%s", msg, log)
			}
		}
	}

	// The new route's check goes to a closed port on loopback, never out.
	write("[routes]\ninline = [\"direct\", \"http://u:Sekr1tPw@127.0.0.1:1 region=us\"]\n[engine]\nalpha = 9.0\n")
	hup <- syscall.SIGHUP
	waitLog("reload refused", 1)
	if got := strings.Join(routes(), " "); got != "direct" {
		t.Errorf("routes after a refused reload: %s", got)
	}

	write("[listen]\nproxy = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\n[routes]\ninline = [\"direct\", \"http://u:Sekr1tPw@127.0.0.1:1 region=us\"]\n")
	hup <- syscall.SIGHUP
	waitLog(`msg=reloaded`, 1)
	if got := strings.Join(routes(), " "); got != "direct http://127.0.0.1:1~0bfe935e" {
		t.Errorf("routes after the reload: %s", got)
	}
	if strings.Contains(log.String(), "Sekr1tPw") {
		t.Errorf("the log holds a proxy password:\n%s", log)
	}
	if !strings.Contains(log.String(), "engine.alpha: must be in (0, 1]") {
		t.Errorf("the refusal does not say why:\n%s", log)
	}
}

// serve logs a literal secret in its file as a warning naming the key and
// line, never the secret.
func TestServeWarnsOfLiteralSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "switchyard.toml")
	body := "[listen]\nproxy = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\n[routes]\ninline = [\"direct\"]\n[admin]\ntoken = \"T0ken-LITERAL\"\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- serve(ctx, []string{"--config", path}, log, nil) }()
	addrOf(t, log, "forward proxy listening")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	if want := path + ":8: admin.token is written in the file as is"; !strings.Contains(log.String(), want) {
		t.Errorf("no warning %q in the log:\n%s", want, log)
	}
	if strings.Contains(log.String(), "T0ken-LITERAL") {
		t.Errorf("the log holds the token:\n%s", log)
	}
}

// POST /api/reload with the admin token reloads as a hangup does and
// answers with the result, the refusal naming file and line; --pid-file
// names the process while it serves. Neither signals anything.
func TestServeReloadsThroughTheAPIAndWritesItsPid(t *testing.T) {
	t.Setenv("SWITCHYARD_ADMIN_TOKEN", "Adm1nT0ken")
	dir := t.TempDir()
	path, pidFile := filepath.Join(dir, "switchyard.toml"), filepath.Join(dir, "switchyard.pid")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const listen = "[listen]\nproxy = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\n"
	write(listen + "[routes]\ninline = [\"direct\"]\n")
	ctx, cancel := context.WithCancel(context.Background())
	log := &logtest.Buffer{}
	done := make(chan int, 1)
	go func() { done <- serve(ctx, []string{"--config", path, "--pid-file", pidFile}, log, nil) }()
	admin := addrOf(t, log, "admin listening")
	if pid, err := os.ReadFile(pidFile); err != nil || string(pid) != strconv.Itoa(os.Getpid())+"\n" {
		t.Errorf("pid file %q, %v; want %d", pid, err, os.Getpid())
	}
	reload := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/api/reload", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	steps := []struct {
		desc       string
		file       string
		token      string
		wantStatus int
		wantBody   string
	}{
		{"a bad file is refused, naming file and line", listen + "[routes]\ninline = [\"direct\", \"http://127.0.0.1:1\"]\n[engine]\nalpha = 9.0\n", "Adm1nT0ken", 422, path + ":8: engine.alpha: must be in (0, 1]"},
		{"no token", listen + "[routes]\ninline = [\"direct\", \"http://127.0.0.1:1\"]\n", "", 401, "bearer token"},
		{"a good file is applied", listen + "[routes]\ninline = [\"direct\", \"http://127.0.0.1:1\"]\n", "Adm1nT0ken", 200, `{"result":"ok"}`},
	}
	for _, s := range steps {
		write(s.file)
		if status, body := reload(s.token); status != s.wantStatus || !strings.Contains(body, s.wantBody) {
			t.Errorf("%s: %d %s, want %d with %s", s.desc, status, body, s.wantStatus, s.wantBody)
		}
	}
	if n := strings.Count(log.String(), "msg=reloaded"); n != 1 {
		t.Errorf("%d reloads applied, want 1:\n%s", n, log)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d:\n%s", code, log)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file left at exit: %v", err)
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
)

func TestDemoFlags(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"extra"}} {
		var out, errs logtest.Buffer
		if code := demoCmd(context.Background(), args, &out, &errs); code != 2 {
			t.Errorf("demo %q: exit %d, want 2", args, code)
		}
		if !strings.Contains(errs.String(), "usage: switchyard demo") {
			t.Errorf("demo %q: no usage in %q", args, errs.String())
		}
	}
}

func TestDemoRunsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- demoCmd(ctx, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errs)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "curl -x http://127.0.0.1:") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no banner:\n%s\n%s", out.String(), errs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("demo did not stop")
	}
}

func TestDemoListenFails(t *testing.T) {
	var out, errs logtest.Buffer
	if code := demoCmd(context.Background(), []string{"--listen", "256.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errs); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errs.String())
	}
}

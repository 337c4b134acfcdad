package redisstore

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard/switchyard/internal/logtest"
)

// go-redis's own log lines go to the store's logger, so a JSON log stays
// JSON. Not parallel: go-redis has one logger per process.
func TestGoRedisLogsThroughSlog(t *testing.T) {
	var buf logtest.Buffer
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(t), MaxRetries: -1})
	s := New(rdb, Options{Prefix: testPrefix(t, redisAddr(t)), Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	defer s.Close()
	// go-redis logs that it rounds an expiry under a millisecond up to one.
	key := s.opts.Prefix + ":log-test"
	if err := rdb.Set(context.Background(), key, "v", 500*time.Microsecond).Err(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if out == "" {
		t.Fatal("go-redis logged nothing through the store's logger")
	}
	for line := range strings.Lines(out) {
		var rec struct{ Level, Msg, From string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		if rec.From != "go-redis" || rec.Level != "WARN" || !strings.Contains(rec.Msg, "truncating to 1ms") {
			t.Errorf("got %+v, want go-redis's warning about the expiry", rec)
		}
	}
}

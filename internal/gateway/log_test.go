package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/logtest"
	"github.com/switchyard/switchyard/internal/route/routetest"
)

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, s string
		limit   int
		want    string
	}{
		{"short", "abc", 4, "abc"},
		{"exact", "abcd", 4, "abcd"},
		{"cut", "abcdef", 4, "abcd…[2 bytes cut]"},
		{"cut inside a rune", "abcé", 4, "abc…[2 bytes cut]"},
		{"cut inside a 4-byte rune", "a😀b", 4, "a…[5 bytes cut]"},
		{"cut after a rune", "aébc", 3, "aé…[2 bytes cut]"},
		{"invalid UTF-8 keeps a prefix", "a\x80\x80\x80\x80\x80", 5, "a\x80…[4 bytes cut]"},
		{"nothing left", "éé", 1, "…[4 bytes cut]"},
	}
	for _, tt := range tests {
		if got := clip(tt.s, tt.limit); got != tt.want {
			t.Errorf("%s: clip(%q, %d) = %q, want %q", tt.desc, tt.s, tt.limit, got, tt.want)
		}
	}
}

// TestRequestLogIsBounded sends requests as long as net/http lets through
// and checks that each log line quotes only a capped prefix of every field,
// saying how much was cut.
func TestRequestLogIsBounded(t *testing.T) {
	routetest.NoLeaks(t, func(t *testing.T) {
		long := strings.Repeat("a", 400<<10)
		tests := []struct {
			desc, req string
			field     string // the log field that is cut
			value     string // what it would say uncut
			limit     int
		}{
			{"path", "GET http://example.com/" + long + " HTTP/1.1", "url", "http://example.com/" + long, maxLogURL},
			{"host", "GET http://" + long + ".example/ HTTP/1.1", "url", "http://" + long + ".example/", maxLogURL},
			{"target", "GET http://" + long + ".example/ HTTP/1.1", "target", long + ".example", maxLogField},
			{"connect authority", "CONNECT " + long + ".example:443 HTTP/1.1", "url", long + ".example:443", maxLogURL},
			{"method", "A" + long + " http://example.com/ HTTP/1.1", "method", "A" + long, maxLogField},
		}
		for _, tt := range tests {
			t.Run(tt.desc, func(t *testing.T) {
				t.Parallel()
				var out logtest.Buffer
				// The only route refuses connections: nothing leaves 127.0.0.1.
				p := routetest.NewProxy(t, routetest.Behavior{Refuse: true})
				v := newEnv(t, Config{Log: slog.New(slog.NewJSONHandler(&out, nil))}, proxyLine(p, ""))
				c, err := net.DialTimeout("tcp", v.url.Host, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, tt.req+"\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				// The gateway closes the connection once the handler, and
				// so the log line, is done.
				answer, err := io.ReadAll(c)
				if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 502 ") {
					t.Fatalf("answer %.100q, %v; want a 502", answer, err)
				}
				line := out.String()
				if strings.Count(line, "\n") != 1 || len(line) > 1<<10 {
					t.Fatalf("%d bytes of log, want one line under 1 KiB:\n%.2000s", len(line), line)
				}
				var fields map[string]any
				if err := json.Unmarshal([]byte(line), &fields); err != nil {
					t.Fatal(err)
				}
				want := tt.value[:tt.limit] + "…[" + strconv.Itoa(len(tt.value)-tt.limit) + " bytes cut]"
				if fields[tt.field] != want {
					t.Errorf("%s = %.300q, want %.300q", tt.field, fields[tt.field], want)
				}
			})
		}
	})
}

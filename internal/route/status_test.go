package route

import (
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		desc       string
		status     int
		retryAfter string
		class      engine.Class
		wait       time.Duration
	}{
		{"ok", 200, "", engine.OK, 0},
		{"redirect", 302, "", engine.OK, 0},
		{"not found is the request's fault", 404, "", engine.ClientError, 0},
		{"forbidden", 403, "", engine.Blocked, 0},
		{"legal", 451, "", engine.Blocked, 0},
		{"rate limited, seconds", 429, "30", engine.RateLimited, 30 * time.Second},
		{"rate limited, date", 429, now.Add(90 * time.Second).Format(http.TimeFormat), engine.RateLimited, 90 * time.Second},
		{"rate limited, garbage", 429, "soon", engine.RateLimited, 0},
		{"rate limited, past date", 429, now.Add(-time.Hour).Format(http.TimeFormat), engine.RateLimited, 0},
		{"rate limited, absurd", 429, "999999999", engine.RateLimited, 24 * time.Hour},
		{"unavailable with retry-after", 503, "5", engine.Target5xx, 5 * time.Second},
		{"a target's 407 is its own 4xx", 407, "", engine.ClientError, 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.retryAfter != "" {
				h.Set("Retry-After", tt.retryAfter)
			}
			class, wait := ClassifyStatus(tt.status, h, now)
			if class != tt.class || wait != tt.wait {
				t.Fatalf("got %v %v, want %v %v", class, wait, tt.class, tt.wait)
			}
		})
	}
}

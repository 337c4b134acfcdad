package livebench

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestInTurnTakesEachGatewayInTurn(t *testing.T) {
	t.Parallel()
	a, b := &http.Client{}, &http.Client{}
	r := &inTurn{clients: []*http.Client{a, b}}
	for i, want := range []*http.Client{a, b, a, b, a} {
		c, exit, err := r.route(t.Context(), "shop.test", nil)
		if c != want || exit != -1 || err != nil {
			t.Fatalf("attempt %d: client %p, exit %d, %v; want %p, -1", i, c, exit, err, want)
		}
	}
}

func TestStartRedisServesAndStops(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server: ", err)
	}
	p, state, err := startRedis(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(state, "redis://")
	addr, ok2 := strings.CutSuffix(addr, "/0")
	if !ok || !ok2 || !strings.HasPrefix(addr, "127.0.0.1:") {
		p.stop(stopGrace)
		t.Fatalf("state URL %q, want redis://127.0.0.1:<port>/0", state)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		p.stop(stopGrace)
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write([]byte("PING\r\n"))
	line, rerr := bufio.NewReader(c).ReadString('\n')
	c.Close()
	p.stop(stopGrace)
	if err != nil || rerr != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v, %v", line, err, rerr)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("redis-server still accepts connections after stop")
	}
}

func TestLearnedPaceSummarizesTheGatewaysPacing(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/targets/shop.test/pace":
			io.WriteString(w, `{"target":"shop.test","tolerance":0,"gateways":2,"frozen":4,"braked":0,"pairs":[`+
				`{"route":"x0","rate":4.2,"own":2.1,"guess":true},{"route":"x1","rate":3.8,"own":1.9},`+
				`{"route":"x2","rate":4,"own":2},{"route":"x3","rate":0,"own":0}]}`)
		case "/api/targets/news.test/pace":
			io.WriteString(w, `{"target":"news.test","tolerance":24,"gateways":1,"pairs":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	tests := []struct{ site, want string }{
		{"shop.test", "3 exits held at 4.00 requests/s (median; 3.80–4.20; 1 guessed), this gateway's share 2.00 (median), frozen at 4.00, 2 gateway(s)"},
		{"news.test", "0 exits held, tolerance 24.0 requests a window, 1 gateway(s)"},
		{"search.test", ""}, // nothing learned there
	}
	for _, tt := range tests {
		if got := learnedPace(t.Context(), srv.URL, tt.site); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.site, got, tt.want)
		}
	}
}

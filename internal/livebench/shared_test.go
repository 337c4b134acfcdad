package livebench

import (
	"bufio"
	"net"
	"net/http"
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

package browsertest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/server"
)

const clusterSecret = "browser-cluster-secret-0123456789" // never to appear in the page

// startNodes runs a cluster of gateways a and b on 127.0.0.1, each with
// one fake exit, and returns a's admin URL and b's API address.
func startNodes(t *testing.T) (admin, peer string) {
	t.Helper()
	apis := []net.Listener{listen(t), listen(t)}
	peers := []string{apis[0].Addr().String(), apis[1].Addr().String()}
	for i, id := range []string{"a", "b"} {
		routes, err := route.ParseList("test", []byte(routetest.NewProxy(t, routetest.Behavior{}).URL.String()+" id=exit-"+id+" region=r"+id+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		cfg := config.WithRoutes(routes)
		cfg.Admin.Token = config.LiteralSecret(adminToken)
		cfg.Listen.API = peers[i]
		cfg.Cluster.NodeID, cfg.Cluster.Secret, cfg.Cluster.Peers = id, config.LiteralSecret(clusterSecret), peers
		cfg.Cluster.CheckInterval = 100 * time.Millisecond
		adm := listen(t)
		if i == 0 {
			admin = "http://" + adm.Addr().String()
		}
		s, err := server.New(cfg, server.Listeners{Proxy: listen(t), Admin: adm, API: apis[i]}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, time.Second) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	return admin, peers[1]
}

// TestClusterPage shows a's cluster page: both nodes, b up with its
// route, and b's "test connection" answered ok once the token is given;
// neither secret nor token is in the page.
func TestClusterPage(t *testing.T) {
	chromiumPath(t) // skip before building anything
	admin, peer := startNodes(t)
	b := newBrowser(t)
	b.run(t, 15*time.Second, chromedp.Navigate(admin+"/#cluster"))
	b.until(t, 15*time.Second, `document.querySelectorAll('#cl-body tr').length === 2 &&
		document.querySelector('#cl-body tr:nth-child(2) .badge.up') !== null &&
		document.querySelector('#cl-body tr:nth-child(2)').textContent.includes('region=rb')`)
	b.run(t, 10*time.Second,
		chromedp.Click(chromedp.CSS(`#cl-body tr:nth-child(2) button`)),
		chromedp.WaitVisible(chromedp.CSS(`#token-dialog`)),
		chromedp.SendKeys(chromedp.CSS(`#token-input`), adminToken+kb.Enter))
	b.until(t, 10*time.Second, `document.getElementById('cl-test').textContent.startsWith(`+strconv.Quote(peer+": ok (node b")+`)`)
	b.screenshot(t, "cluster")
	for _, secret := range []string{adminToken, clusterSecret} {
		if eval[bool](t, b, `document.documentElement.outerHTML.includes(`+strconv.Quote(secret)+`)`) {
			t.Error("the page shows a secret")
		}
	}
}

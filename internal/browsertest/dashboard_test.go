package browsertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/route"
	"github.com/switchyard/switchyard/internal/route/routetest"
	"github.com/switchyard/switchyard/internal/server"
)

const adminToken = "tok-dash-7Qx" // never to appear in the page

// gateway is a real gateway (internal/server, as serve wires it) over fake
// proxies on 127.0.0.1, with a site behind them.
type gateway struct {
	srv     *server.Server
	admin   string // http://127.0.0.1:port
	proxy   string // host:port of the forward proxy
	site    *httptest.Server
	proxies map[string]*routetest.Proxy // by route id
}

// fake is one route of the gateway: its id, labels and fault profile.
type fake struct {
	id, labels string
	b          routetest.Behavior
}

// copies is n fake proxies with behaviour b, named prefix0, prefix1, …
func copies(n int, prefix string, b routetest.Behavior) []fake {
	fs := make([]fake, n)
	for i := range fs {
		fs[i] = fake{id: fmt.Sprintf("%s%d", prefix, i), b: b}
	}
	return fs
}

// startGateway starts it; tune, if given, adjusts the config first.
func startGateway(t *testing.T, fakes []fake, tune ...func(*config.Config)) *gateway {
	t.Helper()
	g := &gateway{proxies: make(map[string]*routetest.Proxy)}
	g.site = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(g.site.Close)
	var list strings.Builder
	for _, f := range fakes {
		p := routetest.NewProxy(t, f.b)
		g.proxies[f.id] = p
		fmt.Fprintf(&list, "%s id=%s %s\n", p.URL, f.id, f.labels)
	}
	routes, err := route.ParseList("test", []byte(list.String()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.WithRoutes(routes)
	cfg.Admin.Token = config.LiteralSecret(adminToken)
	// As the demo does: every usable route drawn in proportion to its
	// expected speed, so that each meets traffic and so its faults.
	cfg.Engine.Picker = "weighted_random"
	cfg.Engine.Sharpness = 1
	for _, f := range tune {
		f(cfg)
	}
	proxyLn, adminLn := listen(t), listen(t)
	g.proxy, g.admin = proxyLn.Addr().String(), "http://"+adminLn.Addr().String()
	g.srv, err = server.New(cfg, server.Listeners{Proxy: proxyLn, Admin: adminLn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.srv.Run(ctx, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return g
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// localhost is the URL of path on the test site under the name
// localhost: a target of its own beside 127.0.0.1, which the fake proxies
// can single out by name (routetest.Behavior's BlockHosts, HostStatus).
func (g *gateway) localhost(path string) string {
	return "http://localhost:" + g.site.URL[strings.LastIndex(g.site.URL, ":")+1:] + path
}

// load sends about rate requests/s to each URL through the gateway, with
// labels, until the returned stop is called (which waits for it to end).
func (g *gateway) load(rate int, labels string, urls ...string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: g.proxy})}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				req.Header.Set("X-Switchyard-Labels", labels)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	}
}

// colorScheme emulates prefers-color-scheme: "dark", "light", or "" for
// the system's.
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		params := emulation.SetEmulatedMediaParams{}
		if scheme != "" {
			params.Features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
		}
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, params)
		return err
	})
}

func (g *gateway) state(t *testing.T, id string) engine.State {
	t.Helper()
	st, ok := g.srv.Engine().Route(id)
	if !ok {
		t.Fatalf("no route %s", id)
	}
	return st.Health.State
}

// TestDashboard drives the dashboard against a gateway under live traffic,
// as a user would: the overview, a route failing, the event stream, an
// operator action with and without the token, and a tried request.
func TestDashboard(t *testing.T) {
	chromiumPath(t) // skip before building anything
	g := startGateway(t, []fake{
		{id: "m1", labels: "pool=main provider=acme"},
		{id: "m2", labels: "pool=main provider=acme"},
		{id: "m3", labels: "pool=main provider=zeta"},
		{id: "victim", labels: "pool=main provider=zeta"},
		// The blocker refuses the site by name, so that the heatmap has a
		// column: pairs exist once there is evidence against them.
		{id: "blocker", labels: "pool=main provider=acme", b: routetest.Behavior{BlockHosts: []string{"localhost"}}},
		{id: "t1", labels: "pool=try provider=acme"},
		{id: "t2", labels: "pool=try provider=zeta"},
	})
	stopLoad := g.load(20, "pool=main", g.site.URL+"/a", g.localhost("/b"))
	defer stopLoad()
	b := newBrowser(t)

	t.Run("the overview shows the pool", func(t *testing.T) {
		b.run(t, 15*time.Second, chromedp.Navigate(g.admin+"/#overview"),
			// A reload would lose this mark: the checks below see it kept.
			js(`window.notReloaded = true`))
		b.until(t, 10*time.Second, `document.getElementById('ov-routes').textContent === '7' &&
			document.querySelector('#ov-pool [data-state="healthy"]') !== null &&
			document.getElementById('ov-rps').textContent !== '–'`)
		// Each budget meter says what its percentage is of.
		b.until(t, 10*time.Second, `/^[\d,]+ % of budget \([\d,]+ retr(y|ies), [\d,]+ hedges? \/ [\d,]+ requests?\)$/.test(document.getElementById('ov-retry-text').textContent) &&
			/^[\d,]+ % of budget$/.test(document.getElementById('ov-hedge-text').textContent)`)
		// Open the events page once, so that what it shows later came
		// through the stream and not from its first load.
		b.run(t, 5*time.Second, js(`location.hash = '#events'`))
		b.until(t, 10*time.Second, `document.getElementById('ev-live').textContent === 'live'`)
		b.run(t, 5*time.Second, js(`location.hash = '#overview'`))
		b.until(t, 10*time.Second, `document.getElementById('ch-rps').width > 0`)
		b.screenshot(t, "overview")
		b.run(t, 5*time.Second, colorScheme("dark"))
		b.until(t, 5*time.Second, `getComputedStyle(document.body).backgroundColor !== 'rgb(251, 251, 250)'`)
		b.screenshot(t, "overview-dark")
		b.run(t, 5*time.Second, colorScheme(""))
	})

	t.Run("a failing route turns cooling in the table and the heatmap", func(t *testing.T) {
		b.run(t, 5*time.Second, js(`location.hash = '#routes'`))
		b.until(t, 10*time.Second, `document.querySelector('#rt-body tr[data-route="victim"][data-state="healthy"]') !== null`)
		g.proxies["victim"].Close() // connections to it are refused from now on
		start := time.Now()
		b.until(t, 20*time.Second, `document.querySelector('#rt-body tr[data-route="victim"][data-state="cooling"]') !== null && window.notReloaded`)
		t.Logf("the table showed the route cooling %v after its proxy went away", time.Since(start).Round(100*time.Millisecond))
		b.screenshot(t, "routes")

		b.run(t, 10*time.Second,
			js(`location.hash = '#heatmap'`),
			chromedp.WaitVisible(chromedp.CSS(`#hm-canvas`)),
			chromedp.SendKeys(chromedp.CSS(`#hm-filter`), "victim"))
		// One row; the columns are every target with evidence, and under
		// load a slow answer may give 127.0.0.1 one too: the cell hovered
		// is localhost's, wherever its column is.
		b.until(t, 10*time.Second, `document.getElementById('hm-count').textContent.startsWith('1 route ×') &&
			hm.data.targets.indexOf('localhost') >= 0`)
		at := eval[[]float64](t, b, `(() => { const r = document.getElementById('hm-canvas').getBoundingClientRect();
			const c = hm.data.targets.indexOf('localhost');
			return [r.left + hm.labelW + c * hm.cell + hm.cell / 2, r.top + hm.headH + hm.cell / 2]; })()`)
		b.run(t, 5*time.Second, chromedp.MouseEvent(chromedp.MouseMoved, at[0], at[1]))
		b.until(t, 20*time.Second, `!document.getElementById('hm-tip').hidden &&
			document.getElementById('hm-tip').textContent.startsWith('victim × localhost: cooling') && window.notReloaded`)
		b.screenshot(t, "heatmap")
		b.run(t, 5*time.Second, chromedp.MouseClickXY(at[0], at[1]))
		b.until(t, 10*time.Second, `[...document.querySelectorAll('#hm-events li')].some((li) => li.textContent.includes('→ cooling'))`)

		// The same from the keyboard: focus the map, move to the cell,
		// hear it described, open its events.
		b.run(t, 5*time.Second, js(`document.getElementById('hm-events').replaceChildren()`),
			chromedp.Focus(chromedp.CSS(`#hm-canvas`)), chromedp.KeyEvent(kb.ArrowDown))
		b.until(t, 10*time.Second, `document.getElementById('hm-cell').textContent.startsWith('victim × localhost: ')`)
		b.run(t, 5*time.Second, chromedp.KeyEvent(kb.Enter))
		b.until(t, 10*time.Second, `[...document.querySelectorAll('#hm-events li')].some((li) => li.textContent.includes('→ cooling'))`)

		// A row's name opens its route's page.
		b.run(t, 5*time.Second, chromedp.MouseClickXY(at[0]-eval[float64](t, b, `hm.labelW`)+20, at[1]))
		b.until(t, 10*time.Second, `location.hash === '#route/victim' && document.getElementById('rd-id').textContent === 'victim' &&
			document.querySelector('#rd-facts .badge') !== null`)
	})

	t.Run("the state change arrives on the stream with its reason", func(t *testing.T) {
		b.run(t, 5*time.Second, js(`location.hash = '#events'`))
		b.until(t, 10*time.Second, `[...document.querySelectorAll('#ev-list li[data-route="victim"][data-kind="state"]')].some((li) =>
			li.textContent.includes('→ cooling') && li.textContent.includes('proxy_connect_failed') &&
			li.querySelector('.reason') !== null && li.textContent.includes('[rules ')) && window.notReloaded`)
		b.screenshot(t, "events")

		// Scrolled down to read, the list holds still and counts what
		// arrives; back at the top it shows it.
		b.run(t, 5*time.Second, js(`{ const l = document.getElementById('ev-list'); l.style.height = '80px'; l.scrollTop = 40; }`))
		b.until(t, 5*time.Second, `document.getElementById('ev-live').textContent.startsWith('paused')`)
		if err := g.srv.Engine().Drain(time.Now(), "m2"); err != nil {
			t.Fatal(err)
		}
		// Other routes' changes may arrive too: the count is at least 1.
		drained := `[...document.querySelectorAll('#ev-list li[data-route="m2"]')].some((li) => li.textContent.includes('→ draining'))`
		// The event came (the page holds it) but is not shown.
		b.until(t, 10*time.Second, `evs.list.some((e) => e.route === 'm2' && e.to === 'draining') &&
			/^paused: [1-9]/.test(document.getElementById('ev-live').textContent) && !`+drained)
		b.run(t, 5*time.Second, js(`document.getElementById('ev-list').scrollTop = 0`))
		b.until(t, 5*time.Second, `document.getElementById('ev-live').textContent === 'live' && `+drained)
		b.run(t, 5*time.Second, js(`document.getElementById('ev-list').style.height = ''`))
	})

	t.Run("drain needs the token", func(t *testing.T) {
		note := `document.getElementById('rd-action-note').textContent`
		b.run(t, 10*time.Second,
			js(`location.hash = '#route/' + encodeURIComponent('m1')`),
			chromedp.WaitVisible(chromedp.CSS(`#rd-facts .badge`)),
			chromedp.Click(chromedp.CSS(`[data-action="drain"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#token-dialog`)),
			chromedp.Click(chromedp.CSS(`#token-cancel`)))
		b.until(t, 5*time.Second, note+` === 'not sent: no token given'`)
		b.run(t, 10*time.Second,
			chromedp.Click(chromedp.CSS(`[data-action="drain"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#token-dialog`)),
			chromedp.SendKeys(chromedp.CSS(`#token-input`), "wrong-token"),
			chromedp.Click(chromedp.CSS(`#token-ok`)))
		b.until(t, 5*time.Second, note+`.includes('refused') && `+note+`.includes('401')`)
		if s := g.state(t, "m1"); s == engine.Draining {
			t.Fatal("drained with a wrong token")
		}
		b.run(t, 10*time.Second,
			chromedp.Click(chromedp.CSS(`[data-action="drain"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#token-dialog`)),
			chromedp.SendKeys(chromedp.CSS(`#token-input`), adminToken+kb.Enter)) // Enter uses the token
		b.until(t, 10*time.Second, note+` === 'drain: done' && document.querySelector('#rd-facts .badge.draining') !== null`)
		if s := g.state(t, "m1"); s != engine.Draining {
			t.Fatalf("m1 is %v after the drain", s)
		}
		if eval[bool](t, b, `document.documentElement.outerHTML.includes(`+strconv.Quote(adminToken)+`)`) {
			t.Error("the page shows the admin token")
		}
	})

	t.Run("try a request shows its attempts", func(t *testing.T) {
		stopLoad() // the count below is of this request alone
		before := g.proxies["t1"].Requests() + g.proxies["t2"].Requests()
		b.run(t, 10*time.Second,
			js(`location.hash = '#try'`),
			chromedp.WaitVisible(chromedp.CSS(`#try-url`)),
			chromedp.SendKeys(chromedp.CSS(`#try-url`), g.site.URL+"/tried"),
			chromedp.SendKeys(chromedp.CSS(`#try-labels`), "pool=try"),
			chromedp.Click(chromedp.CSS(`#try-submit`)))
		b.until(t, 15*time.Second, `document.querySelector('#try-result dt')?.textContent === 'Status'`)
		shown := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('#try-result dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
		b.screenshot(t, "try")
		sent := g.proxies["t1"].Requests() + g.proxies["t2"].Requests() - before
		if shown["Status"] != "200" || (shown["Route"] != "t1" && shown["Route"] != "t2") || shown["Attempts"] != strconv.Itoa(sent) {
			t.Errorf("the trace shows %v; the try routes' proxies received %d requests", shown, sent)
		}
		rows := eval[[][]string](t, b, `[...document.querySelectorAll('#try-attempts tr')].map((tr) => [...tr.cells].map((td) => td.textContent))`)
		won := slices.IndexFunc(rows, func(r []string) bool { return len(r) == 7 && r[3] == "ok" && r[2] == shown["Route"] })
		if len(rows) != sent || won < 0 {
			t.Errorf("the attempts table shows %v; the try routes' proxies received %d requests, the answer by %s", rows, sent, shown["Route"])
		}
	})
}

// TestDashboardAlarms: a route whose proxy refuses its credentials is an
// alarm on the overview, naming the route with a link to its page; the
// card is marked while it lasts. The route's check before users' traffic
// raises it, with no request sent.
func TestDashboardAlarms(t *testing.T) {
	chromiumPath(t) // skip before building anything
	g := startGateway(t, []fake{
		{id: "ok", labels: "pool=main"},
		{id: "locked", labels: "pool=locked", b: routetest.Behavior{Answer407: true}},
	})
	b := newBrowser(t)
	b.run(t, 15*time.Second, chromedp.Navigate(g.admin+"/#overview"))
	b.until(t, 20*time.Second, `document.getElementById('ov-routes').textContent === '2' &&
		document.getElementById('ov-alarms-card').classList.contains('alarm') &&
		document.querySelector('#ov-alarms li[data-alarm="proxy_auth"] a[href="#route/locked"]') !== null &&
		document.querySelector('#ov-alarms li[data-alarm="proxy_auth"]').textContent.startsWith('1 route refused by their proxy (407)')`)
	b.screenshot(t, "alarms")
	b.run(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#ov-alarms a[href="#route/locked"]`)))
	b.until(t, 10*time.Second, `location.hash === '#route/locked' && document.getElementById('rd-id').textContent === 'locked'`)
}

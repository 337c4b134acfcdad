package browsertest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A site that refuses the whole cheap tier moves to the costly one, and
// the events page says so; the routes table shows each route's tier.
func TestDashboardShowsTierMoves(t *testing.T) {
	chromiumPath(t) // skip before building anything
	refusing := routetest.Behavior{BlockHosts: []string{"localhost"}}
	g := startGateway(t, append(copies(10, "dc", refusing), fake{id: "resi", labels: "tier=1"}))
	stopLoad := g.load(20, "", g.localhost("/tickets"))
	defer stopLoad()
	b := newBrowser(t)
	b.run(t, 15*time.Second, chromedp.Navigate(g.admin+"/#events"))
	b.until(t, 20*time.Second, `[...document.querySelectorAll('#ev-list li[data-kind="tier"]')].some((li) =>
		li.textContent.includes('localhost served from cost tier 0 → 1') && li.textContent.includes('valid answers'))`)
	// The targets page says which tier the site is on, and why.
	b.run(t, 5*time.Second, js(`location.hash = '#targets'`))
	b.until(t, 10*time.Second, `[...document.querySelectorAll('#tg-body tr[data-target="localhost"] td')].some((td) =>
		td.textContent.startsWith('tier 1') && td.textContent.includes('valid answers'))`)
	b.run(t, 5*time.Second, js(`location.hash = '#routes'`))
	b.until(t, 10*time.Second, `document.querySelector('#rt-body tr[data-route="resi"] td.tier')?.textContent === '1' &&
		document.querySelector('#rt-body tr[data-route="dc0"] td.tier')?.textContent === '0'`)
}

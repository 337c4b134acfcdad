package browsertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/switchyard/switchyard/internal/route/routetest"
)

// A site that answers most exits 429 freezes, and the targets page says
// what its 429s taught: the routes held to a rate, and the rate an exit
// new to the site starts held at.
func TestDashboardShowsLearnedPacing(t *testing.T) {
	chromiumPath(t) // skip before building anything
	limited := routetest.Behavior{HostStatus: map[string]int{"localhost": http.StatusTooManyRequests}}
	g := startGateway(t, append(copies(3, "limited", limited), fake{id: "free"}))
	stopLoad := g.load(20, "", g.localhost("/pages"))
	defer stopLoad()
	b := newBrowser(t)
	b.run(t, 15*time.Second, chromedp.Navigate(g.admin+"/#targets"))
	b.until(t, 20*time.Second, `[...document.querySelectorAll('#tg-body tr[data-target="localhost"] td')].some((td) =>
		/^\d+ routes at [\d.]+ req\/s, frozen: new exits at [\d.]+ req\/s$/.test(td.textContent))`)
}

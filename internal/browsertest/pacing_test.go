package browsertest

import (
	"fmt"
	"net/http"
	"strings"
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
	var fakes []fake
	for i := range 3 {
		fakes = append(fakes, fake{id: fmt.Sprintf("limited%d", i), b: routetest.Behavior{HostStatus: map[string]int{"localhost": http.StatusTooManyRequests}}})
	}
	fakes = append(fakes, fake{id: "free"})
	g := startGateway(t, fakes)
	port := g.site.URL[strings.LastIndex(g.site.URL, ":")+1:]
	stopLoad := g.load(20, "", "http://localhost:"+port+"/pages")
	defer stopLoad()
	b := newBrowser(t)
	b.run(t, 15*time.Second, chromedp.Navigate(g.admin+"/#targets"))
	b.until(t, 20*time.Second, `[...document.querySelectorAll('#tg-body tr[data-target="localhost"] td')].some((td) =>
		/^\d+ routes at [\d.]+ req\/s, frozen: new exits at [\d.]+ req\/s$/.test(td.textContent))`)
}

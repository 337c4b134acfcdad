package browsertest

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds the Debian chromium. Outside CI a missing browser
// skips the test; in CI (CI set) it fails it, so the browser tests cannot
// silently stop running there.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set but chromium is not on PATH: apt-get install -y chromium chromium-driver (.ci/run does)")
	}
	t.Skip("chromium is not on PATH (apt-get install -y chromium chromium-driver): the dashboard's browser tests are skipped outside CI")
	return ""
}

// browser is a headless Chromium with a fresh profile that may reach
// 127.0.0.1 only: every other name fails to resolve, its background
// services are off, and every request it sends is checked at the end.
type browser struct {
	ctx  context.Context
	shot string // directory of the screenshots

	mu      sync.Mutex
	foreign []string // guarded by mu: URLs requested beyond 127.0.0.1
}

// newBrowser starts a headless Chromium that reaches 127.0.0.1 alone, with
// extra flags, if any, after the defaults.
func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication"),
		// Nothing but 127.0.0.1 resolves, so nothing else can be reached.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.WindowSize(1280, 900),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx, shot: os.Getenv("SWITCHYARD_SCREENSHOTS")}
	if b.shot == "" {
		b.shot = t.TempDir()
	}
	// Listen starts the browser; the network domain is on from the start.
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			if u, err := url.Parse(e.Request.URL); err != nil || (u.Scheme != "data" && u.Hostname() != "127.0.0.1") {
				b.mu.Lock()
				b.foreign = append(b.foreign, e.Request.URL)
				b.mu.Unlock()
			}
		}
	})
	if err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.foreign) > 0 {
			t.Errorf("the browser sent requests beyond 127.0.0.1: %v", b.foreign)
		}
	})
	return b
}

// run runs steps, failing the test after timeout.
func (b *browser) run(t *testing.T, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.screenshot(t, "failed-"+strings.ReplaceAll(t.Name(), "/", "-"))
		t.Fatal(err)
	}
}

// eval returns the value of a JavaScript expression.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// js is a step running a JavaScript statement.
func js(stmt string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](stmt + "; undefined")
}

// until waits up to timeout for the JavaScript expression to be true.
func (b *browser) until(t *testing.T, timeout time.Duration, expr string) {
	t.Helper()
	b.run(t, timeout+time.Second, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// screenshot saves the viewport as name.png in the screenshot directory.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.shot, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", path)
}

package livebench

import (
	"net/http"
	"testing"
	"time"
)

// testSites are the sites of the world and fleet tests.
var testSites = []string{"shop.test", "news.test"}

// mustWorld is a world of shapes over testSites.
func mustWorld(t *testing.T, shapes ...Shape) *world {
	t.Helper()
	w, err := newWorld(shapes, testSites, 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestNewWorldRefusesBadShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		shape Shape
	}{
		{"unknown site", fast().on("other.test", banned)},
		{"jitter of 1", Shape{Jitter: 1}},
		{"flaky of 1", Shape{Flaky: 1}},
		{"window backwards", fast().blackholedDuring(0.6, 0.2)},
		{"rate limit of 1 leaves the oracle no margin", fast().on("shop.test", rateLimited(1, time.Second))},
		{"burst ban without a window", fast().on("shop.test", burstBanned(5, 0, time.Second))},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if _, err := newWorld([]Shape{tt.shape}, testSites, 1); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestAtSite(t *testing.T) {
	t.Parallel()
	type probe struct {
		at         time.Duration
		site       string
		wantStatus int
		wantRetry  time.Duration // Retry-After of a 429
		wantCapt   bool
	}
	tests := []struct {
		desc   string
		shape  Shape
		probes []probe
	}{
		{"healthy", fast(), []probe{
			{site: "shop.test", wantStatus: 200},
		}},
		{"banned on one site only", fast().on("shop.test", banned), []probe{
			{site: "shop.test", wantStatus: 403},
			{site: "news.test", wantStatus: 200},
		}},
		{"captcha on one site only", fast().on("news.test", captcha), []probe{
			{site: "news.test", wantStatus: 200, wantCapt: true},
			{site: "shop.test", wantStatus: 200},
		}},
		{"rate limit trips, holds its penalty, then lifts", fast().on("shop.test", rateLimited(2, 5*time.Second)), []probe{
			{at: 0, site: "shop.test", wantStatus: 200},
			{at: 0, site: "shop.test", wantStatus: 200},
			{at: 0, site: "news.test", wantStatus: 200}, // the other site is not limited
			{at: 0, site: "shop.test", wantStatus: 429, wantRetry: 5 * time.Second},
			{at: 2 * time.Second, site: "shop.test", wantStatus: 429, wantRetry: 3 * time.Second},
			{at: 5 * time.Second, site: "shop.test", wantStatus: 200},
		}},
		{"burst ban trips after the burst and lifts after the penalty", fast().on("news.test", burstBanned(2, time.Second, 10*time.Second)), []probe{
			{at: 0, site: "news.test", wantStatus: 200},
			{at: 100 * time.Millisecond, site: "news.test", wantStatus: 200},
			{at: 200 * time.Millisecond, site: "news.test", wantStatus: 403},
			{at: 5 * time.Second, site: "news.test", wantStatus: 403},
			{at: 10*time.Second + 200*time.Millisecond, site: "news.test", wantStatus: 200},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			w := mustWorld(t, tt.shape)
			for i, p := range tt.probes {
				got := w.atSite(0, p.site, at(p.at))
				if got.status != p.wantStatus || got.captcha != p.wantCapt || got.retryAfter != p.wantRetry {
					t.Fatalf("probe %d (%s at %v): got %+v, want status %d captcha %v retry-after %v",
						i, p.site, p.at, got, p.wantStatus, p.wantCapt, p.wantRetry)
				}
			}
		})
	}
}

func TestFlakyShare(t *testing.T) {
	t.Parallel()
	w := mustWorld(t, flaky())
	const n = 10000
	bad := 0
	for range n {
		switch s := w.atSite(0, "shop.test", t0).status; s {
		case http.StatusBadGateway, http.StatusServiceUnavailable:
			bad++
		case http.StatusOK:
		default:
			t.Fatalf("status %d", s)
		}
	}
	if share := float64(bad) / n; share < 0.27 || share > 0.33 {
		t.Fatalf("flaky share %.3f, want about 0.30", share)
	}
}

func TestAtExit(t *testing.T) {
	t.Parallel()
	w := mustWorld(t, fast(), slow(), auth407(), blackholed(), fast().blackholedDuring(0.2, 0.6))
	w.begin(t0, 10*time.Second)
	tests := []struct {
		desc     string
		exit     int
		at       time.Duration
		want     exitAct
		min, max time.Duration
	}{
		{"fast adds a few ms", 0, 0, actForward, fastLatency / 2, fastLatency * 3 / 2},
		{"slow adds about a second", 1, 0, actForward, slowLatency * 8 / 10, slowLatency * 12 / 10},
		{"407", 2, 0, act407, 0, 0},
		{"blackhole", 3, 0, actHold, 0, 0},
		{"window: before", 4, 1999 * time.Millisecond, actForward, fastLatency / 2, fastLatency * 3 / 2},
		{"window: at its start", 4, 2 * time.Second, actHold, 0, 0},
		{"window: inside", 4, 5 * time.Second, actHold, 0, 0},
		{"window: at its end", 4, 6 * time.Second, actForward, fastLatency / 2, fastLatency * 3 / 2},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			for range 100 {
				act, d := w.atExit(tt.exit, at(tt.at))
				if act != tt.want || d < tt.min || d > tt.max {
					t.Fatalf("atExit = %v, %v; want %v within [%v, %v]", act, d, tt.want, tt.min, tt.max)
				}
			}
		})
	}
}

func TestBlackholeSwitch(t *testing.T) {
	t.Parallel()
	w := mustWorld(t, fast())
	steps := []struct {
		on   bool
		want bool
	}{{true, true}, {false, false}, {true, true}}
	for i, s := range steps {
		w.setBlackhole(0, s.on)
		if got := w.blackholed(0, t0); got != s.want {
			t.Fatalf("step %d: blackholed %v, want %v", i, got, s.want)
		}
		if act, _ := w.atExit(0, t0); (act == actHold) != s.want {
			t.Fatalf("step %d: atExit %v", i, act)
		}
	}
}

func TestTruth(t *testing.T) {
	t.Parallel()
	w := mustWorld(t, fast(), dead(), blackholed(), auth407(), fast().on("shop.test", banned),
		fast().on("shop.test", captcha), flaky(), fast().on("shop.test", rateLimited(2, time.Minute)))
	// Trip exit 7's limit.
	for range 3 {
		w.atSite(7, "shop.test", t0)
	}
	wantUsable := []bool{true, false, false, false, false, false, true, false}
	for i, want := range wantUsable {
		tr := w.truthAt(i, "shop.test", t0)
		if tr.usable != want {
			t.Errorf("exit %d (%s): usable %v, want %v", i, w.shapes[i].kind(testSites), tr.usable, want)
		}
	}
	if tr := w.truthAt(4, "news.test", t0); !tr.usable {
		t.Error("an exit banned on shop.test is not usable on news.test")
	}
	if tr := w.truthAt(6, "shop.test", t0); tr.success != 0.7 {
		t.Errorf("flaky success %v, want 0.7", tr.success)
	}
}

package livebench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LiveCost measures the gateway's own cost (issue 17), not its choices:
// every exit is healthy and adds no delay, so whatever a contender adds
// to the direct path is its own work.

// Contender names LiveCost's report compares.
const (
	costDirect     = "direct"
	costHAProxy    = "haproxy"
	costSwitchyard = "switchyard"
	costGoFloor    = "go-floor"
)

// costExits is the size of LiveCost's fleet.
const costExits = 10

// costSite and costPath are the page every request of LiveCost asks for.
const (
	costSite = "shop.test"
	costPath = "/p/1"
)

// costOpCap bounds each cell's load whatever its duration: far more than a
// loopback fleet carries in a minute, so only a broken contender failing
// at once meets it.
const costOpCap = 2_000_000

// tunnelBytes is what each op of the tunnel cell pulls through one
// tunnel, and tunnelLimit bounds that transfer.
const (
	tunnelBytes = 100 << 20
	tunnelLimit = 2 * time.Minute
)

// cellKind is what a cell's clients do.
type cellKind uint8

const (
	cellGET     cellKind = iota // absolute-form GETs over kept-alive connections
	cellConnect                 // tunnels: CONNECT, one exchange inside, close
	cellTunnel                  // tunnels, tunnelBytes pulled through each
)

// costCell is one measurement of LiveCost.
type costCell struct {
	name    string // for metrics: no spaces
	kind    cellKind
	clients int // in parallel, each on its own connection
}

// costCells are LiveCost's cells, in the order each contender runs them.
var costCells = []costCell{
	{"get1", cellGET, 1},
	{"get16", cellGET, 16},
	{"get64", cellGET, 64},
	{"connect16", cellConnect, 16},
	{"tunnel", cellTunnel, 1},
}

// label is the cell in the report.
func (c costCell) label() string {
	switch c.kind {
	case cellConnect:
		return fmt.Sprintf("CONNECT + one GET inside, %d in parallel", c.clients)
	case cellTunnel:
		return fmt.Sprintf("%d MiB through one tunnel, one at a time", tunnelBytes>>20)
	}
	if c.clients == 1 {
		return "GET, 1 keep-alive client"
	}
	return fmt.Sprintf("GET, %d keep-alive clients", c.clients)
}

// cellResult is what one contender did in one cell, over every round.
type cellResult struct {
	ops       int             // requests, tunnels or transfers that succeeded
	failed    int             // those that did not
	firstErr  string          // why the first failure failed
	bytes     int64           // pulled through the tunnel cell's tunnels, by its ops that succeeded
	elapsed   time.Duration   // the loads' wall time
	latencies []time.Duration // of succeeded ops, sorted once merged
	cpu       time.Duration   // of the contender's process during the loads
	hasCPU    bool            // false for contenders in the benchmark's process
}

// merge adds another run of the same cell to r.
func (r *cellResult) merge(o cellResult) {
	r.ops += o.ops
	r.failed += o.failed
	if r.firstErr == "" {
		r.firstErr = o.firstErr
	}
	r.bytes += o.bytes
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	r.cpu += o.cpu
	r.hasCPU = r.hasCPU || o.hasCPU
}

// rate is ops a second, or MiB a second for the tunnel cell.
func (r cellResult) rate(k cellKind) float64 {
	if k == cellTunnel {
		return ratio(float64(r.bytes)/(1<<20), r.elapsed.Seconds())
	}
	return ratio(float64(r.ops), r.elapsed.Seconds())
}

// cpuPerOp is the contender's CPU per succeeded op; 0 without CPU.
func (r cellResult) cpuPerOp() time.Duration {
	if !r.hasCPU || r.ops == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ops)
}

// costContenders are LiveCost's: the clients straight to the exits in
// client-side rotation (the baseline), HAProxy in roundrobin (the exits
// are all alike), the least a Go proxy on net/http does (floorproxy,
// built into dir), and the gateway's quick start.
func costContenders(switchyardBinary func() (string, error), dir string) []contender {
	direct := roundRobinContender()
	direct.name = costDirect
	floor := goFloorContender(moduleBinary("./internal/livebench/floorproxy", filepath.Join(dir, "floorproxy")))
	return []contender{direct, haproxyContender("roundrobin"), floor, switchyardContender(costSwitchyard, switchyardBinary, false)}
}

// goFloorContender runs floorproxy over the fleet: what a forward proxy
// written in Go on net/http costs before it does anything of its own.
func goFloorContender(binary func() (string, error)) contender {
	return contender{name: costGoFloor, missing: always, start: func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error) {
		bin, listen, err := binaryAndAddr(binary)
		if err != nil {
			return nil, err
		}
		exits := make([]string, len(f.urls()))
		for i, u := range f.urls() {
			exits[i] = u.Host
		}
		return runGateway(ctx, gatewayProcess{
			bin: bin, args: []string{"-listen", listen, "-exits", strings.Join(exits, ",")}, log: filepath.Join(dir, "floorproxy.log"),
			listen: listen, ready: dialable(listen), roots: f.roots,
		}, opts.Workers)
	}}
}

// costReport is LiveCost's measurements: each contender's cells.
type costReport struct {
	opts    Options
	order   []string                // contenders that ran, in the order given
	cells   map[string][]cellResult // by contender, one per costCells
	notes   map[string][]string     // by contender, of its last run
	skipped []string                // contenders that could not run here, and why
}

// runCost runs every wanted contender's cells, in Options.Rounds rounds of
// Duration/Rounds per cell, the order rotating between rounds.
func runCost(ctx context.Context, cs []contender, opts Options, dir string) (costReport, error) {
	run, skipped := runnable(cs, opts)
	rep := costReport{opts: opts, skipped: skipped, cells: make(map[string][]cellResult), notes: make(map[string][]string)}
	for _, c := range run {
		rep.order = append(rep.order, c.name)
		rep.cells[c.name] = make([]cellResult, len(costCells))
	}
	d := opts.Duration / time.Duration(opts.Rounds)
	err := interleave(opts.Rounds, len(run), func(i int) error {
		res, notes, err := measureCost(ctx, run[i], opts, d, dir)
		if err != nil {
			return err
		}
		for k := range res {
			rep.cells[run[i].name][k].merge(res[k])
		}
		rep.notes[run[i].name] = notes
		return nil
	})
	for _, cells := range rep.cells {
		for k := range cells {
			slices.Sort(cells[k].latencies)
		}
	}
	return rep, err
}

// measureCost starts c over a fresh fleet of costExits fast exits and
// runs every cell through it, each for d.
func measureCost(ctx context.Context, c contender, opts Options, d time.Duration, dir string) ([]cellResult, []string, error) {
	cdir, err := os.MkdirTemp(dir, "cost-"+c.name+"-")
	if err != nil {
		return nil, nil, err
	}
	f, err := startFleet(copies(costExits, Shape{}), siteNames(), opts.Seed, opts.CaptchaMarker, "")
	if err != nil {
		return nil, nil, err
	}
	defer f.close()
	s, err := c.start(ctx, f, opts, cdir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", c.name, err)
	}
	defer s.stop()
	out := make([]cellResult, len(costCells))
	for k, cell := range costCells {
		var res cellResult
		cpu, has, err := s.cpuDuring(func() { res = runCell(ctx, cell, s.proxies, d, opts.Timeout) })
		if err != nil {
			return nil, nil, fmt.Errorf("%s: cpu: %w", c.name, err)
		}
		res.cpu, res.hasCPU = cpu, has
		out[k] = res
	}
	var notes []string
	if s.notes != nil {
		notes = s.notes(ctx)
	}
	return out, notes, nil
}

// runCell runs one cell through proxies, taken in rotation, for d, each
// op cut after timeout (a bulk transfer after tunnelLimit).
func runCell(ctx context.Context, cell costCell, proxies []*url.URL, d, timeout time.Duration) cellResult {
	var next atomic.Uint64
	proxy := func() string { return proxies[(next.Add(1)-1)%uint64(len(proxies))].Host }
	switch cell.kind {
	case cellTunnel:
		return drive(ctx, d, cell.clients, func(ctx context.Context) (int64, error) {
			return pullThrough(ctx, proxy(), tunnelBytes)
		})
	case cellConnect:
		return drive(ctx, d, cell.clients, func(ctx context.Context) (int64, error) {
			return 0, exchangeInTunnel(ctx, proxy(), timeout)
		})
	}
	clients := make([]*http.Client, len(proxies))
	for i, u := range proxies {
		clients[i] = proxyClient(u, cell.clients, nil)
	}
	defer closeClients(clients...)
	rr := &roundRobin{clients: clients}
	return drive(ctx, d, cell.clients, func(ctx context.Context) (int64, error) {
		c, _, _ := rr.route(ctx, costSite, nil)
		return 0, getPage(ctx, c, timeout)
	})
}

// drive runs op back to back on workers goroutines, starting ops for d
// or until costOpCap have started, and returns once the last has ended.
// Every op started is counted, and the time until it ended: cutting ops
// at the deadline would leave the CPU they used with no op to charge it
// to (a tenth of a 100 MiB transfer is a lot), and ops failing at once
// in the moment a deadline has passed and a context has not yet noticed.
// An op returns the bytes it carried.
func drive(ctx context.Context, d time.Duration, workers int, op func(context.Context) (int64, error)) cellResult {
	start := time.Now()
	end := start.Add(d)
	var started atomic.Int64
	parts := make([]cellResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := &parts[w]
			for ctx.Err() == nil && time.Now().Before(end) && started.Add(1) <= costOpCap {
				t0 := time.Now()
				n, err := op(ctx)
				if err != nil {
					p.failed++
					if p.firstErr == "" {
						p.firstErr = err.Error()
					}
					continue
				}
				p.ops++
				p.bytes += n
				p.latencies = append(p.latencies, time.Since(t0))
			}
		})
	}
	wg.Wait()
	total := cellResult{elapsed: time.Since(start)}
	for _, p := range parts {
		total.merge(p)
	}
	return total
}

// costTag marks the page every op asks for.
var costTag = []byte(pageTag(costSite, costPath))

// getPage GETs the cost page in absolute form through c.
func getPage(ctx context.Context, c *http.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+costSite+costPath, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return checkPage(resp)
}

// checkPage reads and closes resp, and says whether it is the cost page.
func checkPage(resp *http.Response) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	case !bytes.Contains(body, costTag):
		return errors.New("not the page asked for")
	}
	return nil
}

// openTunnel asks proxy for a tunnel to the cost site, every read and
// write on it to end by deadline.
func openTunnel(ctx context.Context, proxy string, deadline time.Time) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(deadline)
	target := costSite + ":80"
	br := bufio.NewReader(c)
	_, err = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New("CONNECT: " + resp.Status)
		}
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, br, nil
}

// getInTunnel sends a GET of path to the cost site down a tunnel and
// reads the answer's head.
func getInTunnel(c net.Conn, br *bufio.Reader, path string) (*http.Response, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+costSite+"\r\nConnection: close\r\n\r\n"); err != nil {
		return nil, err
	}
	return http.ReadResponse(br, nil)
}

// exchangeInTunnel is one op of the CONNECT cell: a tunnel, the cost page
// through it, and the tunnel closed.
func exchangeInTunnel(ctx context.Context, proxy string, timeout time.Duration) error {
	c, br, err := openTunnel(ctx, proxy, time.Now().Add(timeout))
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := getInTunnel(c, br, costPath)
	if err != nil {
		return err
	}
	return checkPage(resp)
}

// pullThrough is one op of the tunnel cell: n bytes from the site
// through a tunnel of proxy, timed from the dial to the last byte.
func pullThrough(ctx context.Context, proxy string, n int64) (int64, error) {
	c, br, err := openTunnel(ctx, proxy, time.Now().Add(tunnelLimit))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	resp, err := getInTunnel(c, br, bulkPrefix+strconv.FormatInt(n, 10))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, errors.New(resp.Status)
	}
	got, err := drain(resp.Body)
	if err == nil && got != n {
		err = fmt.Errorf("%d of %d bytes", got, n)
	}
	return got, err
}

// drain reads r to its end in large reads (io.Discard's own would take
// 8 KiB at a time, the client's cost then weighing on the transfer).
func drain(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

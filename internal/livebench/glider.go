package livebench

import (
	"context"
	"net/url"
	"os/exec"
	"path/filepath"

	"github.com/switchyard/switchyard/internal/freeport"
)

// gliderContender runs glider with latency-based high availability over
// the exits. Each exit is its own -forward flag: glider reads commas
// inside one flag as a chain of proxies, not a pool. Its health check
// fetches a page of the first site through each exit (glider's default
// checks a public site, which the exits refuse).
func gliderContender() contender {
	return contender{name: "glider", missing: installed("glider"), start: func(ctx context.Context, f *fleet, opts Options, dir string) (*session, error) {
		bin, err := exec.LookPath("glider")
		if err != nil {
			return nil, err
		}
		listen, err := freeport.Addr()
		if err != nil {
			return nil, err
		}
		return runGateway(ctx, gatewayProcess{
			bin: bin, args: gliderArgs(listen, f.urls(), "http://"+siteMix[0].host+"/#expect=200"),
			log: filepath.Join(dir, "glider.log"), listen: listen, ready: dialable(listen), roots: f.roots,
		}, opts.Workers)
	}}
}

// gliderArgs are glider's flags for an HTTP proxy on listen over exits.
func gliderArgs(listen string, exits []*url.URL, check string) []string {
	args := []string{"-listen", "http://" + listen, "-strategy", "lha", "-check", check}
	for _, u := range exits {
		args = append(args, "-forward", u.String())
	}
	return args
}

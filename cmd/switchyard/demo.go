package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/switchyard/switchyard/internal/demo"
)

const demoUsage = `usage: switchyard demo [--listen ADDR] [--admin ADDR]

Runs a live tour on this machine: a fake site, six fake upstream proxies
(3 healthy, 1 refused, 1 answering 407, 1 that blocks "localhost"), the
gateway with its admin listener, and ~15 requests/s through it. Prints
where to look, then every route's state every 5 s, until interrupted.

flags:
`

// demoCmd runs the demo until ctx ends; it returns the exit code.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8080", "address of the forward proxy")
	adminAddr := fs.String("admin", "127.0.0.1:9090", "address of the admin listener")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if err := demo.Run(ctx, stdout, demo.Options{Listen: *listen, Admin: *adminAddr}); err != nil {
		fmt.Fprintln(stderr, "switchyard demo:", err)
		return 1
	}
	return 0
}

// Command switchyard is the Switchyard egress gateway: `serve` runs the
// forward proxy, `demo` a live tour of it, `bench` the simulator that
// measures its routing.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: switchyard <command> [flags]

commands:
  serve         run the forward proxy over a proxy list (switchyard serve -h)
  check-config  validate a config file and print it in effect, secrets redacted
  demo          a live tour: fake proxies, the gateway and light load (switchyard demo -h)
  bench         compare the engine with other policies on simulated pools (switchyard bench -h)
  version       print the version
`

var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		ctx, stop := signalContext()
		code := serve(ctx, os.Args[2:], os.Stderr, hangups())
		stop()
		os.Exit(code)
	case "check-config":
		os.Exit(checkConfig(os.Args[2:], os.Stdout, os.Stderr))
	case "demo":
		ctx, stop := signalContext()
		code := demoCmd(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "bench":
		os.Exit(bench(os.Args[2:], os.Stdout, os.Stderr))
	case "version":
		fmt.Println("switchyard", version)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "switchyard: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

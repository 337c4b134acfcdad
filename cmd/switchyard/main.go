// Command switchyard is the Switchyard egress gateway. This build carries
// the routing engine and its simulator; the forward proxy (serve) arrives
// with its issue.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: switchyard <command> [flags]

commands:
  bench     compare the engine with other policies on simulated pools (switchyard bench -h)
  version   print the version
`

var version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
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

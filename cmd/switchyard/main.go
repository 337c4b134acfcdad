// Command switchyard is the Switchyard egress gateway. This build carries
// the routing engine and its simulator; the forward proxy (serve) arrives
// with its issue.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/switchyard/switchyard/internal/demo"
)

const usage = `usage: switchyard <command> [flags]

commands:
  bench     compare the engine with other policies on simulated pools (switchyard bench -h)
  demo      route a simulated pool with the engine and with round-robin, side by side
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
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ExitOnError)
		tasks := fs.Int("tasks", 20000, "tasks to send")
		seed := fs.Uint64("seed", 1, "random seed (same seed, same run)")
		fs.Parse(os.Args[2:])
		if *tasks < 1 {
			fmt.Fprintln(os.Stderr, "switchyard demo: -tasks must be at least 1")
			os.Exit(2)
		}
		if err := demo.Print(os.Stdout, *tasks, *seed); err != nil {
			fmt.Fprintln(os.Stderr, "switchyard demo:", err)
			os.Exit(1)
		}
	case "version":
		fmt.Println("switchyard", version)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "switchyard: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

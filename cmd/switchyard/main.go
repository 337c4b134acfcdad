// Command switchyard is the Switchyard egress gateway: `serve` runs the
// forward proxy and the fetch API, `fetch` calls that API, `demo` a live
// tour of it, `bench` the simulator that measures its routing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
)

const usage = `usage: switchyard <command> [flags]

commands:
  serve         run the forward proxy over a proxy list (switchyard serve -h)
  ca            print the local CA that serve --mitm signs with, and how to trust it (switchyard ca -h)
  check-config  validate a config file and print it in effect, secrets redacted
  fetch         fetch a URL through a running gateway's API and print its trace (switchyard fetch -h)
  download      download a large file through a running gateway's API, resumably (switchyard download -h)
  demo          a live tour: fake proxies, the gateway and light load (switchyard demo -h)
  bench         compare the engine with other policies on simulated pools (switchyard bench -h)
  replay        replay what a gateway recorded (serve --record) under other engine settings (switchyard replay -h)
  version       print the module version and VCS revision (also --version)
`

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
	case "ca":
		os.Exit(caCmd(os.Args[2:], os.Stdout, os.Stderr))
	case "check-config":
		os.Exit(checkConfig(os.Args[2:], os.Stdout, os.Stderr))
	case "demo":
		ctx, stop := signalContext()
		code := demoCmd(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "bench":
		os.Exit(bench(os.Args[2:], os.Stdout, os.Stderr))
	case "replay":
		os.Exit(replayCmd(os.Args[2:], os.Stdout, os.Stderr))
	case "fetch":
		ctx, stop := signalContext()
		code := fetchCmd(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "download":
		ctx, stop := signalContext()
		code := downloadCmd(ctx, os.Args[2:], os.Stderr, isTerminal(os.Stderr))
		stop()
		os.Exit(code)
	case "version", "--version", "-version":
		fmt.Println(versionLine(debug.ReadBuildInfo()))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "switchyard: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

// parseFlags parses a command's flags. done says the command ends there,
// with code: 0 when help was asked for (-h, --help), 2 for a bad flag (the
// flag package has printed why, and the usage).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	case err != nil:
		return 2, true
	}
	return 0, false
}

// versionLine is what `switchyard version` prints, from the build
// information Go records in the binary: the module's version (the tag
// under go install …@version, a pseudo-version or "(devel)" from a work
// tree), the VCS revision built, marked when the tree had uncommitted
// changes, and the Go version.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "switchyard: no build information in this binary"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	line := "switchyard " + v
	var rev, modified string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			modified = " (modified)"
		}
	}
	if rev != "" {
		line += " revision " + rev + modified
	}
	return line + " " + info.GoVersion
}

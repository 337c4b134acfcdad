package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/record"
)

const replayUsage = `usage: switchyard replay --events FILE [--config FILE] [--limit N] [--json]

Feeds the outcomes a gateway recorded (serve --record FILE) to a fresh
engine with the [engine] settings of --config (the defaults without one)
and prints the decisions that come out differently: which route, or
route×target pair, is in another state after the same evidence. Try new
thresholds, cooldowns or rules on what your exits really did before
deploying them. Only the [engine] section of the config is read. Exits 0
when nothing differs, 1 when something does.

flags:
`

// replayCmd runs `switchyard replay`; it returns the exit code.
func replayCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, replayUsage)
		fs.PrintDefaults()
	}
	events := fs.String("events", "", "recording written by serve --record (its .1 file is read first when there is one)")
	path := fs.String("config", "", "TOML config whose [engine] section to replay under (default: the defaults)")
	limit := fs.Int("limit", 50, "differences to print (0: all)")
	asJSON := fs.Bool("json", false, "print the whole report as JSON")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *events == "" || fs.NArg() > 0 || *limit < 0 {
		fs.Usage()
		return 2
	}
	// The routes a replay meets are the recording's: the config's own
	// list is neither needed nor read.
	src := config.Source{Path: *path, Flags: []config.Setting{{Key: "routes.inline", Value: "direct", Flag: "(replay)"}}}
	cfg, err := config.Load(src)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard replay:", err)
		return 2
	}
	ecfg, err := cfg.Engine.EngineConfig()
	if err != nil {
		fmt.Fprintln(stderr, "switchyard replay:", err)
		return 2
	}
	recorded, err := record.Load(*events)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard replay:", err)
		return 2
	}
	rep, err := engine.Replay(recorded, ecfg)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard replay:", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "switchyard replay:", err)
			return 2
		}
	} else {
		writeReplay(stdout, rep, *limit)
	}
	if len(rep.Diffs) > 0 {
		return 1
	}
	return 0
}

// writeReplay prints rep readably, at most limit differences (0: all).
func writeReplay(w io.Writer, rep engine.ReplayReport, limit int) {
	fmt.Fprintf(w, "%d outcomes replayed, %d decisions compared, %d differ\n", rep.Outcomes, rep.Decisions, len(rep.Diffs))
	if len(rep.Diffs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\ntime\troute\ttarget\tafter\trecorded\treplayed")
	for i, d := range rep.Diffs {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "… %d more (--limit 0 prints them all)\n", len(rep.Diffs)-limit)
			break
		}
		target := d.Target
		if target == "" {
			target = "(route-wide)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Time.UTC().Format(time.RFC3339Nano), d.Route, target, d.Class, d.Recorded, d.Replayed)
	}
	tw.Flush()
}

package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/internal/sim"
)

const benchUsage = `usage: switchyard bench [flags]

Runs simulated exit pools through the engine and the policies it is
compared with, on identical load, and prints what each achieved.

flags:
`

// bench runs the simulator subcommand and returns the exit code.
func bench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	scenarios := fs.String("scenario", "", "comma-separated built-in scenario names or .toml files (default: every built-in but large)")
	policies := fs.String("policies", "", "comma-separated policies (default: "+strings.Join(sim.DefaultPolicies, ",")+")")
	sweep := fs.String("sweep", "", "vary one engine parameter, e.g. gamma=1,2,3")
	asJSON := fs.Bool("json", false, "print one JSON object per policy and scenario instead of a table")
	plot := fs.String("plot", "", "write an SVG plot per scenario to this file (scenario name added when several)")
	tasks := fs.Int("tasks", 0, "override each scenario's task count")
	duration := fs.Duration("duration", 0, "override each scenario's simulated duration, e.g. 2m")
	seeds := fs.Int("seeds", 1, "run each scenario with this many seeds, its own and the ones after it, and print the mean")
	list := fs.Bool("list", false, "list built-in scenarios and policies")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *list {
		fmt.Fprintln(stdout, "scenarios:", strings.Join(sim.BuiltinNames(), ", "))
		fmt.Fprintln(stdout, "policies: ", strings.Join(sim.PolicyNames(), ", "))
		return 0
	}
	opts := sim.Options{}
	if *policies != "" {
		opts.Policies = strings.Split(*policies, ",")
	}
	if *sweep != "" {
		sw, err := sim.ParseSweep(*sweep)
		if err != nil {
			fmt.Fprintln(stderr, "switchyard bench:", err)
			return 2
		}
		opts.Sweep = sw
	}
	if *tasks < 0 || *duration < 0 {
		fmt.Fprintln(stderr, "switchyard bench: -tasks and -duration must not be negative")
		return 2
	}
	if *seeds < 1 {
		fmt.Fprintln(stderr, "switchyard bench: -seeds must be at least 1")
		return 2
	}
	if *seeds > 1 && *plot != "" {
		fmt.Fprintln(stderr, "switchyard bench: -plot draws one run: use it with one seed")
		return 2
	}
	scs, err := loadScenarios(*scenarios)
	if err != nil {
		fmt.Fprintln(stderr, "switchyard bench:", err)
		return 2
	}
	for _, sc := range scs {
		if *tasks > 0 {
			sc.Tasks = *tasks
		}
		if *duration > 0 {
			sc.Duration = *duration
		}
		label := "bench " + sc.Name
		progress := sim.NewProgress(stderr, label, sc.ProgressSteps()*countPolicies(opts)**seeds, nil)
		opts.Progress = progress.Add
		summaries, err := sim.BenchSeeds(sc, *seeds, opts)
		progress.Finish()
		if err != nil {
			fmt.Fprintln(stderr, "switchyard bench:", err)
			return 1
		}
		if *asJSON {
			err = sim.WriteJSON(stdout, summaries)
		} else {
			err = sim.WriteTable(stdout, summaries)
		}
		if err == nil && *plot != "" {
			err = writePlot(plotPath(*plot, sc.Name, len(scs)), sc.Name, summaries)
		}
		if err != nil {
			fmt.Fprintln(stderr, "switchyard bench:", err)
			return 1
		}
	}
	return 0
}

func countPolicies(opts sim.Options) int {
	n := len(sim.DefaultPolicies)
	if opts.Policies != nil {
		n = len(opts.Policies)
	}
	if opts.Sweep != nil {
		n += len(opts.Sweep.Values)
	}
	return n
}

// loadScenarios resolves the -scenario list: built-in names or files.
func loadScenarios(list string) ([]*sim.Scenario, error) {
	var names []string
	if list == "" {
		for _, n := range sim.BuiltinNames() {
			if n != "large" {
				names = append(names, n)
			}
		}
	} else {
		names = strings.Split(list, ",")
	}
	var out []*sim.Scenario
	for _, n := range names {
		var sc *sim.Scenario
		var err error
		if strings.HasSuffix(n, ".toml") {
			sc, err = sim.LoadScenario(n)
		} else {
			sc, err = sim.Builtin(n)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// plotPath names the plot of one scenario among n.
func plotPath(path, scenario string, n int) string {
	if n == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + scenario + ext
}

func writePlot(path, scenario string, summaries []sim.Summary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := sim.WritePlot(f, scenario, summaries); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

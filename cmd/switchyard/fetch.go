package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/switchyard/switchyard/client"
)

const fetchUsage = `usage: switchyard fetch URL [-H 'Name: value']... [--session ID] [--label k=v]...
                       [--expect-status CODE,...] [--must-match RE] [--must-not-match RE]
                       [-X METHOD] [--data BODY] [--strict] [--attempts N] [--timeout D]
                       [--api ADDR] [--json]

Asks a running gateway's fetch API (serve --api) to fetch URL through its
routes, then prints the body on stdout and the trace, every attempt with
its route, class, status and time, on stderr; --json prints the whole
answer as JSON on stdout instead. The validators make an answer that
fails them content_invalid for that route, tried again elsewhere.
SWITCHYARD_API_TOKEN="name:password" authenticates as a gateway user.
Exits 0 on a valid answer, 1 otherwise.

flags:
`

// stringList is a flag given any number of times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// apiFlags are the flags of the commands that call a gateway's fetch API
// (fetch, download): its address, and a request's headers, labels and
// session.
type apiFlags struct {
	fs              *flag.FlagSet
	api, session    *string
	headers, labels stringList
}

// newAPIFlags is a flag set for the command cmd whose usage text is usage,
// with the fetch API's flags.
func newAPIFlags(cmd, usage string, stderr io.Writer) *apiFlags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	f := &apiFlags{fs: fs}
	fs.Var(&f.headers, "H", "request header 'Name: value' (repeatable)")
	fs.Var(&f.labels, "label", "route constraint key=value (repeatable)")
	f.api = fs.String("api", "127.0.0.1:9091", "address of the gateway's fetch API")
	f.session = fs.String("session", "", "sticky session id")
	return f
}

// callOptions adds the request's session, headers and labels to opts; a
// malformed header or label is said on stderr, and ok is false.
func (f *apiFlags) callOptions(stderr io.Writer, opts ...client.CallOption) (_ []client.CallOption, ok bool) {
	opts = append(opts, client.Session(*f.session))
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			fmt.Fprintf(stderr, "switchyard %s: -H %q: want 'Name: value'\n", f.fs.Name(), h)
			return nil, false
		}
		opts = append(opts, client.Header(strings.TrimSpace(name), strings.TrimSpace(value)))
	}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			fmt.Fprintf(stderr, "switchyard %s: --label %q: want key=value\n", f.fs.Name(), l)
			return nil, false
		}
		opts = append(opts, client.Label(k, v))
	}
	return opts, true
}

// client is a client of the fetch API at --api, authenticated as
// SWITCHYARD_API_TOKEN's user ("name:password") when that is set.
func (f *apiFlags) client() (*client.Client, error) {
	var opts []client.Option
	if token := os.Getenv("SWITCHYARD_API_TOKEN"); token != "" {
		opts = append(opts, client.WithToken(token))
	}
	return client.New(*f.api, opts...)
}

// fetchCmd runs `switchyard fetch`; it returns the exit code.
func fetchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := newAPIFlags("fetch", fetchUsage, stderr)
	fs := flags.fs
	method := fs.String("X", "GET", "request method")
	data := fs.String("data", "", "request body")
	expect := fs.String("expect-status", "", "statuses that are answers, comma-separated (default 2xx)")
	mustMatch := fs.String("must-match", "", "regexp the body must match")
	mustNotMatch := fs.String("must-not-match", "", "regexp the body must not match (a captcha page)")
	strict := fs.Bool("strict", false, "fail rather than go through the least-bad route")
	attempts := fs.Int("attempts", 0, "attempts at most (default: the gateway's retry.max_attempts)")
	timeout := fs.Duration("timeout", 0, "all attempts together at most (default: the gateway's retry.request_timeout)")
	asJSON := fs.Bool("json", false, "print the answer and trace as JSON on stdout")
	url, code, done := parseInterleaved(fs, args)
	if done {
		return code
	}
	opts, ok := flags.callOptions(stderr, client.Method(*method), client.MustMatch(*mustMatch),
		client.MustNotMatch(*mustNotMatch), client.Attempts(*attempts), client.Timeout(*timeout))
	if !ok {
		return 2
	}
	if *strict {
		opts = append(opts, client.Strict())
	}
	if *data != "" {
		opts = append(opts, client.Body([]byte(*data)))
	}
	if *expect != "" {
		for s := range strings.SplitSeq(*expect, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintf(stderr, "switchyard fetch: --expect-status %q: want status codes\n", *expect)
				return 2
			}
			opts = append(opts, client.ExpectStatus(n))
		}
	}
	c, err := flags.client()
	if err != nil {
		fmt.Fprintln(stderr, "switchyard fetch:", err)
		return 1
	}
	defer c.Close()
	resp, err := c.Fetch(ctx, url, opts...)
	if *asJSON {
		printJSON(stdout, resp, err)
	} else {
		if resp != nil {
			stdout.Write(resp.Body)
			printTrace(stderr, resp)
		}
		if err != nil {
			fmt.Fprintln(stderr, "switchyard fetch:", err)
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

// parseInterleaved parses fs from args, which may put flags after the one
// positional argument as well as before it, and returns that argument.
func parseInterleaved(fs *flag.FlagSet, args []string) (arg string, code int, done bool) {
	var positional []string
	for {
		if code, done := parseFlags(fs, args); done {
			return "", code, true
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fs.Usage()
		return "", 2, true
	}
	return positional[0], 0, false
}

// printTrace writes the outcome and every attempt, one line each.
func printTrace(w io.Writer, resp *client.Response) {
	status := "no answer"
	if resp.Status != 0 {
		status = strconv.Itoa(resp.Status) + " " + http.StatusText(resp.Status)
	}
	cut := ""
	if resp.Truncated {
		cut = " (truncated)"
	}
	fmt.Fprintf(w, "%s, %d bytes%s, request %s, %d attempt(s)\n", status, len(resp.Body), cut, resp.Trace.RequestID, len(resp.Trace.Attempts))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, a := range resp.Trace.Attempts {
		// The last cell is not padded: the notes that most attempts lack
		// leave no trailing blanks.
		var notes []string
		if a.Hedge {
			notes = append(notes, "hedge")
		}
		if a.Detail != "" {
			notes = append(notes, "("+a.Detail+")")
		}
		fmt.Fprintf(tw, "  #%d\t+%s\t%s\t%s\t%d\t%s\t%dB\t%s\n", i+1, round(a.Start), a.Route, a.Class, a.Status, round(a.Latency), a.Bytes,
			strings.TrimSpace(a.Node+" "+strings.Join(notes, " ")))
	}
	tw.Flush()
}

// round is d to the millisecond, or microsecond under one.
func round(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// apiError is a client.Error as --json prints it.
type apiError struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// printJSON writes the answer, the trace and the error as one JSON object:
// the body as text when it is UTF-8, else in base64 under body_base64.
func printJSON(w io.Writer, resp *client.Response, err error) {
	type attempt struct {
		ID        string `json:"attempt_id"`
		Route     string `json:"route"`
		Class     string `json:"class"`
		Status    int    `json:"status"`
		LatencyMS int64  `json:"latency_ms"`
		Bytes     int64  `json:"bytes"`
		StartMS   int64  `json:"start_offset_ms"`
		Hedge     bool   `json:"hedge,omitempty"`
		Node      string `json:"node,omitempty"`
		Detail    string `json:"detail,omitempty"`
	}
	var out struct {
		Status     int                 `json:"status"`
		Headers    map[string][]string `json:"headers,omitempty"`
		Body       *string             `json:"body,omitempty"`
		BodyBase64 []byte              `json:"body_base64,omitempty"`
		Truncated  bool                `json:"body_truncated,omitempty"`
		RequestID  string              `json:"request_id,omitempty"`
		Attempts   []attempt           `json:"attempts"`
		Error      *apiError           `json:"error,omitempty"`
	}
	out.Attempts = []attempt{}
	if resp != nil {
		out.Status, out.Headers, out.Truncated, out.RequestID = resp.Status, resp.Header, resp.Truncated, resp.Trace.RequestID
		if utf8.Valid(resp.Body) {
			s := string(resp.Body)
			out.Body = &s
		} else {
			out.BodyBase64 = resp.Body
		}
		for _, a := range resp.Trace.Attempts {
			out.Attempts = append(out.Attempts, attempt{a.ID, a.Route, a.Class, a.Status, a.Latency.Milliseconds(), a.Bytes, a.Start.Milliseconds(), a.Hedge, a.Node, a.Detail})
		}
	}
	if err != nil {
		out.Error = &apiError{Code: "internal", Message: err.Error()}
		if ce, ok := errors.AsType[*client.Error](err); ok {
			out.Error = &apiError{Code: ce.Code, Message: ce.Message, RetryAfterMS: ce.RetryAfter.Milliseconds()}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

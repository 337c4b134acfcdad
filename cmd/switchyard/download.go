package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/switchyard/switchyard/client"
)

const downloadUsage = `usage: switchyard download URL -o FILE [--piece BYTES] [-H 'Name: value']... [--label k=v]...
                          [--session ID] [--api ADDR]

Downloads URL through a running gateway's fetch API (serve --api) into
FILE, in Range pieces each carried and retried by the gateway, resuming a
piece that fails from the last byte written, and verifying the length
and, where the server gives them, Content-MD5 and the SHA-256 digest. It
writes FILE.part and renames it once complete. A progress bar goes to
stderr on a terminal. SWITCHYARD_API_TOKEN="name:password" authenticates
as a gateway user.

flags:
`

// downloadCmd runs `switchyard download`; it returns the exit code.
func downloadCmd(ctx context.Context, args []string, stderr io.Writer, terminal bool) int {
	flags := newAPIFlags("download", downloadUsage, stderr)
	fs := flags.fs
	out := fs.String("o", "", "file to write (required)")
	piece := fs.Int64("piece", 8<<20, "bytes per piece, at most the gateway's fetch.max_response_bytes")
	url, code, done := parseInterleaved(fs, args)
	if done {
		return code
	}
	if *out == "" || *piece <= 0 {
		fs.Usage()
		return 2
	}
	fetch, ok := flags.callOptions(stderr)
	if !ok {
		return 2
	}
	c, err := flags.client()
	if err != nil {
		fmt.Fprintln(stderr, "switchyard download:", err)
		return 1
	}
	defer c.Close()
	bar := &progressBar{w: stderr, start: time.Now(), live: terminal}
	res, err := c.DownloadFile(ctx, url, *out, client.PieceSize(*piece), client.FetchOptions(fetch...), client.OnProgress(bar.show))
	bar.end()
	if err != nil {
		fmt.Fprintln(stderr, "switchyard download:", err)
		return 1
	}
	how := "in ranges"
	if !res.Ranges {
		how = "whole: the server does not answer Range requests"
	}
	fmt.Fprintf(stderr, "%s: %s %s, %d piece(s) resumed, %d restart(s), verified %s\n",
		*out, mib(res.Size), how, res.Resumed, res.Restarted, strings.Join(res.Verified, ", "))
	return 0
}

// progressBar draws a download's progress on one terminal line, redrawn
// in place; off a terminal it draws nothing.
type progressBar struct {
	w     io.Writer
	start time.Time
	live  bool
	drawn bool
}

func (p *progressBar) show(written, total int64) {
	if !p.live {
		return
	}
	const width = 30
	line := mib(written)
	if total > 0 {
		n := int(written * width / total)
		line = fmt.Sprintf("[%s%s] %3d%% %s of %s", strings.Repeat("=", n), strings.Repeat(" ", width-n), written*100/total, mib(written), mib(total))
	}
	if s := time.Since(p.start).Seconds(); s > 0 {
		line += fmt.Sprintf("  %.1f MiB/s", float64(written)/(1<<20)/s)
	}
	fmt.Fprintf(p.w, "\r%-80s", line)
	p.drawn = true
}

// end ends the bar's line.
func (p *progressBar) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// mib is n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

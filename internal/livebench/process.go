package livebench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyLimit bounds the wait for a started gateway to serve.
const readyLimit = 15 * time.Second

// process is a contender's subprocess (a gateway under test), in a
// process group of its own so that stopping it stops anything it started.
type process struct {
	// Immutable after startProcess.
	name string
	cmd  *exec.Cmd
	log  string        // path of its stdout and stderr
	done chan struct{} // closed once it has exited

	err error // why it exited; read after done
}

// startProcess runs path with args, output to logPath, in our environment
// less what subprocessEnv drops, plus env.
func startProcess(path string, args []string, logPath string, env ...string) (*process, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(subprocessEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	p := &process{name: path, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process group: SIGTERM, then SIGKILL after grace. It
// returns once the process has exited.
func (p *process) stop(grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the end of the process's log, for error messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// waitReady polls ready every 20 ms until it returns nil, the process
// exits, or limit passes: a bounded wait for a subprocess to serve.
func (p *process) waitReady(ctx context.Context, limit time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v): %s", p.name, p.err, p.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (%v): %s", p.name, limit, err, p.tail())
		case <-tick.C:
		}
	}
}

// cpuTime is the CPU the process has used so far, user and system, all
// threads: utime+stime of /proc/<pid>/stat.
func (p *process) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b, clockTicks())
}

// parseStatCPU reads utime+stime from a /proc/<pid>/stat line, in clock
// ticks of hz. The command name, in parentheses, may hold spaces; the
// fields after it start with the state (field 3), so utime (14) and stime
// (15) are the 12th and 13th.
func parseStatCPU(stat []byte, hz int64) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / time.Duration(hz), nil
}

// clockTicks is the kernel's USER_HZ, from the auxiliary vector's
// AT_CLKTCK (what sysconf(_SC_CLK_TCK) reads); 100 when unreadable.
var clockTicks = sync.OnceValue(func() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	for err == nil && len(b) >= 16 {
		key, val := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		if key == atClkTck && val > 0 {
			return int64(val)
		}
		b = b[16:]
	}
	return 100
})

// dialable reports whether something accepts TCP at addr: readiness of a
// subprocess without an HTTP health endpoint.
func dialable(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// subprocessEnv is the environment of a contender's process: ours without
// SWITCHYARD_* variables (the benchmark's own settings would be unknown
// config keys to the gateway, and a user's would change what is measured)
// nor proxy settings.
func subprocessEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "SWITCHYARD_"):
		case strings.EqualFold(k, "HTTP_PROXY"), strings.EqualFold(k, "HTTPS_PROXY"), strings.EqualFold(k, "NO_PROXY"), strings.EqualFold(k, "ALL_PROXY"):
		default:
			env = append(env, kv)
		}
	}
	return env
}

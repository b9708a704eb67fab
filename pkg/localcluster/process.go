package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Process is one child process of a local cluster: etcd, kube-apiserver,
// kube-controller-manager or a kollect-apiserver replica. It runs in its own process group (signals go
// to the whole group) and, on Linux, receives SIGKILL if the process that
// started it dies, so a panicking or killed test leaves nothing behind.
// Its stdout and stderr are appended to LogFile; every (re)start writes a
// header line with the command line first.
//
// A Process can be stopped, killed and restarted any number of times; its
// command line, ports and data directory stay the same.
type Process struct {
	name        string
	binary      string
	args        []string
	dir         string // working directory
	env         []string
	logPath     string
	port        int    // the main port it serves on
	url         string // base URL of that port
	stopTimeout time.Duration
	progress    io.Writer
	isEtcd      bool
	// ready returns nil once the process serves. It is polled until then.
	ready func(ctx context.Context) error

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{} // closed when the current incarnation has exited
	exitErr   error
	logOffset int64 // where the current incarnation's output starts
	stopping  bool  // a Stop or Kill sent the signal that ended it
}

// Name is the process' name in logs and progress lines ("etcd",
// "kube-apiserver", "kollect-apiserver", ...).
func (p *Process) Name() string { return p.name }

// Port is the loopback TCP port the process serves on (etcd: client port;
// the others: secure port).
func (p *Process) Port() int { return p.port }

// URL is the base URL of Port: http://127.0.0.1:<port> for etcd,
// https://127.0.0.1:<port> for the others.
func (p *Process) URL() string { return p.url }

// LogFile is the file the process' stdout and stderr are appended to.
func (p *Process) LogFile() string { return p.logPath }

// Args returns a copy of the command line arguments (without the binary).
func (p *Process) Args() []string { return slices.Clone(p.args) }

// Pid is the process id of the current incarnation, 0 before the first
// start. It stays set after the process exited.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the current incarnation has been started and has
// not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when the current incarnation exits (a closed channel if it
// never started). After a Restart, call Done again.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// ExitErr is how the last incarnation ended: nil while running, after a
// clean exit, or after Stop/Kill ended it; the *exec.ExitError otherwise
// (a crash, or a signal the harness did not send).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil
	}
	return p.exitErr
}

// start starts a new incarnation without waiting for readiness.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	if p.dir != "" {
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "\n=== %s: %s %s\n", time.Now().Format(time.RFC3339), p.binary, strings.Join(p.args, " "))

	cmd := exec.Command(p.binary, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout = logf // an *os.File: the child writes to it directly
	cmd.Stderr = logf
	cmd.SysProcAttr = childSysProcAttr()

	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		// Pdeathsig is delivered when the *thread* that forked the child
		// exits, not the process (see prctl(2)). The Go runtime may retire
		// an idle thread, so the fork happens on a thread locked to this
		// goroutine, which stays on it until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			logf.Close()
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== %s: %s exited: %v\n", time.Now().Format(time.RFC3339), p.name, exitString(err))
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done, p.exitErr, p.logOffset, p.stopping = cmd, done, nil, offset, false
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// startAndWait starts the process and waits until ready reports it serves,
// printing "starting <name>... ready in 1.2s" to the progress writer. On
// failure the process is killed and the error carries the end of its log.
func (p *Process) startAndWait(ctx context.Context) error {
	fmt.Fprintf(p.progress, "starting %s...", p.name)
	begin := time.Now()
	if err := p.start(); err != nil {
		fmt.Fprintln(p.progress, " failed")
		return err
	}
	if err := p.waitReady(ctx); err != nil {
		fmt.Fprintln(p.progress, " failed")
		_ = p.Kill()
		return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.logPath, p.logTail(40))
	}
	where := ""
	if p.url != "" {
		where = ", " + p.url
	}
	fmt.Fprintf(p.progress, " ready in %.1fs (pid %d%s)\n", time.Since(begin).Seconds(), p.Pid(), where)
	return nil
}

func (p *Process) waitReady(ctx context.Context) error {
	done := p.Done()
	var lastErr error
	for delay := 50 * time.Millisecond; ; delay = min(delay*2, time.Second) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lastErr = p.ready(pctx)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-done:
			p.mu.Lock()
			err := p.exitErr
			p.mu.Unlock()
			return fmt.Errorf("%s exited before it was ready: %s", p.name, exitString(err))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v)", p.name, context.Cause(ctx), lastErr)
		case <-time.After(delay):
		}
	}
}

// logTail returns up to the last n lines the current incarnation wrote.
func (p *Process) logTail(n int) string {
	p.mu.Lock()
	offset := p.logOffset
	p.mu.Unlock()
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const maxBytes = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size()-offset > maxBytes {
		offset = st.Size() - maxBytes
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err.Error()
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop sends SIGTERM to the process group and waits for the process to
// exit; after the stop timeout it sends SIGKILL. It returns nil once the
// process is gone, however it ended (see ExitErr for a crash before Stop).
// Stopping a process that is not running is a no-op.
func (p *Process) Stop() error { return p.stop(false) }

// Kill sends SIGKILL to the process group (kill -9: no graceful shutdown)
// and waits for the process to exit.
func (p *Process) Kill() error { return p.stop(true) }

func (p *Process) stop(kill bool) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if done == nil {
		p.mu.Unlock()
		return nil
	}
	select {
	case <-done:
		p.mu.Unlock()
		return nil
	default:
	}
	p.stopping = true
	p.mu.Unlock()

	pid := cmd.Process.Pid
	if !kill {
		_ = signalGroup(pid, sigTerm)
		select {
		case <-done:
			return nil
		case <-time.After(p.stopTimeout):
			fmt.Fprintf(p.progress, "%s did not stop within %s; sending SIGKILL\n", p.name, p.stopTimeout)
		}
	}
	_ = signalGroup(pid, sigKill)
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 30s after SIGKILL", p.name, pid)
	}
}

// Restart stops the process if it runs (SIGTERM, then SIGKILL after the
// stop timeout), starts it again with the same command line, ports and
// data, and waits until it is ready.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.startAndWait(ctx)
}

// Start starts a process that was stopped or killed, with the same command
// line, ports and data, and waits until it is ready.
func (p *Process) Start(ctx context.Context) error {
	if p.Running() {
		return errors.New(p.name + " is already running")
	}
	return p.startAndWait(ctx)
}

package expression

import (
	"bufio"
	"bytes"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/cel-go/cel"
	exprpb "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	"google.golang.org/protobuf/proto"
)

// CEL expressions are type-checked and their cost estimated in a child
// process, the checker, with its memory limited by the kernel and its time
// by a deadline. cel-go's checker bounds neither: eighteen reviews each
// found an expression that made it take seconds or gigabytes, two of them
// ending the server out of memory at admission, where a tenant who may
// create Profiles reaches it. The counts in cel.go refuse those found so
// far, with a message that says why; the checker process is what bounds
// the ones not found yet. The server only plans the checked expression,
// which is linear in its size.
//
// The checker is this same executable started again (/proc/self/exe) with
// checkerEnv set: package expression's init serves checks on stdin and
// stdout and exits, before the program's main runs.

const checkerEnv = "KOLLECT_CEL_CHECKER"

// skipCounts leaves out countBeforeCheck, so that tests show what the
// checker process bounds alone. The server never sets it; a checker reads
// it from skipCountsEnv, which only startChecker sets.
var skipCounts bool

const skipCountsEnv = "KOLLECT_CEL_CHECKER_SKIPS_COUNTS"

// Limits of one check. Variables so tests can lower them.
var (
	// checkerMemory is the checker's data limit (RLIMIT_DATA: its heap and
	// other private memory), the process's whole size once started.
	checkerMemory int64 = 384 << 20
	// checkCPU bounds the processor time of one check: a property of the
	// expression, whatever the machine's load. Ordinary expressions take
	// a millisecond; the largest the counts allow, tens.
	checkCPU = 2 * time.Second
	// checkWall bounds one check in time: past it the checker was starved
	// (it runs below the server's priority), which says nothing of the
	// expression.
	checkWall = 30 * time.Second
	// checkerWait bounds the wait for a free checker when all are busy.
	checkerWait = 10 * time.Second
)

// ErrCheckerUnavailable marks a CEL expression that could not be checked
// for reasons of the server's (no free checker, one that could not start
// or ended on its own): the same expression may be accepted later.
var ErrCheckerUnavailable = errors.New("the CEL checker is unavailable")

const (
	// maxCheckers is how many checks run at once: each may use a core
	// and checkerMemory until it is stopped.
	maxCheckers = 2
	// maxCheckedBytes bounds an answer: a checked expression of maxNodes
	// nodes and their types is far smaller.
	maxCheckedBytes = 8 << 20
	// maxRequestBytes bounds a request: paths are shorter (MaxPathLength).
	maxRequestBytes = 1 << 20
)

// Answer kinds, the first byte of an answer.
const (
	answerChecked byte = iota // a marshalled exprpb.CheckedExpr
	answerRefused             // why the expression is invalid
	answerReady               // the checker has started: its first answer
)

func init() {
	limit := os.Getenv(checkerEnv)
	if limit == "" {
		return
	}
	skipCounts = os.Getenv(skipCountsEnv) == "1"
	os.Exit(serveChecks(limit, os.Stdin, os.Stdout))
}

// serveChecks is the checker's main: it limits its own memory, then
// answers requests until stdin closes (the server stopped).
func serveChecks(limit string, in io.Reader, out io.Writer) int {
	memory, err := strconv.ParseInt(limit, 10, 64)
	if err != nil || memory <= 0 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a memory limit in bytes\n", checkerEnv, limit)
		return 2
	}
	if err := limitProcess(uint64(memory)); err != nil {
		fmt.Fprintf(os.Stderr, "limiting the checker: %v\n", err)
		return 2
	}
	// Collect harder near the limit, so that an expression refused for
	// memory needs it live, not merely allocated.
	debug.SetMemoryLimit(memory * 3 / 4)
	r, w := bufio.NewReader(in), bufio.NewWriter(out)
	if _, err := celEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "the CEL environment is broken: %v\n", err)
		return 2
	}
	if err := writeFrame(w, answerReady, nil); err != nil {
		return 2
	}
	for {
		expr, err := readFrame(r, maxRequestBytes+1)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "reading a request: %v\n", err)
			return 2
		}
		kind, body := checkAnswer(string(expr[1:])) // after the request's kind
		if err := writeFrame(w, kind, body); err != nil {
			fmt.Fprintf(os.Stderr, "writing an answer: %v\n", err)
			return 2
		}
	}
}

// checkAnswer checks one expression, in the checker.
func checkAnswer(expr string) (byte, []byte) {
	ast, err := checkCEL(expr)
	if err != nil {
		return answerRefused, []byte(err.Error())
	}
	checked, err := cel.AstToCheckedExpr(ast)
	if err == nil {
		var body []byte
		if body, err = proto.Marshal(checked); err == nil {
			if len(body) >= maxCheckedBytes {
				return answerRefused, fmt.Appendf(nil, "the CEL expression's checked form is larger than %d MiB: fewer operations or nested values", maxCheckedBytes>>20)
			}
			return answerChecked, body
		}
	}
	return answerRefused, fmt.Appendf(nil, "the checked CEL expression cannot be encoded: %v", err)
}

// checkInChild type-checks expr in a checker and returns its checked form.
// A refusal is a short sentence fit for a validation message. Answers are
// kept by expression (answers): a Profile is compiled at admission, then
// by the collector of each of its Targets, and a tenant repeating an
// expression the checker refused costs it nothing more.
func checkInChild(expr string) (*cel.Ast, error) {
	if len(expr) > maxRequestBytes {
		return nil, fmt.Errorf("the CEL expression is longer than %d bytes", maxRequestBytes)
	}
	a, ok := answers.get(expr)
	if !ok {
		var err error
		if a, err = askChecker(expr); errors.Is(err, ErrCheckerUnavailable) {
			return nil, err
		} else if err != nil {
			a = answer{kind: answerRefused, body: []byte(err.Error())} // past a limit
		}
		answers.add(expr, a)
	}
	if a.kind == answerRefused {
		return nil, errors.New(string(a.body))
	}
	var checked exprpb.CheckedExpr
	if err := proto.Unmarshal(a.body, &checked); err != nil {
		return nil, fmt.Errorf("the checked CEL expression cannot be decoded: %v", err)
	}
	return cel.CheckedExprToAst(&checked), nil
}

// askChecker gets a checker's answer for expr; an error is the server's
// (ErrCheckerUnavailable) or the expression's limits.
func askChecker(expr string) (answer, error) {
	c, err := checkers.acquire(false)
	if err != nil {
		return answer{}, err
	}
	a, err := c.check(expr)
	if errors.Is(err, ErrCheckerUnavailable) && c.reused {
		// An idle checker may have ended for reasons of its own (the
		// kernel's OOM killer, which may have ended the others too):
		// that says nothing of this expression, which a new one checks.
		checkers.release(c, false)
		if c, err = checkers.acquire(true); err != nil {
			return answer{}, err
		}
		a, err = c.check(expr)
	}
	// A checker that grew large keeps its memory while idle, and the peak
	// it reached would be blamed on the next check that fails.
	checkers.release(c, err == nil && residentPeak(c.cmd.Process.Pid) < checkerMemory/4)
	return a, err
}

// answer is a checker's answer: its kind and body.
type answer struct {
	kind byte
	body []byte
}

// answers keeps the latest answers, up to maxAnswerBytes of them.
var answers = &answerCache{index: map[string]*list.Element{}}

const (
	maxAnswerBytes = 32 << 20
	// maxCachedAnswer leaves out the few largest answers, so that the
	// cache holds many.
	maxCachedAnswer = 1 << 20
)

type answerCache struct {
	mu    sync.Mutex
	order list.List // of *cachedAnswer, the most recent first
	index map[string]*list.Element
	bytes int
}

type cachedAnswer struct {
	expr string
	answer
}

func (c *answerCache) get(expr string) (answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.index[expr]
	if !ok {
		return answer{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedAnswer).answer, true
}

// answerOverhead is what an entry costs besides its bytes: its list
// element, map entry and headers (found by review, helper 63: 32 MiB of
// tiny entries took 144 MiB).
const answerOverhead = 200

func (c *answerCache) add(expr string, a answer) {
	size := len(expr) + len(a.body) + answerOverhead
	if size > maxCachedAnswer {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[expr]; ok {
		return
	}
	c.index[expr] = c.order.PushFront(&cachedAnswer{expr: expr, answer: a})
	c.bytes += size
	for c.bytes > maxAnswerBytes {
		old := c.order.Remove(c.order.Back()).(*cachedAnswer)
		delete(c.index, old.expr)
		c.bytes -= len(old.expr) + len(old.body) + answerOverhead
	}
}

// checkerPool runs at most maxCheckers checks at once and keeps the
// checkers that finished theirs for the next, for checkerIdle: each holds
// about 50 MB.
type checkerPool struct {
	slots chan struct{} // one per check running
	mu    sync.Mutex
	idle  []*checkProcess // the most recently used last
}

var checkers = &checkerPool{slots: make(chan struct{}, maxCheckers)}

// checkerIdle is how long an unused checker is kept.
const checkerIdle = time.Minute

// acquire takes a slot and an idle checker, or a new one when there is
// none or fresh is set.
func (p *checkerPool) acquire(fresh bool) (*checkProcess, error) {
	select {
	case p.slots <- struct{}{}:
	case <-time.After(checkerWait):
		return nil, fmt.Errorf("%w: %d expressions have been checking for %v; try again", ErrCheckerUnavailable, maxCheckers, checkerWait)
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 && !fresh {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		c.reused = true
		return c, nil
	}
	p.mu.Unlock()
	c, err := startChecker()
	if err != nil {
		<-p.slots
		return nil, fmt.Errorf("%w: %v", ErrCheckerUnavailable, err)
	}
	return c, nil
}

// release keeps c for the next check if it is healthy, else ends it, and
// frees its slot.
func (p *checkerPool) release(c *checkProcess, healthy bool) {
	if healthy {
		c.idleSince = time.Now()
		p.mu.Lock()
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		time.AfterFunc(checkerIdle, func() { p.expire(checkerIdle) })
	} else {
		c.stop()
	}
	<-p.slots
}

// expire ends the checkers unused for longer than idle.
func (p *checkerPool) expire(idle time.Duration) {
	p.mu.Lock()
	var old []*checkProcess
	p.idle = slices.DeleteFunc(p.idle, func(c *checkProcess) bool {
		if time.Since(c.idleSince) >= idle {
			old = append(old, c)
			return true
		}
		return false
	})
	p.mu.Unlock()
	for _, c := range old {
		c.stop()
	}
}

// checkProcess is one checker process.
type checkProcess struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *headBuffer
	reused bool
	// idleSince is when it last went idle.
	idleSince time.Time
	// overran says which limit the last check passed: the process was
	// killed for it.
	overran error
}

func startChecker() (*checkProcess, error) {
	self, err := checkerExecutable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Args = []string{os.Args[0]}
	// Not the server's environment: the checker needs none of it, and
	// one core is its share.
	cmd.Env = []string{checkerEnv + "=" + strconv.FormatInt(checkerMemory, 10), "GOMAXPROCS=1", "GOTRACEBACK=none"}
	if skipCounts {
		cmd.Env = append(cmd.Env, skipCountsEnv+"=1")
	}
	cmd.SysProcAttr = checkerProcAttr()
	c := &checkProcess{cmd: cmd, stderr: &headBuffer{max: 4096}}
	cmd.Stderr = c.stderr
	if c.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Its memory limit applies from here: a checker that fails before
	// it is ready failed for the server's reasons.
	timer := time.AfterFunc(checkWall, func() { _ = cmd.Process.Kill() })
	ready, err := readFrame(c.out, 1)
	timer.Stop()
	if err != nil || ready[0] != answerReady {
		c.stop()
		return nil, fmt.Errorf("it did not start (%v, %v): %s", err, cmd.ProcessState, c.stderr.firstLine())
	}
	return c, nil
}

// check sends expr and reads the answer, killing the process if the check
// passes checkCPU or checkWall.
func (c *checkProcess) check(expr string) (answer, error) {
	pid := c.cmd.Process.Pid
	// Before the request, so that all of the check counts; without it the
	// watchdog would count the checker's whole life (found by review,
	// helper 63).
	cpu0, err := processCPU(pid)
	if err != nil {
		c.stop()
		return answer{}, fmt.Errorf("%w: reading its processor time: %v", ErrCheckerUnavailable, err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		c.overran = c.watch(stop, cpu0)
	}()
	err = writeFrame(c.in, 0, []byte(expr))
	var body []byte
	if err == nil {
		body, err = readFrame(c.out, maxCheckedBytes+1)
	}
	close(stop)
	<-stopped
	switch {
	case c.overran != nil:
		c.stop()
		return answer{}, c.overran
	case err != nil:
		return answer{}, c.failure(err)
	case len(body) == 0:
		c.stop()
		return answer{}, fmt.Errorf("%w: it answered nothing", ErrCheckerUnavailable)
	}
	return answer{kind: body[0], body: body[1:]}, nil
}

// watch kills the process once the check passes a limit, and says which.
func (c *checkProcess) watch(stop <-chan struct{}, cpu0 time.Duration) error {
	start := time.Now()
	pid := c.cmd.Process.Pid
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		var overran error
		if cpu, err := processCPU(pid); err == nil && cpu-cpu0 > checkCPU {
			overran = fmt.Errorf("the CEL expression takes too long to type-check (more than %v of processor time): fewer operations, comparisons or nested values", checkCPU)
		} else if time.Since(start) > checkWall {
			overran = fmt.Errorf("%w: no answer in %v; try again", ErrCheckerUnavailable, checkWall)
		}
		if overran != nil {
			_ = c.cmd.Process.Kill()
			return overran
		}
	}
}

// failure says why a check got no answer, once the process has ended.
func (c *checkProcess) failure(err error) error {
	c.stop()
	why := c.stderr.firstLine()
	state := c.cmd.ProcessState
	// Go fails in several ways at its data limit (out of memory, cannot
	// allocate memory, a fault when a stack cannot grow), each time
	// exiting 2: what they share is the size the process had reached, in
	// this check (askChecker retires checkers that grew large). A process
	// killed by a signal was killed by someone else: the kernel's OOM
	// killer, short of the container's memory, or an operator.
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && !ws.Signaled() && ws.ExitStatus() == 2 &&
		(strings.Contains(why, "memory") || peakRSS(state) >= checkerMemory/2) {
		return fmt.Errorf("the CEL expression takes too much memory to type-check (more than %d MiB): fewer operations, comparisons or nested values", checkerMemory>>20)
	}
	return fmt.Errorf("%w: it ended (%v, %v): %s", ErrCheckerUnavailable, err, state, why)
}

// stop ends the process and waits for it.
func (c *checkProcess) stop() {
	_ = c.in.Close()
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// Frames are a 4-byte big-endian length and that many bytes; an answer's
// first byte is its kind.
func writeFrame(w io.Writer, kind byte, body []byte) error {
	var b bytes.Buffer
	header := binary.BigEndian.AppendUint32(nil, uint32(len(body)+1))
	b.Write(header)
	b.WriteByte(kind)
	b.Write(body)
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	if f, ok := w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// readFrame reads one frame of at most max bytes, kind byte included.
func readFrame(r *bufio.Reader, max int) ([]byte, error) {
	var header [4]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(header[:])
	if n == 0 || int64(n) > int64(max) {
		return nil, fmt.Errorf("a frame of %d bytes, at most %d", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return body, nil
}

// headBuffer keeps the first max bytes written to it: the checker's
// standard error, whose first line says why it ended (the runtime's
// goroutine dump follows).
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// firstLine is the first line written.
func (h *headBuffer) firstLine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	line, _, _ := strings.Cut(strings.TrimSpace(string(h.b)), "\n")
	return line
}

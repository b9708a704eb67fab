package expression

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// checkerExecutable is this executable, even if its file was replaced
// since it started (an upgrade in place).
func checkerExecutable() (string, error) { return "/proc/self/exe", nil }

// checkerProcAttr ends the checker with the server.
func checkerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// limitProcess bounds the checker's memory, lowers its priority below the
// server's and makes it the first the kernel ends when the container runs
// out of memory (a process may raise its own score).
func limitProcess(memory uint64) error {
	// The race detector's shadow memory is private data too, many
	// times the heap: such test builds check unbounded.
	if raceBuild {
		memory = math.MaxUint64 // RLIM_INFINITY
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: memory, Max: memory}); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		return err
	}
	// A priority is a thread's: every thread the runtime has started gets
	// it, and threads started later inherit it from theirs. Twice, for a
	// thread started by one not yet lowered. A thread already lower (a
	// server started with nice 15) stays so: raising it is not ours to do,
	// and without privilege it fails (found by review, helper 63).
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if n, err := threadNice(tid); err != nil || n >= checkerNice {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, checkerNice); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
	}
	return nil
}

// checkerNice is the checker's priority, below the server's default.
const checkerNice = 10

// threadNice is the nice value of one of this process's threads, field
// 19 of its stat.
func threadNice(tid int) (int, error) {
	fields, err := statFields("/proc/self/task/"+strconv.Itoa(tid)+"/stat", 17)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[16])
}

// statFields reads a /proc stat file and returns its fields from the
// third (state) on, at least n of them. The command name before them, in
// parentheses, may hold spaces.
func statFields(path string, n int) ([]string, error) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s: no command name", path)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < n {
		return nil, fmt.Errorf("%s: %d fields after the command name, want %d", path, len(fields), n)
	}
	return fields, nil
}

// processCPU is the processor time pid has used, from /proc/pid/stat
// (utime and stime, in the kernel's USER_HZ ticks of 10 ms).
func processCPU(pid int) (time.Duration, error) {
	fields, err := statFields("/proc/"+strconv.Itoa(pid)+"/stat", 13)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// peakRSS is the most memory an ended process had resident.
func peakRSS(state *os.ProcessState) int64 {
	if u, ok := state.SysUsage().(*syscall.Rusage); ok {
		return u.Maxrss << 10 // KiB on Linux
	}
	return 0
}

// residentPeak is the most memory pid has had resident (VmHWM), or 0 if
// it cannot be read.
func residentPeak(pid int) int64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kib << 10
		}
	}
	return 0
}

package server

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultMemoryLimitRatio is the share of the container's memory limit the
// Go runtime is asked to stay under. The rest covers what the runtime does
// not count (stacks of the moment, fragmentation, the binary itself).
const DefaultMemoryLimitRatio = 0.9

// DefaultGCPercent is the server's GOGC. The collector keeps a compact
// record of every collected object and of every item, and a sync adds them
// quickly: at the runtime's default of 100 the heap grows to twice them
// before each collection. A lower value trades some CPU for memory, as
// servers holding their data in memory often do (docs/collection.md has
// the figures).
const DefaultGCPercent = 50

// applyGCPercent sets the garbage collector's target percentage, unless
// GOGC is set (the runtime has applied it) or percent is 0. It returns the
// value set, or 0.
func applyGCPercent(percent int) int {
	if percent <= 0 || os.Getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(percent)
	return percent
}

// cgroupRoot is where the cgroup file systems are mounted; tests move it.
var cgroupRoot = "/sys/fs/cgroup"

// applyMemoryLimit sets the Go runtime's soft memory limit to ratio times
// the memory limit of the process's cgroup, so that the garbage collector
// runs more often as the heap nears the limit instead of letting the
// default headroom (GOGC=100: up to twice the live heap) get the container
// killed. It does nothing when GOMEMLIMIT is set (the runtime has applied
// it), when ratio is 0, or without a cgroup limit. It returns the limit set
// and the cgroup limit it derives from, or zeros.
func applyMemoryLimit(ratio float64) (limit, cgroupLimit int64) {
	if ratio <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0, 0
	}
	cgroupLimit, ok := cgroupMemoryLimit()
	if !ok {
		return 0, 0
	}
	limit = int64(float64(cgroupLimit) * ratio)
	debug.SetMemoryLimit(limit)
	return limit, cgroupLimit
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup: v2
// memory.max of the process's own cgroup (as /proc/self/cgroup names it)
// or of the mount root (a container with its own cgroup namespace), else
// v1 memory.limit_in_bytes. ok is false when there is no limit.
func cgroupMemoryLimit() (bytes int64, ok bool) {
	var candidates []string
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if path, found := strings.CutPrefix(line, "0::"); found && path != "/" {
				candidates = append(candidates, filepath.Join(cgroupRoot, path, "memory.max"))
			}
		}
	}
	candidates = append(candidates,
		filepath.Join(cgroupRoot, "memory.max"),
		filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes"))
	for _, file := range candidates {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		value := strings.TrimSpace(string(data))
		n, err := strconv.ParseInt(value, 10, 64)
		// v2 says "max" without a limit, v1 a page-aligned number near
		// MaxInt64.
		if value == "max" || err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the user and system CPU time a process has used so far
// (/proc/<pid>/stat fields 14 and 15).
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields from the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return float64(utime+stime) / clockTicks, nil
}

// statusKB is a "<key>: N kB" line of /proc/<pid>/status, in bytes.
func statusKB(pid int, key string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// rss is the resident set of a process now (VmRSS), in bytes.
func rss(pid int) int64 { return statusKB(pid, "VmRSS") }

// heapAfterGC forces a garbage collection in the server (the heap profile
// with gc=1) and returns runtime.MemStats.HeapAlloc just after it: the
// live heap, without the garbage RSS still holds.
func heapAfterGC(ctx context.Context, cfg *rest.Config) (int64, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").Param("debug", "1").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, fmt.Errorf("heap profile: no HeapAlloc line")
}

// serverMetrics reads a server's /metrics.
func serverMetrics(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(body), err
}

// sumSamples adds the samples of a metric whose labels satisfy match.
func sumSamples(metrics, name string, match func(labels string) bool) float64 {
	var sum float64
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "} ")
		if end < 0 || !match(rest[:end]) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+2:]), 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// inventoryStatusWrites counts the exporters' writes of Inventory status
// entries (in process, through the status strategy): writes that changed
// nothing count too, and cost the server as much.
func inventoryStatusWrites(metrics string) float64 {
	return sumSamples(metrics, "kollect_export_status_entry_writes_total", func(l string) bool {
		return strings.Contains(l, `kind="Inventory"`)
	})
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

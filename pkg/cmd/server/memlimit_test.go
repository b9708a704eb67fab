package server

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"none", nil, 0},
		{"v2 limit", map[string]string{"memory.max": "1073741824\n"}, 1 << 30},
		{"v2 unlimited", map[string]string{"memory.max": "max\n"}, 0},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"v1 unlimited", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"v2 first", map[string]string{"memory.max": "1073741824", "memory/memory.limit_in_bytes": "536870912"}, 1 << 30},
		{"garbage", map[string]string{"memory.max": "lots"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			defer func(old string) { cgroupRoot = old }(cgroupRoot)
			cgroupRoot = root
			got, ok := cgroupMemoryLimit()
			if got != tc.want || ok != (tc.want > 0) {
				t.Errorf("got %d, %v; want %d", got, ok, tc.want)
			}
		})
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	defer func(old string) { cgroupRoot = old }(cgroupRoot)
	cgroupRoot = t.TempDir()
	if err := os.WriteFile(filepath.Join(cgroupRoot, "memory.max"), []byte("1000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Setenv("GOMEMLIMIT", "")
	if limit, of := applyMemoryLimit(0.9); limit != 900_000_000 || of != 1_000_000_000 || debug.SetMemoryLimit(-1) != 900_000_000 {
		t.Errorf("limit %d of %d, runtime %d", limit, of, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(before)
	if limit, _ := applyMemoryLimit(0); limit != 0 || debug.SetMemoryLimit(-1) != before {
		t.Error("ratio 0 must leave the runtime alone")
	}
	t.Setenv("GOMEMLIMIT", "2GiB")
	if limit, _ := applyMemoryLimit(0.9); limit != 0 || debug.SetMemoryLimit(-1) != before {
		t.Error("GOMEMLIMIT must win")
	}
}

func TestApplyGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	t.Setenv("GOGC", "")
	if got := applyGCPercent(50); got != 50 || debug.SetGCPercent(100) != 50 {
		t.Errorf("applied %d", got)
	}
	if got := applyGCPercent(0); got != 0 || debug.SetGCPercent(100) != 100 {
		t.Error("0 must leave the runtime alone")
	}
	t.Setenv("GOGC", "200")
	if got := applyGCPercent(50); got != 0 || debug.SetGCPercent(100) != 100 {
		t.Error("GOGC must win")
	}
}

//go:build !linux

package expression

import (
	"errors"
	"os"
	"syscall"
	"time"
)

func checkerExecutable() (string, error) { return os.Executable() }

func checkerProcAttr() *syscall.SysProcAttr { return nil }

// limitProcess refuses: only Linux bounds the checker's memory (RLIMIT_DATA
// counts the heap), and an unbounded checker is what it replaces.
func limitProcess(uint64) error {
	return errors.New("the CEL checker runs only on Linux, where its memory can be limited")
}

func processCPU(int) (time.Duration, error) { return 0, errors.New("not measured") }

func peakRSS(*os.ProcessState) int64 { return 0 }

func residentPeak(int) int64 { return 0 }

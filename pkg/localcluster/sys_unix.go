//go:build unix

package localcluster

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// signalGroup signals the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// lockDir takes an exclusive lock on dir/.lock for the life of the returned
// file, so two clusters never share one state directory.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is in use by another local cluster (lock %s): %w", dir, f.Name(), err)
	}
	return f, nil
}

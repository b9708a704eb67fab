//go:build !unix

package localcluster

import (
	"errors"
	"os"
	"syscall"
)

const (
	sigTerm = syscall.Signal(15)
	sigKill = syscall.Signal(9)
)

var errUnsupported = errors.New("localcluster runs on Linux (and other Unix systems) only")

func childSysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) error { return errUnsupported }

func lockDir(string) (*os.File, error) { return nil, errUnsupported }

//go:build unix && !linux

package localcluster

import "syscall"

// childSysProcAttr puts a child in its own process group. Outside Linux
// there is no parent-death signal: children of a parent that dies without
// calling Stop keep running.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

package localcluster

import "syscall"

// childSysProcAttr puts a child in its own process group (so that signals
// reach everything it might spawn) and has the kernel SIGKILL it when the
// thread that started it dies: a test binary that panics, times out or is
// killed leaves no etcd or API server behind.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

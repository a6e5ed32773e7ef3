//go:build unix

package emulator

import "syscall"

// sysProcAttr puts the emulator in a process group of its own, so that stop
// reaches every process it started.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(a)
	return a
}

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to the process
// group led by pid. A group that is already gone is not an error.
func signalGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}

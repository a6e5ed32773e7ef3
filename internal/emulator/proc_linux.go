//go:build linux

package emulator

import "syscall"

// setDeathSignal makes the kernel kill the emulator if the test binary dies
// without running its cleanups (a panic, a -timeout, a SIGKILL).
func setDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}

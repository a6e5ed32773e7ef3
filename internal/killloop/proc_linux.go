//go:build linux

package killloop

import "syscall"

// setDeathSignal makes the kernel kill a child if the test binary dies
// without running its cleanups (a panic, a -timeout).
func setDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}

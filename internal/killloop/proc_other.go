//go:build !linux

package killloop

import "syscall"

// setDeathSignal does nothing where Pdeathsig does not exist: the
// cleanups kill the children.
func setDeathSignal(a *syscall.SysProcAttr) {}

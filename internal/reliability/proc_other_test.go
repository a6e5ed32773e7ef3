//go:build !linux

package reliability

import "syscall"

// setDeathSignal does nothing where Pdeathsig does not exist: the
// cleanups kill the children.
func setDeathSignal(a *syscall.SysProcAttr) {}

//go:build unix && !linux

package emulator

import "syscall"

// setDeathSignal does nothing where there is no parent-death signal;
// scripts/test.sh kills leftover emulators.
func setDeathSignal(*syscall.SysProcAttr) {}

//go:build !unix

package emulator

import (
	"os"
	"syscall"
)

// sysProcAttr returns nil: without process groups, stop kills the emulator
// process alone.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills the process pid; there is no gentler signal here.
func signalGroup(pid int, _ bool) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

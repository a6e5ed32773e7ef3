//go:build !unix

package journal

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir fails: the file journal locks its directory with flock(2), which
// this system does not have.
func lockDir(dir string, exclusive bool) (*os.File, error) {
	return nil, fmt.Errorf("journal: cannot lock %s: flock is not available on %s", dir, runtime.GOOS)
}

// unlockDir is never reached: lockDir always fails.
func unlockDir(f *os.File) error { return f.Close() }

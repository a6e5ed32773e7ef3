//go:build unix

package journal

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes a flock on the directory itself: exclusive for a writer,
// shared for a reader. It creates no file, so a failed Open leaves the
// directory as it was and a read-only directory can be locked for reading.
// (Journals of the first format also kept a LOCK file; it is left alone.)
func lockDir(dir string, exclusive bool) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: open directory %s: %w", dir, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is already open (its flock is held)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", dir, err)
	}
	return f, nil
}

// unlockDir releases the lock taken by lockDir.
func unlockDir(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: unlock %s: %w", f.Name(), err)
	}
	return nil
}

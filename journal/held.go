package journal

import "errors"

// Held reports whether a process has the file journal in dir open for
// writing (a Loader, or a Repair): it takes a shared lock on dir, as
// [OpenReadOnly] does, and releases it at once, reading nothing. A writer
// that opens dir in that instant fails with [ErrLocked], as it would
// while a reader has it open. An error says the lock could not be tried
// (dir is missing, or locks are not available).
func Held(dir string) (bool, error) {
	lock, err := lockDir(dir, false)
	if errors.Is(err, ErrLocked) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, unlockDir(lock)
}

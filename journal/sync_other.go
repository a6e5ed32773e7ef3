//go:build !linux

package journal

import "os"

// fdatasync syncs f; without fdatasync(2) that is a full fsync.
func fdatasync(f *os.File) error { return f.Sync() }

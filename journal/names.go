package journal

import (
	"fmt"
	"strconv"
	"strings"
)

// The files of a journal directory. Every name is built by [fileName.String]
// and parsed by [parseFileName]; nothing else formats or parses them.
const (
	segmentExt  = ".seg"
	snapshotExt = ".snap"
	tempExt     = ".tmp"
	lockName    = "LOCK"
)

// Magic numbers at the start of segment and snapshot files. The last byte
// is the format version. Version 2 segments hold batches (see batch.go);
// version 1 segments, written before batches existed, hold bare frames and
// are still read (never appended to: Open always starts a new segment).
var (
	segmentMagic   = [8]byte{'t', 'm', 'j', 's', 'e', 'g', 0, 2}
	segmentMagicV1 = [8]byte{'t', 'm', 'j', 's', 'e', 'g', 0, 1}
	snapshotMagic  = [8]byte{'t', 'm', 'j', 's', 'n', 'p', 0, 1}
)

type fileKind int

const (
	kindSegment  fileKind = iota + 1 // <seq>-<first index>.seg
	kindSnapshot                     // <index>.snap
)

// fileName names a segment (seq, index = its first record's index) or a
// snapshot (index = the last record it covers).
type fileName struct {
	kind  fileKind
	seq   uint64
	index uint64
}

// String returns the file's name: 16 lower-case hex digits per number.
func (n fileName) String() string {
	if n.kind == kindSnapshot {
		return fmt.Sprintf("%016x%s", n.index, snapshotExt)
	}
	return fmt.Sprintf("%016x-%016x%s", n.seq, n.index, segmentExt)
}

// parseFileName parses a name that String built; ok is false for any other
// name (the lock file, temporary files, backups kept by Repair).
func parseFileName(name string) (n fileName, ok bool) {
	hex16 := func(s string) (uint64, bool) {
		if len(s) != 16 || strings.ToLower(s) != s {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 16, 64)
		return v, err == nil
	}
	switch {
	case strings.HasSuffix(name, segmentExt):
		base := strings.TrimSuffix(name, segmentExt)
		if len(base) != 33 || base[16] != '-' {
			return fileName{}, false
		}
		seq, ok1 := hex16(base[:16])
		first, ok2 := hex16(base[17:])
		if !ok1 || !ok2 {
			return fileName{}, false
		}
		return fileName{kind: kindSegment, seq: seq, index: first}, true
	case strings.HasSuffix(name, snapshotExt):
		idx, ok := hex16(strings.TrimSuffix(name, snapshotExt))
		if !ok {
			return fileName{}, false
		}
		return fileName{kind: kindSnapshot, index: idx}, true
	}
	return fileName{}, false
}

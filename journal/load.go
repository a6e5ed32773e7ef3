package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// segment is one segment file.
type segment struct {
	name fileName
	path string
	// size is where its valid frames end: the file's size, or where a torn
	// tail starts. For the live journal it is the durable size.
	size int64
	// fileSize is the file's size on disk when it was loaded.
	fileSize int64
	// last is the index of its last record (name.index-1 when empty).
	last uint64
}

// snapshotFile is one snapshot file.
type snapshotFile struct {
	path  string
	index uint64
}

// dirState is what load found in a journal directory.
type dirState struct {
	snap     *snapshotFile // the latest snapshot, nil when there is none
	oldSnaps []string      // older snapshots, left by an interrupted compaction
	segs     []segment     // every segment, in seq order
	covered  int           // segs[:covered] are wholly covered by snap: compaction leftovers, not read
	torn     bool          // the last segment has a torn tail from segs[len-1].size
	tornWhy  string
	temps    []string // temporary files of interrupted writes
}

// last returns the index of the last record (the snapshot's when there is
// no record after it).
func (st *dirState) last() uint64 {
	if len(st.segs) > st.covered {
		return st.segs[len(st.segs)-1].last
	}
	if st.snap != nil {
		return st.snap.index
	}
	return 0
}

// damage is where load found corruption, and how Repair cuts it.
type damage struct {
	err *CorruptError
	// snapshot is true when the latest snapshot file is damaged.
	snapshot bool
	// missingHead is true when records between the snapshot and the first
	// segment are missing.
	missingHead bool
	// seg is the position in dirState.segs of the segment to cut at cut:
	// truncated there, or removed whole when cut is below the header's
	// end. Every later segment is removed too.
	seg int
	cut int64
}

// load reads and checks the journal in dir without changing anything. It
// returns a damage for corruption and an error for anything else (I/O).
// maxRecord tells a torn frame (no longer than a record can be) from a
// corrupt length word.
func load(dir string, maxRecord int) (*dirState, *damage, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: read directory %s: %w", dir, err)
	}
	st := &dirState{}
	var snaps []snapshotFile
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		name := e.Name()
		path := filepath.Join(dir, name)
		if base, ok := strings.CutSuffix(name, tempExt); ok {
			if _, ours := parseFileName(base); ours {
				st.temps = append(st.temps, path)
			}
			continue
		}
		n, ok := parseFileName(name)
		if !ok {
			continue
		}
		switch n.kind {
		case kindSnapshot:
			snaps = append(snaps, snapshotFile{path: path, index: n.index})
		case kindSegment:
			st.segs = append(st.segs, segment{name: n, path: path, last: n.index - 1})
		}
	}
	slices.SortFunc(snaps, func(a, b snapshotFile) int { return cmpU64(a.index, b.index) })
	slices.SortFunc(st.segs, func(a, b segment) int {
		if c := cmpU64(a.name.seq, b.name.seq); c != 0 {
			return c
		}
		return cmpU64(a.name.index, b.name.index)
	})

	snapIndex := uint64(0)
	if len(snaps) > 0 {
		s := snaps[len(snaps)-1]
		st.snap = &s
		snapIndex = s.index
		for _, o := range snaps[:len(snaps)-1] {
			st.oldSnaps = append(st.oldSnaps, o.path)
		}
		if d, err := checkSnapshot(s); err != nil || d != nil {
			return st, d, err
		}
	}

	// Leading segments whose records the snapshot wholly covers are
	// leftovers of an interrupted compaction: they are not needed, so
	// they are not read (the last segment is never one of them).
	for st.covered < len(st.segs)-1 && st.segs[st.covered+1].name.index-1 <= snapIndex {
		st.covered++
	}
	live := st.segs[st.covered:]
	if len(live) > 0 && live[0].name.index > snapIndex+1 {
		return st, &damage{
			err: &CorruptError{File: live[0].path, Offset: 0, Reason: fmt.Sprintf(
				"records %d to %d are missing: the segment starts at index %d, the snapshot covers up to %d",
				snapIndex+1, live[0].name.index-1, live[0].name.index, snapIndex)},
			missingHead: true, seg: st.covered, cut: 0,
		}, nil
	}
	for i := range live {
		pos := st.covered + i
		seg := &st.segs[pos]
		isLast := pos == len(st.segs)-1
		if i > 0 {
			prev := st.segs[pos-1]
			if seg.name.seq != prev.name.seq+1 {
				why := fmt.Sprintf("segment seq %d follows seq %d (%s)", seg.name.seq, prev.name.seq, filepath.Base(seg.path))
				if seg.name.seq == prev.name.seq {
					why = "duplicate segment seq: " + why
				} else {
					why = "missing segment: " + why
				}
				return st, &damage{err: &CorruptError{File: prev.path, Offset: prev.size, Reason: why}, seg: pos - 1, cut: prev.size}, nil
			}
			if seg.name.index != prev.last+1 {
				why := fmt.Sprintf("index gap: %s starts at index %d but the previous segment ends at %d",
					filepath.Base(seg.path), seg.name.index, prev.last)
				if seg.name.index <= prev.last {
					why = fmt.Sprintf("duplicate records: %s starts at index %d but the previous segment ends at %d",
						filepath.Base(seg.path), seg.name.index, prev.last)
				}
				return st, &damage{err: &CorruptError{File: prev.path, Offset: prev.size, Reason: why}, seg: pos - 1, cut: prev.size}, nil
			}
		}
		d, err := checkSegment(st, pos, isLast, maxRecord)
		if err != nil || d != nil {
			return st, d, err
		}
	}
	if len(live) > 0 && st.last() < snapIndex {
		lastSeg := live[len(live)-1]
		return st, &damage{
			err: &CorruptError{File: lastSeg.path, Offset: lastSeg.size, Reason: fmt.Sprintf(
				"the records end at index %d but snapshot %s covers up to %d", lastSeg.last, filepath.Base(st.snap.path), snapIndex)},
			seg: st.covered, cut: 0,
		}, nil
	}
	return st, nil, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkSnapshot reads a snapshot file through: magic, one frame with the
// index its name says, nothing after it.
func checkSnapshot(s snapshotFile) (*damage, error) {
	bad := func(off int64, why string) (*damage, error) {
		return &damage{err: &CorruptError{File: s.path, Offset: off, Reason: why}, snapshot: true}, nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("journal: open snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: stat snapshot: %w", err)
	}
	var magic [8]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || magic != snapshotMagic {
		return bad(0, "not a snapshot file: bad magic")
	}
	fr := &frameReader{r: bufio.NewReaderSize(f, 64<<10), off: int64(len(magic)), size: fi.Size()}
	index, _, err := fr.next()
	if err != nil {
		var fe *frameError
		if errors.As(err, &fe) {
			return bad(fr.off, fe.msg)
		}
		if err == io.EOF {
			return bad(fr.off, "no snapshot frame")
		}
		return nil, fmt.Errorf("journal: read snapshot %s: %w", s.path, err)
	}
	if index != s.index {
		return bad(int64(len(magic)), fmt.Sprintf("snapshot frame has index %d, its name says %d", index, s.index))
	}
	if fr.off != fi.Size() {
		return bad(fr.off, fmt.Sprintf("%d unexpected bytes after the snapshot frame", fi.Size()-fr.off))
	}
	return nil, nil
}

// checkSegment reads st.segs[pos] through and sets its size and last. The
// last segment may end in a torn write, which sets st.torn.
func checkSegment(st *dirState, pos int, isLast bool, maxRecord int) (*damage, error) {
	seg := &st.segs[pos]
	bad := func(off int64, why string) (*damage, error) {
		return &damage{err: &CorruptError{File: seg.path, Offset: off, Reason: why}, seg: pos, cut: off}, nil
	}
	f, err := os.Open(seg.path)
	if err != nil {
		return nil, fmt.Errorf("journal: open segment: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: stat segment: %w", err)
	}
	seg.fileSize = fi.Size()
	seg.size = 0
	var magic [8]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || magic != segmentMagic {
		return bad(0, "not a segment file: bad magic")
	}
	seg.size = int64(len(magic))
	fr := &frameReader{r: bufio.NewReaderSize(f, 64<<10), off: seg.size, size: fi.Size()}
	want := seg.name.index
	for {
		off := fr.off
		index, _, err := fr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) {
				return nil, fmt.Errorf("journal: read segment %s at offset %d: %w", seg.path, off, err)
			}
			if isLast {
				torn, why, err := isTorn(f, off, fi.Size(), fe, maxRecord, want)
				if err != nil {
					return nil, err
				}
				if torn {
					st.torn, st.tornWhy = true, why
					break
				}
			}
			return bad(off, fe.msg)
		}
		if index != want {
			return bad(off, fmt.Sprintf("record index %d, want %d", index, want))
		}
		want++
		seg.size = fr.off
	}
	seg.last = want - 1
	return nil, nil
}

// isTorn tells whether the bad frame at off, in the last segment of size
// bytes, is a torn write that a crash can leave (and Open truncates):
//   - fewer than 8 bytes are left;
//   - the frame runs past the end of the file, its length is one that a
//     record can have, and no valid frame of the next record (index
//     want+1) follows it (a flipped bit in a length word looks like a cut
//     frame, but is followed by the records after it);
//   - the file is zero from the frame's start, or from a 512-byte sector
//     boundary inside the frame, to its end.
func isTorn(f *os.File, off, size int64, fe *frameError, maxRecord int, want uint64) (bool, string, error) {
	switch fe.prob {
	case probShort:
		return true, fmt.Sprintf("short tail of %d bytes", size-off), nil
	case probPastEnd:
		if fe.bodyLen > int64(bodyHeaderSize+maxRecord) {
			return false, "", nil
		}
		later, err := laterFrame(f, off+wordSize, size, want+1)
		if err != nil || later {
			return false, "", err
		}
		return true, "last frame cut short: " + fe.msg, nil
	}
	z, err := zeroSuffix(f, off, size)
	if err != nil {
		return false, "", err
	}
	if z <= off {
		return true, fmt.Sprintf("zero-filled tail of %d bytes", size-off), nil
	}
	end := off + wordSize
	if fe.prob == probChecksum || fe.prob == probPadding {
		end = off + wordSize + fe.bodyLen + padding(fe.bodyLen)
	}
	if s := (z + sectorSize - 1) / sectorSize * sectorSize; s < end {
		return true, fmt.Sprintf("last frame torn: zero-filled from offset %d to the end", z), nil
	}
	return false, "", nil
}

// laterFrame tells whether a valid frame with the given index starts at an
// 8-byte aligned offset in [from, size).
func laterFrame(f *os.File, from, size int64, index uint64) (bool, error) {
	b := make([]byte, size-from)
	if _, err := f.ReadAt(b, from); err != nil {
		return false, fmt.Errorf("journal: read %s: %w", f.Name(), err)
	}
	for p := 0; p+wordSize <= len(b); p += wordSize {
		if i, _, _, err := decodeFrame(b[p:]); err == nil && i == index {
			return true, nil
		}
	}
	return false, nil
}

// zeroSuffix returns where the run of zero bytes that ends the file starts,
// looking no further back than from.
func zeroSuffix(f *os.File, from, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	for end > from {
		start := max(from, end-int64(len(buf)))
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, fmt.Errorf("journal: read %s: %w", f.Name(), err)
		}
		for j := len(b) - 1; j >= 0; j-- {
			if b[j] != 0 {
				return start + int64(j) + 1, nil
			}
		}
		end = start
	}
	return from, nil
}

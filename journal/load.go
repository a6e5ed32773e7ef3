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
	// v1 is true for a segment of the first format (bare frames, no
	// batches), which is read but never appended to.
	v1 bool
	// lastWrite is the write time of its last whole batch, in Unix
	// nanoseconds of the writer's clock; 0 when unknown (no batch, or v1).
	lastWrite int64
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
	// batchAt is the start of the batch that holds the bad frame at cut,
	// or -1 when cut is not inside a batch's payload: Repair keeps the
	// batch's good records before cut by rewriting its header.
	batchAt int64
}

// load reads and checks the journal in dir without changing anything. It
// returns a damage for corruption and an error for anything else (I/O).
func load(dir string) (*dirState, *damage, error) {
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
			missingHead: true, seg: st.covered, cut: 0, batchAt: -1,
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
				return st, &damage{err: &CorruptError{File: prev.path, Offset: prev.size, Reason: why}, seg: pos - 1, cut: prev.size, batchAt: -1}, nil
			}
			if seg.name.index != prev.last+1 {
				why := fmt.Sprintf("index gap: %s starts at index %d but the previous segment ends at %d",
					filepath.Base(seg.path), seg.name.index, prev.last)
				if seg.name.index <= prev.last {
					why = fmt.Sprintf("duplicate records: %s starts at index %d but the previous segment ends at %d",
						filepath.Base(seg.path), seg.name.index, prev.last)
				}
				return st, &damage{err: &CorruptError{File: prev.path, Offset: prev.size, Reason: why}, seg: pos - 1, cut: prev.size, batchAt: -1}, nil
			}
		}
		d, err := checkSegment(st, pos, isLast)
		if err != nil || d != nil {
			return st, d, err
		}
	}
	if len(live) > 0 && st.last() < snapIndex {
		lastSeg := live[len(live)-1]
		return st, &damage{
			err: &CorruptError{File: lastSeg.path, Offset: lastSeg.size, Reason: fmt.Sprintf(
				"the records end at index %d but snapshot %s covers up to %d", lastSeg.last, filepath.Base(st.snap.path), snapIndex)},
			seg: st.covered, cut: 0, batchAt: -1,
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
	_, err = io.ReadFull(f, magic[:])
	if err == nil && [7]byte(magic[:7]) == [7]byte(snapshotMagic[:7]) && magic[7] > snapshotMagic[7] {
		return nil, fmt.Errorf("%w: %s at offset 7: snapshot format version %d, this build reads up to %d",
			ErrNewerFormat, s.path, magic[7], snapshotMagic[7])
	}
	if err != nil || magic != snapshotMagic {
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

package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dirSnapshot is every file's bytes (dirContents) and the directory's
// modification time, which creating a file in it changes even if the file
// is removed again.
type dirSnapshot struct {
	Files map[string]string
	MTime int64
}

func snapshotDir(t *testing.T, dir string) dirSnapshot {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dirSnapshot{Files: dirContents(t, dir), MTime: fi.ModTime().UnixNano()}
}

// tearLastBatch cuts the last batch of the segment at path in its middle,
// as a crash during its write can, and returns the batch's offset and the
// number of bytes left of it.
func tearLastBatch(t *testing.T, path string) (at, left int64) {
	t.Helper()
	_, batches, size := layout(t, path)
	at = batches[len(batches)-1]
	left = (size - at) / 2
	if err := os.Truncate(path, at+left); err != nil {
		t.Fatal(err)
	}
	return at, left
}

// TestOpenFailedLeavesDirectory opens a corrupt journal: Open fails, and
// the directory is exactly as it was: no LOCK or other new file (not even
// one created and removed again: the directory's mtime is unchanged), and
// every file's bytes unchanged.
func TestOpenFailedLeavesDirectory(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, smallConfig(), 30)
	segs := segmentPaths(t, dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	// Damage a middle record of the first segment, and give the newest a
	// torn tail that Open would truncate if it got that far.
	offs, _ := frameOffsets(t, segs[0])
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[offs[1]+wordSize+bodyHeaderSize] ^= 0x10
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	tearLastBatch(t, segs[len(segs)-1])
	before := snapshotDir(t, dir)
	j, err := Open(dir, smallConfig())
	if err == nil {
		j.Close()
		t.Fatal("Open of a journal with a damaged record succeeded")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != segs[0] || ce.Offset != offs[1] {
		t.Fatalf("Open: err = %v, want a *CorruptError in %s at offset %d", err, segs[0], offs[1])
	}
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("a failed Open changed the directory (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after a failed Open, stat %s: %v; want no LOCK file", lockName, err)
	}
}

// TestOpenCreatesNestedDirectories opens a/b/c under an empty directory:
// Open creates every level, and the journal works and survives a reopen.
func TestOpenCreatesNestedDirectories(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		fi, err := os.Stat(filepath.Join(root, d))
		if err != nil || !fi.IsDir() {
			t.Errorf("%s after Open: %v, %v; want a directory", d, fi, err)
		}
	}
	mustAppend(t, j, rec(1), rec(2))
	mustAppend(t, j, rec(3))
	closeJournal(t, j)
	if diff := cmp.Diff(records(1, 3), reopen(t, dir, DefaultConfig())); diff != "" {
		t.Errorf("Replay after reopening (-want +got):\n%s", diff)
	}
}

// TestOpenReportsTornTail gives the newest segment a torn last batch:
// Open truncates it and reports the file, the offset, the bytes cut and
// why in Recovery().Torn. A clean Open reports nothing.
func TestOpenReportsTornTail(t *testing.T) {
	clean := t.TempDir()
	build(t, clean, DefaultConfig(), 8)
	j, err := Open(clean, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if rec := j.Recovery(); rec.Torn != nil || rec.Repaired != nil {
		t.Errorf("Recovery() of a clean Open = %+v, want nothing", rec)
	}
	closeJournal(t, j)

	dir := t.TempDir()
	build(t, dir, DefaultConfig(), 8)
	seg := segmentPaths(t, dir)[0]
	at, left := tearLastBatch(t, seg)
	j, err = Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open of a torn journal: %v", err)
	}
	defer closeJournal(t, j)
	torn := j.Recovery().Torn
	if torn == nil {
		t.Fatal("Recovery().Torn is nil after Open truncated a torn tail")
	}
	if torn.File != seg || torn.Offset != at || torn.Bytes != left || torn.Reason == "" {
		t.Errorf("Recovery().Torn = %+v, want file %s, offset %d, %d bytes and a reason", torn, seg, at, left)
	}
	if s := torn.String(); !strings.Contains(s, seg) || !strings.Contains(s, "offset") {
		t.Errorf("TornTail.String() = %q, want the file and offset in it", s)
	}
	if size := fileSize(t, seg); size != at {
		t.Errorf("segment is %d bytes after Open, want %d (truncated at the torn batch)", size, at)
	}
	if diff := cmp.Diff(records(1, 7), replayAll(t, j)); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
}

// TestOpenTornRecordAboveMaxRecordSize writes a large last record, cuts it
// short as a crash can, and opens the journal with a MaxRecordSize since
// lowered below that record's size: the record is a torn tail, truncated,
// and Open succeeds. The same holds for a first-format segment. An intact
// record above the lowered limit stays readable.
func TestOpenTornRecordAboveMaxRecordSize(t *testing.T) {
	big := strings.Repeat("B", 64<<10)
	lowered := DefaultConfig()
	lowered.MaxRecordSize = 1 << 10

	t.Run("batch", func(t *testing.T) {
		dir := t.TempDir()
		j, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, j, rec(1))
		mustAppend(t, j, rec(2))
		mustAppend(t, j, big)
		closeJournal(t, j)
		seg := segmentPaths(t, dir)[0]
		at, _ := tearLastBatch(t, seg)

		j, err = Open(dir, lowered)
		if err != nil {
			t.Fatalf("Open with MaxRecordSize %d of a journal whose torn last record has %d bytes: %v", lowered.MaxRecordSize, len(big), err)
		}
		defer closeJournal(t, j)
		if torn := j.Recovery().Torn; torn == nil || torn.File != seg || torn.Offset != at {
			t.Errorf("Recovery().Torn = %v, want the torn batch at %s offset %d", torn, seg, at)
		}
		if size := fileSize(t, seg); size != at {
			t.Errorf("segment is %d bytes after Open, want %d", size, at)
		}
		if diff := cmp.Diff(records(1, 2), replayAll(t, j)); diff != "" {
			t.Errorf("Replay (-want +got):\n%s", diff)
		}
	})
	t.Run("first format", func(t *testing.T) {
		dir := t.TempDir()
		b := slices.Clone(segmentMagicV1[:])
		b = appendFrame(b, 1, []byte(rec(1)))
		b = appendFrame(b, 2, []byte(rec(2)))
		cut := len(b)
		b = appendFrame(b, 3, []byte(big))
		seg := filepath.Join(dir, fileName{kind: kindSegment, seq: 0, index: 1}.String())
		if err := os.WriteFile(seg, b[:cut+len(big)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, lowered)
		if err != nil {
			t.Fatalf("Open with MaxRecordSize %d of a first-format journal whose torn last record has %d bytes: %v", lowered.MaxRecordSize, len(big), err)
		}
		defer closeJournal(t, j)
		if torn := j.Recovery().Torn; torn == nil || torn.File != seg || torn.Offset != int64(cut) {
			t.Errorf("Recovery().Torn = %v, want the torn frame at %s offset %d", torn, seg, cut)
		}
		if diff := cmp.Diff(records(1, 2), replayAll(t, j)); diff != "" {
			t.Errorf("Replay (-want +got):\n%s", diff)
		}
	})
	t.Run("intact", func(t *testing.T) {
		dir := t.TempDir()
		j, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, j, rec(1))
		mustAppend(t, j, big)
		closeJournal(t, j)
		want := []entry{{1, false, rec(1)}, {2, false, big}}
		if diff := cmp.Diff(want, reopen(t, dir, lowered)); diff != "" {
			t.Errorf("Replay with a lowered MaxRecordSize (-want +got):\n%s", diff)
		}
	})
}

// segmentBytes returns the bytes of every segment in dir, by name.
func segmentBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range segmentPaths(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(b)
	}
	return out
}

// checkAppendsInNewSegment checks that after a reopen, every segment that
// existed before (old) is byte-for-byte unchanged, and that exactly one
// new segment holds the records appended since, first..last.
func checkAppendsInNewSegment(t *testing.T, dir string, old map[string]string, first, last uint64) {
	t.Helper()
	now := segmentBytes(t, dir)
	var added []string
	for n, b := range now {
		o, ok := old[n]
		if !ok {
			added = append(added, n)
			continue
		}
		if o != b {
			t.Errorf("segment %s changed after a reopen and appends (%d bytes, was %d): appends went into an older segment", n, len(b), len(o))
		}
	}
	for n := range old {
		if _, ok := now[n]; !ok {
			t.Errorf("segment %s disappeared", n)
		}
	}
	if len(added) != 1 {
		t.Fatalf("reopen and appends added segments %v, want exactly one", added)
	}
	name, _ := parseFileName(added[0])
	for n := range old {
		if o, _ := parseFileName(n); o.seq >= name.seq {
			t.Errorf("new segment %s has seq %d, not above older segment %s", added[0], name.seq, n)
		}
	}
	if name.index != first {
		t.Errorf("new segment %s starts at index %d, want %d", added[0], name.index, first)
	}
	// The new segment is in the current format (layout reads batches)
	// and holds exactly first..last.
	frames, _, _ := layout(t, filepath.Join(dir, added[0]))
	var got []uint64
	for _, off := range frames {
		index, _, _, ferr := decodeFrame([]byte(now[added[0]][off:]))
		if ferr != nil {
			t.Fatalf("%s at %d: %v", added[0], off, ferr)
		}
		got = append(got, index)
	}
	var want []uint64
	for i := first; i <= last; i++ {
		want = append(want, i)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record indexes in the new segment %s (-want +got):\n%s", added[0], diff)
	}
}

// TestOpenStartsNewSegment reopens a journal several times, appending in
// between: each Open of a journal whose newest segment has records starts
// a new segment, and appends never change an older segment's bytes. A
// first-format segment is never appended to either.
func TestOpenStartsNewSegment(t *testing.T) {
	t.Run("current format", func(t *testing.T) {
		dir := t.TempDir()
		build(t, dir, DefaultConfig(), 5)
		next := uint64(6)
		for range 3 {
			old := segmentBytes(t, dir)
			j, err := Open(dir, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			first := next
			for range 3 {
				mustAppend(t, j, rec(int(next)))
				next++
			}
			closeJournal(t, j)
			checkAppendsInNewSegment(t, dir, old, first, next-1)
		}
		if diff := cmp.Diff(records(1, int(next-1)), reopen(t, dir, DefaultConfig())); diff != "" {
			t.Errorf("Replay (-want +got):\n%s", diff)
		}
	})
	t.Run("first format", func(t *testing.T) {
		dir := t.TempDir()
		b := slices.Clone(segmentMagicV1[:])
		for i := 1; i <= 4; i++ {
			b = appendFrame(b, uint64(i), []byte(rec(i)))
		}
		if err := os.WriteFile(filepath.Join(dir, fileName{kind: kindSegment, seq: 0, index: 1}.String()), b, 0o600); err != nil {
			t.Fatal(err)
		}
		old := segmentBytes(t, dir)
		j, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, j, rec(5))
		mustAppend(t, j, rec(6), rec(7))
		closeJournal(t, j)
		checkAppendsInNewSegment(t, dir, old, 5, 7)
		if diff := cmp.Diff(records(1, 7), reopen(t, dir, DefaultConfig())); diff != "" {
			t.Errorf("Replay (-want +got):\n%s", diff)
		}
	})
}

// TestOpenAfterWriteFailure fails a batch after its sync (the afterStep
// hook at "batch-synced", as a failed fsync would): that Append and every
// later one return ErrFailed. After Close and Open, new appends go to a
// new segment, the segment written before the failure is unchanged, and
// every record acknowledged before the failure is replayed (the failed
// one may be too: an error means unknown, not absent).
func TestOpenAfterWriteFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const failAt = 6 // the 6th batch fails
	cfg := DefaultConfig()
	batches := 0
	cfg.afterStep = func(step string) error {
		if step == "batch-synced" {
			if batches++; batches == failAt {
				return errCrash
			}
		}
		return nil
	}
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < failAt; i++ {
		mustAppend(t, j, rec(i))
	}
	if _, err := j.Append(ctx, []byte(rec(failAt))); !errors.Is(err, ErrFailed) || !errors.Is(err, errCrash) {
		t.Fatalf("Append whose sync failed: err = %v, want ErrFailed wrapping the failure", err)
	}
	if _, err := j.Append(ctx, []byte("after the failure")); !errors.Is(err, ErrFailed) {
		t.Errorf("Append after the failure: err = %v, want ErrFailed", err)
	}
	closeJournal(t, j)

	old := segmentBytes(t, dir)
	j, err = Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open after a write failure: %v", err)
	}
	got := replayAll(t, j)
	acked := records(1, failAt-1)
	if len(got) < len(acked) || len(got) > failAt {
		closeJournal(t, j)
		t.Fatalf("Replay after the failure has %d records, want the %d acknowledged and at most the failed one", len(got), len(acked))
	}
	if diff := cmp.Diff(acked, got[:len(acked)]); diff != "" {
		t.Errorf("acknowledged records after the failure (-want +got):\n%s", diff)
	}
	if len(got) == failAt {
		if diff := cmp.Diff(records(failAt, failAt), got[failAt-1:]); diff != "" {
			t.Errorf("the record whose Append failed (-want +got):\n%s", diff)
		}
	}
	next := len(got) + 1
	mustAppend(t, j, rec(next))
	mustAppend(t, j, rec(next+1), rec(next+2))
	closeJournal(t, j)
	checkAppendsInNewSegment(t, dir, old, uint64(next), uint64(next+2))
	if diff := cmp.Diff(records(1, next+2), reopen(t, dir, DefaultConfig())); diff != "" {
		t.Errorf("Replay after appending again (-want +got):\n%s", diff)
	}
}

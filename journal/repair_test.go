package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func segName(t *testing.T, path string) fileName {
	t.Helper()
	n, ok := parseFileName(filepath.Base(path))
	if !ok {
		t.Fatalf("%s is not a journal file name", path)
	}
	return n
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestSegmentDamage damages the set of segments, checks the exact error
// from Open, then that Repair cuts exactly there.
func TestSegmentDamage(t *testing.T) {
	src := t.TempDir()
	cfg := smallConfig()
	build(t, src, cfg, 60)
	segs := segmentPaths(t, src)
	if len(segs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(segs))
	}
	base := func(i int) string { return filepath.Base(segs[i]) }
	n1, n2 := segName(t, segs[1]), segName(t, segs[2])
	nLast := segName(t, segs[len(segs)-1])
	copyAs := func(t *testing.T, dir string, from int, to fileName) {
		b, err := os.ReadFile(filepath.Join(dir, base(from)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to.String()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		damage   func(t *testing.T, dir string)
		errFile  string // base name
		errOff   int64
		reason   string
		moved    []string // base names Repair moves aside
		replayed []entry  // after Repair
	}{
		{
			name:     "missing segment",
			damage:   func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, base(1))) },
			errFile:  base(0),
			errOff:   fileSize(t, segs[0]),
			reason:   "missing segment: segment seq 2 follows seq 0",
			moved:    names(segs[2:]),
			replayed: records(1, int(n1.index)-1),
		},
		{
			name:     "duplicate segment at the end",
			damage:   func(t *testing.T, dir string) { copyAs(t, dir, 1, fileName{kindSegment, nLast.seq + 1, n1.index}) },
			errFile:  base(len(segs) - 1),
			errOff:   fileSize(t, segs[len(segs)-1]),
			reason:   "duplicate records:",
			moved:    []string{fileName{kindSegment, nLast.seq + 1, n1.index}.String()},
			replayed: records(1, 60),
		},
		{
			name:     "duplicate seq",
			damage:   func(t *testing.T, dir string) { copyAs(t, dir, 1, fileName{kindSegment, n1.seq, n1.index + 1}) },
			errFile:  base(1),
			errOff:   fileSize(t, segs[1]),
			reason:   "duplicate segment seq: segment seq 1 follows seq 1",
			moved:    append([]string{fileName{kindSegment, n1.seq, n1.index + 1}.String()}, names(segs[2:])...),
			replayed: records(1, int(n2.index)-1),
		},
		{
			name: "index gap",
			damage: func(t *testing.T, dir string) {
				os.Rename(filepath.Join(dir, base(2)), filepath.Join(dir, fileName{kindSegment, n2.seq, n2.index + 1}.String()))
			},
			errFile:  base(1),
			errOff:   fileSize(t, segs[1]),
			reason:   "index gap:",
			moved:    append([]string{fileName{kindSegment, n2.seq, n2.index + 1}.String()}, names(segs[3:])...),
			replayed: records(1, int(n2.index)-1),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			tt.damage(t, dir)
			before := dirContents(t, dir)
			_, err := Open(dir, cfg)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Open: err = %v, want a *CorruptError", err)
			}
			if ce.File != filepath.Join(dir, tt.errFile) || ce.Offset != tt.errOff || !strings.HasPrefix(ce.Reason, tt.reason) {
				t.Errorf("Open: %v, want file %s, offset %d, reason starting %q", ce, tt.errFile, tt.errOff, tt.reason)
			}
			if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
				t.Fatalf("Open changed the files (-before +after):\n%s", diff)
			}

			rep, err := Repair(dir)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			var moved []string
			for _, c := range rep.Cuts {
				if c.Offset != -1 || c.Reason.Offset != tt.errOff || c.Bytes != int64(len(before[filepath.Base(c.File)])) {
					t.Errorf("Repair cut %+v, want a whole file moved aside for the damage at %d", c, tt.errOff)
				}
				if b, err := os.ReadFile(c.Backup); err != nil || string(b) != before[filepath.Base(c.File)] {
					t.Errorf("backup %s of %s does not hold the original bytes (err %v)", c.Backup, c.File, err)
				}
				moved = append(moved, filepath.Base(c.File))
			}
			if diff := cmp.Diff(tt.moved, moved); diff != "" {
				t.Errorf("Repair moved aside (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.replayed, reopen(t, dir, cfg)); diff != "" {
				t.Errorf("Replay after Repair (-want +got):\n%s", diff)
			}
			if rep, err := Repair(dir); err != nil || len(rep.Cuts) != 0 {
				t.Errorf("second Repair = (%+v, %v), want no cuts", rep, err)
			}
		})
	}
}

func names(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}

func TestRepairTruncatesAtLastGoodRecord(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	build(t, dir, cfg, 60)
	segs := segmentPaths(t, dir)
	offs, size := frameOffsets(t, segs[1])
	first := int(segName(t, segs[1]).index)
	bad := 3 // the fourth record of segment 1
	orig, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	damaged := append([]byte{}, orig...)
	damaged[offs[bad]+wordSize+bodyHeaderSize] ^= 0x10
	if err := os.WriteFile(segs[1], damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	later := dirContents(t, dir)

	rep, err := Repair(dir)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if len(rep.Cuts) != len(segs)-1 {
		t.Fatalf("Repair made %d cuts, want %d: %+v", len(rep.Cuts), len(segs)-1, rep.Cuts)
	}
	c := rep.Cuts[0]
	cut := offs[bad] - batchHeaderSize // the record's batch goes whole: it holds only that record
	if c.File != segs[1] || c.Offset != cut || c.Bytes != size-cut ||
		c.Reason.File != segs[1] || c.Reason.Offset != offs[bad] || !strings.Contains(c.Reason.Reason, "CRC-32C mismatch") {
		t.Errorf("first cut = %+v (reason %v), want %s truncated at %d (%d bytes) for a CRC mismatch at %d", c, c.Reason, segs[1], cut, size-cut, offs[bad])
	}
	if b, err := os.ReadFile(c.Backup); err != nil || string(b) != string(damaged) {
		t.Errorf("backup %s does not hold the damaged file (err %v)", c.Backup, err)
	}
	if got := fileSize(t, segs[1]); got != cut {
		t.Errorf("%s is %d bytes after Repair, want %d", segs[1], got, cut)
	}
	for i, c := range rep.Cuts[1:] {
		if c.File != segs[i+2] || c.Offset != -1 {
			t.Errorf("cut %d = %+v, want %s moved aside", i+1, c, segs[i+2])
		}
		if b, err := os.ReadFile(c.Backup); err != nil || string(b) != later[filepath.Base(c.File)] {
			t.Errorf("backup %s does not hold %s (err %v)", c.Backup, c.File, err)
		}
	}
	want := records(1, first+bad-1)
	if diff := cmp.Diff(want, reopen(t, dir, cfg)); diff != "" {
		t.Errorf("Replay after Repair (-want +got):\n%s", diff)
	}
	// The repaired journal takes appends at the next index.
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if last := mustAppend(t, j, "next"); last != uint64(first+bad) {
		t.Errorf("Append after Repair: last = %d, want %d", last, first+bad)
	}
	closeJournal(t, j)
}

func TestRepairCleanJournal(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, smallConfig(), 20)
	before := dirContents(t, dir)
	rep, err := Repair(dir)
	if err != nil || len(rep.Cuts) != 0 {
		t.Fatalf("Repair of a sound journal = (%+v, %v), want no cuts", rep, err)
	}
	if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
		t.Errorf("Repair of a sound journal changed the files (-before +after):\n%s", diff)
	}
	if _, err := Repair(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Repair of a missing directory: err = %v, want os.ErrNotExist", err)
	}
}

func TestCorruptSnapshot(t *testing.T) {
	flipSnapshot := func(t *testing.T, dir string) string {
		for _, n := range fileNames(t, dir) {
			if strings.HasSuffix(n, snapshotExt) {
				p := filepath.Join(dir, n)
				b, _ := os.ReadFile(p)
				b[len(b)-9] ^= 1
				os.WriteFile(p, b, 0o600)
				return p
			}
		}
		t.Fatal("no snapshot")
		return ""
	}
	snapshotAt := func(t *testing.T, dir string, cfg Config, n int, index uint64) {
		build(t, dir, cfg, n)
		j, err := Open(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Snapshot(context.Background(), index, []byte("state")); err != nil {
			t.Fatal(err)
		}
		closeJournal(t, j)
	}

	t.Run("records still there", func(t *testing.T) {
		dir := t.TempDir()
		snapshotAt(t, dir, DefaultConfig(), 10, 5) // one segment: nothing compacted
		path := flipSnapshot(t, dir)
		_, err := Open(dir, DefaultConfig())
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != path || ce.Offset != int64(len(snapshotMagic)) {
			t.Fatalf("Open: err = %v, want a *CorruptError in %s at offset 8", err, path)
		}
		rep, err := Repair(dir)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		if len(rep.Cuts) != 1 || rep.Cuts[0].File != path || rep.Cuts[0].Offset != -1 {
			t.Fatalf("Repair cuts = %+v, want the snapshot moved aside", rep.Cuts)
		}
		if diff := cmp.Diff(records(1, 10), reopen(t, dir, DefaultConfig())); diff != "" {
			t.Errorf("Replay after Repair (-want +got):\n%s", diff)
		}
	})
	t.Run("records compacted", func(t *testing.T) {
		dir := t.TempDir()
		snapshotAt(t, dir, smallConfig(), 60, 50)
		flipSnapshot(t, dir)
		before := dirContents(t, dir)
		rep, err := Repair(dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "compacted") || len(rep.Cuts) != 0 {
			t.Fatalf("Repair = (%+v, %v), want no cuts and an error wrapping ErrCorrupt saying the records were compacted", rep, err)
		}
		if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
			t.Errorf("a refused Repair changed the files (-before +after):\n%s", diff)
		}
	})
}

func TestRecordsMissingAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	build(t, dir, cfg, 60)
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Snapshot(context.Background(), 5, []byte("s5")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	segs := segmentPaths(t, dir)
	if segName(t, segs[0]).index > 6 {
		t.Fatalf("first segment %s does not hold record 6", segs[0])
	}
	os.Remove(segs[0])
	next := segName(t, segs[1])
	_, err = Open(dir, cfg)
	var ce *CorruptError
	wantReason := fmt.Sprintf("records 6 to %d are missing", next.index-1)
	if !errors.As(err, &ce) || ce.File != segs[1] || ce.Offset != 0 || !strings.HasPrefix(ce.Reason, wantReason) {
		t.Fatalf("Open: err = %v, want a *CorruptError in %s at 0 starting %q", err, segs[1], wantReason)
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(names(segs[1:]), cutFiles(rep)); diff != "" {
		t.Errorf("Repair moved aside (-want +got):\n%s", diff)
	}
	j, err = Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeJournal(t, j)
	if diff := cmp.Diff([]entry{{5, true, "s5"}}, replayAll(t, j)); diff != "" {
		t.Errorf("Replay after Repair (-want +got):\n%s", diff)
	}
	if last := mustAppend(t, j, "r6"); last != 6 {
		t.Errorf("Append after Repair: last = %d, want 6", last)
	}
}

func cutFiles(rep RepairReport) []string {
	var out []string
	for _, c := range rep.Cuts {
		out = append(out, filepath.Base(c.File))
	}
	return out
}

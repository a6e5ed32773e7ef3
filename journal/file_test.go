package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rec returns the test record with index i: sizes vary from 11 to 60 bytes.
func rec(i int) string {
	return fmt.Sprintf("record-%03d", i) + strings.Repeat(string(rune('a'+i%26)), i*7%50)
}

// records returns the entries of records first..last as rec makes them.
func records(first, last int) []entry {
	var out []entry
	for i := first; i <= last; i++ {
		out = append(out, entry{uint64(i), false, rec(i)})
	}
	return out
}

func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.SegmentSize = MinSegmentSize
	return cfg
}

// build writes records 1..n, one Append each, into a journal in dir.
func build(t *testing.T, dir string, cfg Config, n int) {
	t.Helper()
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		mustAppend(t, j, rec(i))
	}
	closeJournal(t, j)
}

// segmentPaths returns the segment files in dir, in seq order.
func segmentPaths(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range fileNames(t, dir) {
		if fn, ok := parseFileName(n); ok && fn.kind == kindSegment {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// frameOffsets returns the start offset of every frame of a segment file
// (the batch headers skipped), and the file's size.
func frameOffsets(t *testing.T, path string) ([]int64, int64) {
	t.Helper()
	offs, _, size := layout(t, path)
	return offs, size
}

// layout returns the offsets of every frame and of every batch header of a
// segment file, and the file's size.
func layout(t *testing.T, path string) (frames, batches []int64, size int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(len(segmentMagic)); off < int64(len(b)); {
		h, err := parseBatchHeader(b[off:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, off, err)
		}
		batches = append(batches, off)
		end := off + batchHeaderSize + h.payloadLen
		for p := off + batchHeaderSize; p < end; {
			_, _, n, ferr := decodeFrame(b[p:end])
			if ferr != nil {
				t.Fatalf("%s at %d: %v", path, p, ferr)
			}
			frames = append(frames, p)
			p += int64(n)
		}
		off = end
	}
	return frames, batches, int64(len(b))
}

// dirContents returns every file's bytes, to check that nothing changed.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range fileNames(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = string(b)
	}
	return out
}

// copyDir copies the files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for n, b := range dirContents(t, src) {
		if err := os.WriteFile(filepath.Join(dst, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// reopen opens dir and returns what it replays.
func reopen(t *testing.T, dir string, cfg Config) []entry {
	t.Helper()
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer closeJournal(t, j)
	return replayAll(t, j)
}

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"default", DefaultConfig(), ""},
		{"segment too small", mod(func(c *Config) { c.SegmentSize = 1023 }), "journal: Config.SegmentSize is 1023, want at least 1024"},
		{"zero means the defaults", Config{}, ""},
		{"segment negative", mod(func(c *Config) { c.SegmentSize = -1 }), "journal: Config.SegmentSize is -1, want at least 1024"},
		{"record size negative", mod(func(c *Config) { c.MaxRecordSize = -1 }), "journal: Config.MaxRecordSize is -1, want 1 to 1073741824"},
		{"record size too big", mod(func(c *Config) { c.MaxRecordSize = 1<<30 + 1 }), "journal: Config.MaxRecordSize is 1073741825, want 1 to 1073741824"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.cfg.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
			if tt.want != "" {
				if _, err := Open(t.TempDir(), tt.cfg); err == nil || err.Error() != tt.want {
					t.Errorf("Open with invalid config: err = %v, want %q", err, tt.want)
				}
			}
		})
	}
	if d := DefaultConfig(); d.SegmentSize != 64<<20 || d.MaxRecordSize != 4<<20 {
		t.Errorf("DefaultConfig() = %+v, want SegmentSize 64 MiB, MaxRecordSize 4 MiB", d)
	}
	if got, want := (Config{}).withDefaults(), DefaultConfig(); got.SegmentSize != want.SegmentSize || got.MaxRecordSize != want.MaxRecordSize {
		t.Errorf("Config{} with defaults = %+v, want DefaultConfig() %+v", got, want)
	}
}

func TestFileReopenRollAndCompact(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := smallConfig()
	build(t, dir, cfg, 60)
	segs := segmentPaths(t, dir)
	if len(segs) < 3 {
		t.Fatalf("60 records in 1 KiB segments made %d segments, want at least 3", len(segs))
	}
	for _, p := range segs {
		if _, size := frameOffsets(t, p); p != segs[len(segs)-1] && size < cfg.SegmentSize {
			t.Errorf("%s is %d bytes but a later segment exists (SegmentSize %d)", p, size, cfg.SegmentSize)
		}
	}
	if diff := cmp.Diff(records(1, 60), reopen(t, dir, cfg)); diff != "" {
		t.Fatalf("Replay after reopen (-want +got):\n%s", diff)
	}

	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if last := mustAppend(t, j, rec(61)); last != 61 {
		t.Errorf("first Append after reopen: last = %d, want 61", last)
	}
	if err := j.Snapshot(ctx, 40, []byte("state@40")); err != nil {
		t.Fatal(err)
	}
	// Exactly the segments holding a record after 40 remain.
	var firsts []uint64
	for _, p := range segmentPaths(t, dir) {
		n, _ := parseFileName(filepath.Base(p))
		firsts = append(firsts, n.index)
	}
	if firsts[0] > 41 || (len(firsts) > 1 && firsts[1] <= 41) {
		t.Errorf("after Snapshot(40) the segments start at %v: want the first to hold record 41 and no earlier segment", firsts)
	}
	closeJournal(t, j)
	want := append([]entry{{40, true, "state@40"}}, records(41, 61)...)
	if diff := cmp.Diff(want, reopen(t, dir, cfg)); diff != "" {
		t.Errorf("Replay after Snapshot(40) and reopen (-want +got):\n%s", diff)
	}
	snaps := 0
	for _, n := range fileNames(t, dir) {
		if strings.HasSuffix(n, snapshotExt) {
			snaps++
		}
	}
	if snaps != 1 {
		t.Errorf("%d snapshot files, want 1", snaps)
	}
}

func TestFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "journal")
	j, err := Open(dir, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		mustAppend(t, j, rec(i))
	}
	if err := j.Snapshot(context.Background(), 10, []byte("s")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, fi.Mode().Perm())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFileLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	j2, err := Open(dir, DefaultConfig())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Errorf("second Open: (%v, %v), want an error wrapping ErrLocked naming %s", j2, err, dir)
	}
	if j2 != nil {
		j2.Close()
	}
	if _, err := Repair(dir); !errors.Is(err, ErrLocked) {
		t.Errorf("Repair of an open directory: err = %v, want ErrLocked", err)
	}
	mustAppend(t, j, "still works")
	closeJournal(t, j)
	j3, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	closeJournal(t, j3)
}

func TestTornTailEveryOffset(t *testing.T) {
	src := t.TempDir()
	build(t, src, DefaultConfig(), 5)
	segs := segmentPaths(t, src)
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	_, offs, size := layout(t, segs[0]) // one batch per record
	name := filepath.Base(segs[0])
	pristine := dirContents(t, src)
	for cut := offs[4]; cut <= size; cut++ {
		dir := t.TempDir()
		for n, b := range pristine {
			if n == name {
				b = b[:cut]
			}
			if err := os.WriteFile(filepath.Join(dir, n), []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		want, wantSize := records(1, 4), offs[4]
		if cut == size {
			want, wantSize = records(1, 5), size
		}
		if diff := cmp.Diff(want, reopen(t, dir, DefaultConfig())); diff != "" {
			t.Fatalf("cut at %d (last batch %d..%d): Replay (-want +got):\n%s", cut, offs[4], size, diff)
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() != wantSize {
			t.Fatalf("cut at %d: segment size after Open = %v (%v), want %d", cut, fi.Size(), err, wantSize)
		}
	}
}

// TestZeroedSector zeroes a 512-byte sector: at the end of the file that
// is what a crash can leave of the last write (the batch that holds the
// sector's start is cut, and every batch after it); in the middle it is
// damage, reported at the first header or frame it touches.
func TestZeroedSector(t *testing.T) {
	src := t.TempDir()
	build(t, src, DefaultConfig(), 60)
	seg := segmentPaths(t, src)[0]
	name := filepath.Base(seg)
	frames, batches, size := layout(t, seg) // one batch per record
	// firstEndingAfter returns the position of the first batch that ends
	// after off.
	firstEndingAfter := func(off int64) int {
		for i := range batches {
			end := size
			if i+1 < len(batches) {
				end = batches[i+1]
			}
			if end > off {
				return i
			}
		}
		t.Fatalf("no batch ends after %d", off)
		return 0
	}
	zero := func(t *testing.T, from, to int64) string {
		dir := copyDir(t, src)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		clear(b[from:to])
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}

	t.Run("last sector", func(t *testing.T) {
		start := (size - 1) / sectorSize * sectorSize
		dir := zero(t, start, size)
		i := firstEndingAfter(start) // batches 0..i-1 survive
		if diff := cmp.Diff(records(1, i), reopen(t, dir, DefaultConfig())); diff != "" {
			t.Errorf("zeroed %d..%d: Replay (-want +got):\n%s", start, size, diff)
		}
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Size() != batches[i] {
			t.Errorf("segment size after Open = %d, want %d", fi.Size(), batches[i])
		}
	})
	t.Run("middle sector", func(t *testing.T) {
		start := int64(sectorSize)
		dir := zero(t, start, start+sectorSize)
		before := dirContents(t, dir)
		i := firstEndingAfter(start)
		want := batches[i] // the header, when the zeroes reach it
		if start >= batches[i]+batchHeaderSize {
			want = frames[i]
		}
		_, err := Open(dir, DefaultConfig())
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != filepath.Join(dir, name) || ce.Offset != want {
			t.Fatalf("Open: err = %v, want a *CorruptError in %s at offset %d", err, name, want)
		}
		if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
			t.Errorf("Open of a corrupt journal changed the files (-before +after):\n%s", diff)
		}
	})
}

func TestFlippedBit(t *testing.T) {
	src := t.TempDir()
	build(t, src, DefaultConfig(), 5)
	seg := segmentPaths(t, src)[0]
	name := filepath.Base(seg)
	offs, _ := frameOffsets(t, seg)
	o2, o5 := offs[1], offs[4]
	tests := []struct {
		name   string
		at     int64
		bit    uint
		reason string
	}{
		{"record 2 data", o2 + wordSize + bodyHeaderSize + 3, 0, "CRC-32C mismatch"},
		{"record 2 CRC", o2 + wordSize, 7, "CRC-32C mismatch"},
		{"record 2 index", o2 + wordSize + 4, 1, "CRC-32C mismatch"},
		{"record 2 length bit 3", o2, 3, "frame body of"},
		{"record 2 length bit 20", o2 + 2, 4, "frame body of"},
		{"record 2 length bit 40", o2 + 5, 0, "frame body of"},
		{"record 2 marker", o2 + 7, 7, "top byte"},
		{"record 2 padding", offs[2] - batchHeaderSize - 1, 0, "non-zero padding"},
		{"last record data", o5 + wordSize + bodyHeaderSize, 2, "CRC-32C mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			path := filepath.Join(dir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[tt.at] ^= 1 << tt.bit
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			before := dirContents(t, dir)
			j, err := Open(dir, DefaultConfig())
			if j != nil {
				j.Close()
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: err = %v, want a *CorruptError wrapping ErrCorrupt", err)
			}
			wantOff := o2
			if strings.HasPrefix(tt.name, "last") {
				wantOff = o5
			}
			if ce.File != path || ce.Offset != wantOff || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("Open: %v, want file %s, offset %d, reason containing %q", ce, path, wantOff, tt.reason)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d", path, wantOff)) {
				t.Errorf("error %q does not name the file and offset", err)
			}
			if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
				t.Errorf("Open of a corrupt journal changed the files (-before +after):\n%s", diff)
			}
		})
	}
}

// TestFileSyncBeforeReturn checks that every Append returns only after an
// fsync that covers it: one appender at a time costs one fsync per append.
func TestFileSyncBeforeReturn(t *testing.T) {
	j, err := Open(t.TempDir(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer closeJournal(t, j)
	for i := 1; i <= 5; i++ {
		mustAppend(t, j, rec(i))
		if got := j.fsyncs.Load(); got != int64(i) {
			t.Fatalf("after %d sequential appends, %d fsyncs; want %d", i, got, i)
		}
	}
}

// TestFileGroupCommit holds the writer inside one batch while ten more
// appends queue up, then checks that those ten share one write and one
// fsync and get consecutive indexes.
func TestFileGroupCommit(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{})
	cfg := DefaultConfig()
	first := true
	cfg.afterStep = func(step string) error {
		if step == "batch-synced" && first {
			first = false
			close(held)
			<-release
		}
		return nil
	}
	j, err := Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeJournal(t, j)
	ctx := context.Background()
	firstDone := make(chan error)
	go func() { _, err := j.Append(ctx, []byte("first")); firstDone <- err }()
	<-held
	const queued = 10
	results := make(chan uint64, queued)
	for i := range queued {
		go func() {
			last, err := j.Append(ctx, []byte(fmt.Sprintf("queued-%d", i)))
			if err != nil {
				t.Error(err)
			}
			results <- last
		}()
	}
	for len(j.reqs) < queued { // wait until all ten are queued
		runtime.Gosched()
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range queued {
		got = append(got, <-results)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]uint64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, got); diff != "" {
		t.Errorf("indexes of the queued appends (-want +got):\n%s", diff)
	}
	if n := j.fsyncs.Load(); n != 2 {
		t.Errorf("%d fsyncs for one append and ten queued ones, want 2", n)
	}
}

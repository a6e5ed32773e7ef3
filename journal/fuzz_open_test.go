package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// openSeed is one input of FuzzOpen: the bytes of a segment file, and
// optionally the bytes of a snapshot file named for snapIndex.
type openSeed struct {
	seg       []byte
	snap      []byte // no snapshot file when empty
	snapIndex uint16
}

// fuzzSegName is the name FuzzOpen gives its segment: the first segment
// of a new journal.
var fuzzSegName = fileName{kind: kindSegment, seq: 0, index: 1}.String()

// seedRecord returns record i of a seed journal: n bytes of text.
func seedRecord(i, n int) []byte {
	b := []byte(fmt.Sprintf("seed-%03d:", i))
	for len(b) < n {
		b = append(b, byte('a'+(i+len(b))%26))
	}
	return b[:n]
}

// seedZeroTailed returns a record that ends in n zero bytes.
func seedZeroTailed(i, n int) []byte {
	return append([]byte(fmt.Sprintf("zero-tailed-%03d:", i)), make([]byte, n)...)
}

// writeSeedSegment appends calls (each one Append of its records) to a new
// journal with the real writer and a fixed clock, and returns the bytes of
// its segment.
func writeSeedSegment(tb testing.TB, calls [][][]byte) []byte {
	tb.Helper()
	dir := tb.TempDir()
	cfg := DefaultConfig()
	cfg.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
	j, err := Open(dir, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	for _, recs := range calls {
		if _, err := j.Append(context.Background(), recs...); err != nil {
			tb.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, fuzzSegName))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// seedBatches returns the offsets of the batch headers of a v2 segment.
func seedBatches(tb testing.TB, seg []byte) (batches []int64) {
	tb.Helper()
	for off := int64(len(segmentMagic)); off < int64(len(seg)); {
		h, err := parseBatchHeader(seg[off:])
		if err != nil {
			tb.Fatalf("seed segment at %d: %v", off, err)
		}
		batches = append(batches, off)
		off += batchHeaderSize + h.payloadLen
	}
	return batches
}

// openSeeds returns FuzzOpen's seeds, by name: journals written by the
// real writer, damaged the ways a crash or a disk can, and a first-format
// segment.
func openSeeds(tb testing.TB) map[string]openSeed {
	tb.Helper()
	r := seedRecord
	// Single appends and multi-record appends of 1 to 6 KB: batches span
	// several 512-byte sectors.
	manyCalls := [][][]byte{
		{r(1, 40)},
		{r(2, 1500), r(3, 3000), r(4, 6000)},
		{r(5, 90)},
		{r(6, 2500)},
		{r(7, 1024), r(8, 4096)},
		{r(9, 33)},
	}
	many := writeSeedSegment(tb, manyCalls)
	// The last record ends in more than two sectors of zeros, so the file
	// ends in a zero run that crosses a 512-byte boundary.
	zeroCalls := [][][]byte{
		{r(1, 40)},
		{r(2, 1200), r(3, 2000)},
		{r(4, 60)},
		{seedZeroTailed(5, 1100)},
	}
	zero := writeSeedSegment(tb, zeroCalls)
	zeroMulti := writeSeedSegment(tb, [][][]byte{
		{r(1, 700)},
		{r(2, 3000), seedZeroTailed(3, 1500)},
	})

	manyB, zeroB := seedBatches(tb, many), seedBatches(tb, zero)
	lastMany, lastZero := manyB[len(manyB)-1], zeroB[len(zeroB)-1]
	clone := func(b []byte) []byte { return slices.Clone(b) }
	flip := func(b []byte, at int64, bit uint) []byte { b = clone(b); b[at] ^= 1 << bit; return b }
	zeroRange := func(b []byte, from, to int64) []byte { b = clone(b); clear(b[from:to]); return b }

	// A first-format segment: the v1 magic and bare frames.
	v1 := slices.Clone(segmentMagicV1[:])
	for i := 1; i <= 5; i++ {
		v1 = appendFrame(v1, uint64(i), r(i, 100*i))
	}
	snap := func(index uint64, state string) []byte {
		return appendFrame(slices.Clone(snapshotMagic[:]), index, []byte(state))
	}

	// The frame after the header of the third batch of many: a middle frame.
	mid := manyB[2] + batchHeaderSize
	return map[string]openSeed{
		"empty":                 {seg: clone(segmentMagic[:])},
		"batches":               {seg: many},
		"zero-tailed":           {seg: zero},
		"zero-tailed-multi":     {seg: zeroMulti},
		"truncated-last-batch":  {seg: clone(many[:len(many)-100])},
		"truncated-in-header":   {seg: clone(many[:lastMany+20])},
		"truncated-after-magic": {seg: clone(many[:len(segmentMagic)+3])},
		"truncated-zero-tail":   {seg: clone(zero[:len(zero)-600])},
		"zeroed-last-sector":    {seg: zeroRange(many, (int64(len(many))-1)/sectorSize*sectorSize, int64(len(many)))},
		"flipped-middle-frame":  {seg: flip(many, mid+wordSize+bodyHeaderSize+5, 3)},
		// Defect 1 of issue 10: a zero tail and a bad length word in an
		// earlier frame, and in an earlier batch header.
		"zero-tailed-flipped-frame-length":  {seg: flip(zero, zeroB[1]+batchHeaderSize+1, 2)},
		"zero-tailed-flipped-header-length": {seg: flip(zero, zeroB[1]+1, 4)},
		"zero-tailed-flipped-last-header":   {seg: flip(zero, lastZero+2, 0)},
		"v1":                                {seg: v1},
		"v1-truncated":                      {seg: clone(v1[:len(v1)-50])},
		"snapshot":                          {seg: many, snap: snap(4, "state@4"), snapIndex: 4},
		"snapshot-zero-tailed":              {seg: zero, snap: snap(5, "state@5"), snapIndex: 5},
		"snapshot-past-records":             {seg: many, snap: snap(200, "state@200"), snapIndex: 200},
		"snapshot-bad-crc":                  {seg: many, snap: flip(snap(3, "state@3"), 8+wordSize+bodyHeaderSize+1, 1), snapIndex: 3},
	}
}

// FuzzOpen fuzzes the open path: the input is one segment file (and
// optionally a snapshot file) in a fresh directory, which OpenReadOnly and
// Open must either read or refuse with a *CorruptError naming a file and
// an offset in it, leaving the directory as it was. Whatever OpenReadOnly
// reads, Open reads too (after truncating the torn tail that
// OpenReadOnly leaves), and an Append after a successful Open is
// replayed after reopening. The seeds are built by openSeeds and
// committed in testdata/fuzz/FuzzOpen.
func FuzzOpen(f *testing.F) {
	seeds := openSeeds(f)
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		s := seeds[name]
		f.Add(s.seg, s.snap, s.snapIndex)
	}
	f.Fuzz(func(t *testing.T, seg, snap []byte, snapIndex uint16) {
		ctx := context.Background()
		dir := t.TempDir()
		segPath := filepath.Join(dir, fuzzSegName)
		snapPath := ""
		if err := os.WriteFile(segPath, seg, 0o600); err != nil {
			t.Fatal(err)
		}
		if len(snap) > 0 {
			snapPath = filepath.Join(dir, fileName{kind: kindSnapshot, index: uint64(snapIndex)}.String())
			if err := os.WriteFile(snapPath, snap, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		before := dirContents(t, dir)
		unchanged := func(what string) {
			t.Helper()
			if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
				t.Fatalf("%s changed the directory (-before +after):\n%s", what, diff)
			}
		}
		// checkRefusal checks the error of an open that failed.
		checkRefusal := func(what string, err error) {
			t.Helper()
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: err = %v, want a *CorruptError", what, err)
			}
			size := int64(-1)
			switch ce.File {
			case segPath:
				size = int64(len(seg))
			case snapPath:
				size = int64(len(snap))
			}
			if size < 0 || ce.Offset < 0 || ce.Offset > size {
				t.Fatalf("%s: %v names file %s at offset %d, want the segment or the snapshot and an offset in it", what, err, ce.File, ce.Offset)
			}
		}

		var (
			roGot  []entry
			roTorn *TornTail
		)
		ro, roErr := OpenReadOnly(dir)
		if roErr == nil {
			var err error
			roGot, err = collect(ro)
			if err != nil {
				t.Fatalf("Replay after OpenReadOnly succeeded: %v", err)
			}
			roTorn = ro.Recovery().Torn
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			checkRefusal("OpenReadOnly", roErr)
		}
		unchanged("OpenReadOnly")

		j, err := Open(dir, DefaultConfig())
		if err != nil {
			checkRefusal("Open", err)
			unchanged("a failed Open")
			if roErr == nil {
				t.Fatalf("OpenReadOnly succeeded but Open failed: %v", err)
			}
			if err.Error() != roErr.Error() {
				t.Fatalf("Open and OpenReadOnly disagree about the damage: %v; %v", err, roErr)
			}
			return
		}
		defer func() {
			if j != nil {
				j.Close()
			}
		}()
		if roErr != nil {
			t.Fatalf("Open succeeded but OpenReadOnly failed: %v", roErr)
		}
		got, err := collect(j)
		if err != nil {
			t.Fatalf("Replay after Open: %v", err)
		}
		if diff := cmp.Diff(roGot, got); diff != "" {
			t.Fatalf("Open and OpenReadOnly replay different records (-read-only +open):\n%s", diff)
		}
		torn := j.Recovery().Torn
		if (torn == nil) != (roTorn == nil) || (torn != nil && (torn.File != roTorn.File || torn.Offset != roTorn.Offset || torn.Bytes != roTorn.Bytes)) {
			t.Fatalf("Open reports torn tail %v, OpenReadOnly %v", torn, roTorn)
		}
		if torn != nil {
			if torn.File != segPath || torn.Bytes <= 0 || torn.Offset+torn.Bytes != int64(len(seg)) {
				t.Fatalf("torn tail %v of a %d-byte segment %s", torn, len(seg), segPath)
			}
			if size := fileSize(t, segPath); size != torn.Offset {
				t.Fatalf("after Open the segment is %d bytes, want %d (truncated at the torn tail)", size, torn.Offset)
			}
		}

		last, err := j.Append(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got); n > 0 && got[n-1].Index != last {
			t.Fatalf("Append() = %d, but the last entry replayed has index %d", last, got[n-1].Index)
		}
		const extra = "appended by FuzzOpen"
		idx, err := j.Append(ctx, []byte(extra))
		if err != nil {
			t.Fatalf("Append after Open: %v", err)
		}
		if idx != last+1 {
			t.Fatalf("Append after Open = %d, want %d", idx, last+1)
		}
		err = j.Close()
		j = nil
		if err != nil {
			t.Fatal(err)
		}
		j2, err := Open(dir, DefaultConfig())
		if err != nil {
			t.Fatalf("reopen after an Append: %v", err)
		}
		got2, err := collect(j2)
		j2.Close()
		if err != nil {
			t.Fatalf("Replay after reopening: %v", err)
		}
		want := append(slices.Clone(got), entry{idx, false, extra})
		if diff := cmp.Diff(want, got2); diff != "" {
			t.Fatalf("Replay after Append and reopen (-want +got):\n%s", diff)
		}
	})
}

// TestWriteOpenFuzzSeeds rewrites testdata/fuzz/FuzzOpen from openSeeds
// when run with -write-fuzz-seeds; otherwise it checks that every seed
// openSeeds builds is committed there as it would write it. (Other files
// there, crashers that fuzzing found, are left alone.)
func TestWriteOpenFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	for name, s := range openSeeds(t) {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint16(%d)\n", s.seg, s.snap, s.snapIndex)
		writeOrCheckSeed(t, filepath.Join(dir, "seed-"+name), content, "TestWriteOpenFuzzSeeds")
	}
}

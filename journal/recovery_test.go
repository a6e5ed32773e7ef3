package journal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// zeroTailed returns a record of n bytes that starts with a few letters
// and ends in zeros: a journal whose last record is one of these ends in a
// run of zero bytes that crosses 512-byte boundaries.
func zeroTailed(tag string, n int) string {
	return tag + strings.Repeat("\x00", n-len(tag))
}

// writeBatches appends each call as one Append, one at a time (so each is
// one batch), closes the journal and returns its only segment's path.
func writeBatches(t *testing.T, dir string, calls [][]string) string {
	t.Helper()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		mustAppend(t, j, c...)
	}
	closeJournal(t, j)
	segs := segmentPaths(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	return segs[0]
}

// flatten returns the entries the calls append, from index 1.
func flatten(calls [][]string) []entry {
	var out []entry
	for _, c := range calls {
		for _, r := range c {
			out = append(out, entry{uint64(len(out) + 1), false, r})
		}
	}
	return out
}

// modelCalls is a write sequence whose batches span from one sector to
// several, some ending in zeros.
func modelCalls() [][]string {
	big := func(tag string, n int) string { return tag + strings.Repeat(tag[:1], n-len(tag)) }
	return [][]string{
		{"first"},
		{big("a-two", 300), "b-three"},
		{big("c-four", 700), zeroTailed("d-five", 900), big("e-six", 200)},
		{"f-seven"},
		{big("g-eight", 1500), zeroTailed("h-nine", 1200)},
	}
}

// TestRecoveryModel crashes during each batch of a write sequence: every
// earlier batch is durable, and of the last one the file may end at any
// byte and any of its sectors may read as zeros (it never reached the
// disk). Open must succeed every time and replay exactly the durable
// batches, plus the last one only when it is whole: never part of it.
func TestRecoveryModel(t *testing.T) {
	calls := modelCalls()
	seg := writeBatches(t, t.TempDir(), calls)
	name := filepath.Base(seg)
	_, batches, size := layout(t, seg)
	img, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	all := flatten(calls)
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	states, opened := 0, 0
	// check loads one crash image and checks what survives.
	check := func(k int, image []byte, what string) {
		t.Helper()
		states++
		if err := os.WriteFile(path, image, 0o600); err != nil {
			t.Fatal(err)
		}
		before := len(flatten(calls[:k]))
		whole := len(flatten(calls[:k+1]))
		st, dmg, err := load(dir)
		if err != nil || dmg != nil {
			t.Fatalf("batch %d, %s: load: err %v, damage %v", k, what, err, dmg)
		}
		got := int(st.last())
		if got != before && got != whole {
			t.Fatalf("batch %d, %s: %d records survive, want %d (the durable batches) or %d (and the last one whole)", k, what, got, before, whole)
		}
		if got == whole && string(image) != string(img[:len(image)]) {
			t.Fatalf("batch %d, %s: the damaged last batch was accepted", k, what)
		}
		if states%53 != 0 {
			return
		}
		// Now and then, the whole way: Open, Replay, and the file cut.
		opened++
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, name), image, 0o600); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(all[:got], reopen(t, d, DefaultConfig()), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("batch %d, %s: Replay (-want +got):\n%s", k, what, diff)
		}
	}
	for k := range calls {
		start := batches[k]
		end := size
		if k+1 < len(batches) {
			end = batches[k+1]
		}
		// The file ends anywhere in the last batch.
		for l := start; l <= end; l++ {
			check(k, img[:l], fmt.Sprintf("cut at %d", l))
		}
		// Any set of its sectors is zero, with the file whole or cut.
		first := start / sectorSize
		n := int((end-1)/sectorSize - first + 1)
		for mask := 1; mask < 1<<n; mask++ {
			for _, l := range []int64{end, end - 8, start + (end-start)/2} {
				image := append([]byte{}, img[:l]...)
				for s := range n {
					if mask&(1<<s) == 0 {
						continue
					}
					lo := max((first+int64(s))*sectorSize, start)
					hi := min((first+int64(s)+1)*sectorSize, l)
					if lo < hi {
						clear(image[lo:hi])
					}
				}
				check(k, image, fmt.Sprintf("sectors %b zero, cut at %d", mask, l))
			}
		}
	}
	t.Logf("%d crash states, %d opened in full", states, opened)
}

// unitAt returns the offset of what holds byte off of a segment: the
// magic (0), a batch header or a frame.
func unitAt(frames, batches []int64, off int64) int64 {
	u := int64(0)
	for _, b := range batches {
		if b <= off && b > u {
			u = b
		}
	}
	for _, f := range frames {
		if f <= off && f > u {
			u = f
		}
	}
	return u
}

// TestDamageSweep damages the newest segment of journals that end in data
// and in zeros: every bit of the batch headers and frame headers of the
// last frames, and random bytes anywhere. Each outcome must be a clean
// open with every acknowledged record, or a hard error naming the file and
// the offset of the first damaged header or frame; never a silent loss.
func TestDamageSweep(t *testing.T) {
	tails := map[string][][]string{
		"data tail": {
			{"one"}, {"two", "three"}, {strings.Repeat("four", 200)},
			{"five", strings.Repeat("six", 300), "seven"}, {"eight"}, {"nine", "ten"},
		},
		"zero tail": {
			{"one"}, {"two", "three"}, {zeroTailed("four", 1100)},
			{"five", zeroTailed("six", 700), "seven"}, {"eight"}, {"nine", zeroTailed("ten", 1300)},
		},
	}
	for name, calls := range tails {
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			seg := writeBatches(t, src, calls)
			frames, batches, size := layout(t, seg)
			img, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			all := flatten(calls)
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.Base(seg))
			try := func(at int64, image []byte, what string) {
				t.Helper()
				for _, e := range fileNames(t, dir) {
					os.Remove(filepath.Join(dir, e))
				}
				if err := os.WriteFile(path, image, 0o600); err != nil {
					t.Fatal(err)
				}
				j, err := Open(dir, DefaultConfig())
				if err == nil {
					got := replayAll(t, j)
					closeJournal(t, j)
					if diff := cmp.Diff(all, got); diff != "" {
						t.Fatalf("%s: Open succeeded but lost records (-want +got):\n%s", what, diff)
					}
					if string(image) != string(img) {
						t.Fatalf("%s: Open accepted a damaged segment", what)
					}
					return
				}
				var ce *CorruptError
				want := unitAt(frames, batches, at)
				if !errors.As(err, &ce) || ce.File != path || ce.Offset != want {
					t.Fatalf("%s: Open: %v; want a *CorruptError in %s at offset %d", what, err, path, want)
				}
			}
			// Every bit of the headers of the last six frames and their batches.
			var spans [][2]int64
			for _, f := range frames[len(frames)-6:] {
				spans = append(spans, [2]int64{f, f + wordSize + bodyHeaderSize})
				b := unitAt(nil, batches, f)
				spans = append(spans, [2]int64{b, b + batchHeaderSize})
			}
			flips := 0
			for _, sp := range spans {
				for at := sp[0]; at < sp[1]; at++ {
					for bit := range 8 {
						image := append([]byte{}, img...)
						image[at] ^= 1 << bit
						try(at, image, fmt.Sprintf("bit %d of byte %d flipped", bit, at))
						flips++
					}
				}
			}
			// Random bytes anywhere after the magic.
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			for range 400 {
				at := int64(len(segmentMagic)) + rng.Int64N(size-int64(len(segmentMagic)))
				image := append([]byte{}, img...)
				image[at] = byte(rng.IntN(256))
				try(at, image, fmt.Sprintf("byte %d set to %#02x", at, image[at]))
			}
			t.Logf("%d bit flips and 400 random bytes", flips)
		})
	}
}

// v1Segment returns a first-format segment: the version-1 magic, then bare
// frames of recs from index first.
func v1Segment(first uint64, recs []string) []byte {
	b := append([]byte{}, segmentMagicV1[:]...)
	for i, r := range recs {
		b = appendFrame(b, first+uint64(i), []byte(r))
	}
	return b
}

// TestDamageBeforeZeroTail is the regression test of a damaged frame taken
// for a torn tail: the file ends in zeros crossing a 512-byte boundary, and
// a flipped bit in an earlier frame's length word once made Open truncate
// every record after it. Both formats must refuse to open instead, naming
// the damaged frame, and change nothing.
func TestDamageBeforeZeroTail(t *testing.T) {
	recs := []string{"one", "two", "three", "four", "five", zeroTailed("six", 1400)}
	cases := map[string]func(t *testing.T, dir string) (path string, frame int64){
		"format 2": func(t *testing.T, dir string) (string, int64) {
			var calls [][]string
			for _, r := range recs {
				calls = append(calls, []string{r})
			}
			seg := writeBatches(t, dir, calls)
			frames, _, _ := layout(t, seg)
			return seg, frames[2]
		},
		"format 1": func(t *testing.T, dir string) (string, int64) {
			path := filepath.Join(dir, fileName{kind: kindSegment, seq: 0, index: 1}.String())
			if err := os.WriteFile(path, v1Segment(1, recs), 0o600); err != nil {
				t.Fatal(err)
			}
			return path, 8 + 24 + 24 // after the magic and two 24-byte frames
		},
	}
	for name, mk := range cases {
		for _, bit := range []uint{3, 4, 9, 12} { // the length grows by 8 to 4096 bytes
			t.Run(fmt.Sprintf("%s bit %d", name, bit), func(t *testing.T) {
				dir := t.TempDir()
				path, frame := mk(t, dir)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b[frame+int64(bit/8)] ^= 1 << (bit % 8)
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				before := dirContents(t, dir)
				j, err := Open(dir, DefaultConfig())
				if j != nil {
					j.Close()
				}
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.File != path || ce.Offset != frame {
					t.Fatalf("Open: %v, want a *CorruptError in %s at offset %d", err, path, frame)
				}
				if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
					t.Errorf("a failed Open changed the directory (-before +after):\n%s", diff)
				}
			})
		}
	}
}

// TestOpenFormat1 opens a journal of the first format: it replays, a torn
// last frame is truncated, and appends go to a new segment of format 2.
func TestOpenFormat1(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName{kind: kindSegment, seq: 0, index: 1}.String())
	img := v1Segment(1, []string{"one", "two", "three"})
	if err := os.WriteFile(path, img[:len(img)-5], 0o600); err != nil { // the last frame torn
		t.Fatal(err)
	}
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if tt := j.Recovery().Torn; tt == nil || tt.File != path || tt.Offset != 8+24+24 {
		t.Errorf("Recovery().Torn = %v, want %s at %d", tt, path, 8+24+24)
	}
	mustAppend(t, j, "four")
	closeJournal(t, j)
	want := []entry{{1, false, "one"}, {2, false, "two"}, {3, false, "four"}}
	if diff := cmp.Diff(want, reopen(t, dir, DefaultConfig())); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
	segs := segmentPaths(t, dir)
	if len(segs) < 2 {
		t.Fatalf("segments %v: want the first-format one and a new one", segs)
	}
	if b, _ := os.ReadFile(segs[1]); string(b[:8]) != string(segmentMagic[:]) {
		t.Errorf("%s starts with %q, want the format-2 magic", segs[1], b[:8])
	}
}

// TestRepairTwoCutsOneSegment is the regression test of a Repair that
// overwrote its own backup: damage in a record the snapshot covers cuts
// the segment, which then ends below the snapshot and is moved aside too.
// Each cut must keep a backup of its own, every removed byte must be in
// one, and a second Repair must change nothing.
func TestRepairTwoCutsOneSegment(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 40; i++ {
		mustAppend(t, j, rec(i))
	}
	if err := j.Snapshot(context.Background(), 30, []byte("state at 30")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	seg := segmentPaths(t, dir)[0]
	frames, _, _ := layout(t, seg)
	orig, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	orig[frames[9]+wordSize+bodyHeaderSize] ^= 0x40 // record 10's data
	if err := os.WriteFile(seg, orig, 0o600); err != nil {
		t.Fatal(err)
	}

	rep, err := Repair(dir)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if len(rep.Cuts) != 2 || rep.Cuts[0].File != seg || rep.Cuts[1].File != seg || rep.Cuts[1].Offset != -1 {
		t.Fatalf("cuts %+v: want %s truncated, then moved aside", rep.Cuts, seg)
	}
	if rep.Cuts[0].Backup == rep.Cuts[1].Backup {
		t.Fatalf("both cuts name the backup %s", rep.Cuts[0].Backup)
	}
	full, err := os.ReadFile(rep.Cuts[0].Backup)
	if err != nil || string(full) != string(orig) {
		t.Errorf("first backup %s does not hold the damaged segment whole (err %v)", rep.Cuts[0].Backup, err)
	}
	cut, err := os.ReadFile(rep.Cuts[1].Backup)
	if err != nil || string(cut) != string(orig[:rep.Cuts[0].Offset]) {
		t.Errorf("second backup %s does not hold the segment as the first cut left it (err %v)", rep.Cuts[1].Backup, err)
	}
	if rep.Mark == nil || rep.Mark.LastIndex != 30 {
		t.Errorf("repair mark %+v, want one with LastIndex 30", rep.Mark)
	}
	if diff := cmp.Diff([]entry{{30, true, "state at 30"}}, reopen(t, dir, DefaultConfig())); diff != "" {
		t.Errorf("Replay after Repair (-want +got):\n%s", diff)
	}

	before := dirContents(t, dir)
	rep2, err := Repair(dir)
	if err != nil || len(rep2.Cuts) != 0 || rep2.Mark != nil {
		t.Errorf("second Repair = %+v, %v; want no cuts, no new mark", rep2, err)
	}
	if diff := cmp.Diff(before, dirContents(t, dir)); diff != "" {
		t.Errorf("second Repair changed the directory (-before +after):\n%s", diff)
	}
}

// TestRepairMark checks the mark a Repair leaves when it removes records:
// Open reports it with the last surviving record and that record's write
// time; a snapshot past the cut removes it; a snapshot before does not.
func TestRepairMark(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := t0
	cfg := DefaultConfig()
	cfg.now = func() time.Time { return clock }
	dir := t.TempDir()
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		clock = t0.Add(time.Duration(i) * time.Minute)
		mustAppend(t, j, rec(i))
	}
	closeJournal(t, j)
	if m := openRecovery(t, dir, cfg).Repaired; m != nil {
		t.Fatalf("Repaired = %+v before any repair, want nil", m)
	}
	seg := segmentPaths(t, dir)[0]
	frames, _, _ := layout(t, seg)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[frames[14]+wordSize] ^= 1 // record 15's CRC
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := RepairMark{LastIndex: 14, LastWrite: t0.Add(14 * time.Minute)}
	if rep.Mark == nil || rep.Mark.LastIndex != want.LastIndex || !rep.Mark.LastWrite.Equal(want.LastWrite) {
		t.Fatalf("Repair's mark = %+v, want LastIndex %d, LastWrite %v", rep.Mark, want.LastIndex, want.LastWrite)
	}

	j, err = Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := j.Recovery().Repaired
	if m == nil || m.LastIndex != 14 || !m.LastWrite.Equal(want.LastWrite) {
		t.Fatalf("Recovery().Repaired = %+v, want LastIndex 14, LastWrite %v", m, want.LastWrite)
	}
	mustAppend(t, j, "after the repair")
	if err := j.Snapshot(context.Background(), 14, []byte("state")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	if openRecovery(t, dir, cfg).Repaired == nil {
		t.Fatal("a snapshot at the cut removed the mark; want it kept until a snapshot past it")
	}
	j, err = Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Snapshot(context.Background(), 15, []byte("state")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	if m := openRecovery(t, dir, cfg).Repaired; m != nil {
		t.Errorf("Repaired = %+v after a snapshot past the cut, want nil", m)
	}
}

// openRecovery opens dir and returns what Open reported.
func openRecovery(t *testing.T, dir string, cfg Config) Recovery {
	t.Helper()
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeJournal(t, j)
	return j.Recovery()
}

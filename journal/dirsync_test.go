package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A process killed between createSegment's rename and its fsync of the
// directory (in a roll, or in Open) leaves an empty newest segment whose
// name is only in the page cache. The next Open reuses that segment and
// acknowledges appends to it after a sync of the file alone: a power loss
// then lost the name, and every acknowledged record in it, silently (it
// is the newest segment: no gap of sequence numbers tells). Open now
// syncs the directory before it reuses the segment (found by a review).
func TestOpenReusingAnEmptyNewestSegmentSyncsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(context.Background(), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// What createSegment leaves when killed after its rename: the new
	// segment, its bytes synced, renamed, the directory not synced.
	name := fileName{kind: kindSegment, seq: 1, index: 2}
	path := filepath.Join(dir, name.String())
	if err := writeTemp(path+tempExt, segmentMagic[:]); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+tempExt, path); err != nil {
		t.Fatal(err)
	}

	synced := 0
	dirSynced = func(d string) {
		if d == dir {
			synced++
		}
	}
	t.Cleanup(func() { dirSynced = nil })
	j, err = Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if synced == 0 {
		t.Fatalf("Open reused the empty newest segment %s without syncing the directory: an append acknowledged in it may lose its name", name)
	}
	if got := j.segs; got[len(got)-1].name != name {
		t.Fatalf("Open appends to %s, want the empty newest segment %s: the test no longer makes the case it means to", got[len(got)-1].name, name)
	}
}

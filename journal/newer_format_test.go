package journal

import (
	"context"
	"errors"
	"os"
	"testing"
)

// A segment written by a later format (same magic, version byte 3) was
// reported as damage, "not a segment file: bad magic", wrapping
// ErrCorrupt; the error message of the CLI then points at Repair, and
// Repair moves the newer journal's segment aside as corrupt, with its
// records. A newer format must be refused as such, and never cut.
func TestAFileOfANewerFormatIsRefusedNotRepaired(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(context.Background(), []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	closeJournal(t, j)
	seg := segmentPaths(t, dir)[0]
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[7] = 3 // a later format version
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, DefaultConfig())
	if err == nil {
		t.Fatal("Open accepted a segment of a later format")
	}
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
		t.Errorf("Open: %v; want ErrNewerFormat, not ErrCorrupt (which sends the operator to Repair)", err)
	}
	rep, _ := Repair(dir)
	if _, serr := os.Stat(seg); serr != nil || len(rep.Cuts) > 0 {
		t.Fatalf("Repair cut a segment of a later format: cuts %+v, stat %v", rep.Cuts, serr)
	}
}

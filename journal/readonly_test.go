package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tornJournal builds a journal of records 1..8 in dir, each its own batch,
// whose last batch is torn, and returns the segment, where the torn batch
// starts and how many bytes of it are left.
func tornJournal(t *testing.T, dir string) (seg string, at, left int64) {
	t.Helper()
	build(t, dir, DefaultConfig(), 8)
	seg = segmentPaths(t, dir)[0]
	at, left = tearLastBatch(t, seg)
	return seg, at, left
}

// TestOpenReadOnlyChangesNothing opens a journal with a torn tail read-only:
// Recovery().Torn reports the tail (file, offset, bytes), Replay yields the
// records before it and not the torn one, and the directory is unchanged
// byte for byte, the torn tail included, with no new file.
func TestOpenReadOnlyChangesNothing(t *testing.T) {
	dir := t.TempDir()
	seg, at, left := tornJournal(t, dir)
	before := snapshotDir(t, dir)

	j, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	torn := j.Recovery().Torn
	if torn == nil || torn.File != seg || torn.Offset != at || torn.Bytes != left || torn.Reason == "" {
		t.Errorf("Recovery().Torn = %v, want file %s, offset %d, %d bytes and a reason", torn, seg, at, left)
	}
	if diff := cmp.Diff(records(1, 7), replayAll(t, j)); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("the directory changed while open read-only (-before +after):\n%s", diff)
	}
	closeJournal(t, j)
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("OpenReadOnly, Replay and Close changed the directory (-before +after):\n%s", diff)
	}
}

// TestOpenReadOnlyRefusesWrites checks that Append and Snapshot of a
// journal opened read-only return ErrReadOnly and change nothing.
func TestOpenReadOnlyRefusesWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	build(t, dir, DefaultConfig(), 3)
	before := snapshotDir(t, dir)
	j, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, []byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Append: err = %v, want ErrReadOnly", err)
	}
	if err := j.Snapshot(ctx, 2, []byte("state")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Snapshot: err = %v, want ErrReadOnly", err)
	}
	if diff := cmp.Diff(records(1, 3), replayAll(t, j)); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
	closeJournal(t, j)
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
}

// TestOpenReadOnlyLocking checks the directory lock: two readers may be
// open at once; a reader fails with ErrLocked while a writer has the
// journal open, and Open fails with ErrLocked while a reader has it.
func TestOpenReadOnlyLocking(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, DefaultConfig(), 3)

	r1, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("a second reader while one is open: %v", err)
	}
	for i, r := range []*FileJournal{r1, r2} {
		if diff := cmp.Diff(records(1, 3), replayAll(t, r)); diff != "" {
			t.Errorf("reader %d: Replay (-want +got):\n%s", i+1, diff)
		}
	}
	w, err := Open(dir, DefaultConfig())
	if !errors.Is(err, ErrLocked) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Open while readers are open: err = %v, want ErrLocked", err)
	}
	closeJournal(t, r1)
	if w, err := Open(dir, DefaultConfig()); !errors.Is(err, ErrLocked) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Open while one reader is still open: err = %v, want ErrLocked", err)
	}
	closeJournal(t, r2)

	w, err = Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open after the readers closed: %v", err)
	}
	if r, err := OpenReadOnly(dir); !errors.Is(err, ErrLocked) {
		if r != nil {
			r.Close()
		}
		t.Errorf("OpenReadOnly while a writer is open: err = %v, want ErrLocked", err)
	}
	closeJournal(t, w)
	r, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("OpenReadOnly after the writer closed: %v", err)
	}
	closeJournal(t, r)
}

// TestOpenReadOnlyOnReadOnlyDirectory makes a journal directory read-only
// (mode 0555, files 0444) and opens it with OpenReadOnly: it opens,
// reports the torn tail, replays, and leaves the directory as it was.
//
// Tests often run as root, for whom permission bits do not stop a write.
// Then the directory and its files are also made immutable (chattr +i,
// which stops root too) and the test checks that a write really is
// refused before relying on it. Where that is not possible (no chattr, a
// file system without the flag, no CAP_LINUX_IMMUTABLE), the test still
// checks what it can without it: OpenReadOnly works on the 0555/0444
// directory, and while it is open no descriptor of the process refers to
// a file in it opened for writing (/proc/self/fdinfo), and the directory
// is unchanged byte for byte, with the same mtime (no file created and
// removed).
func TestOpenReadOnlyOnReadOnlyDirectory(t *testing.T) {
	dir := t.TempDir()
	seg, at, _ := tornJournal(t, dir)
	before := snapshotDir(t, dir)

	files := []string{}
	for _, n := range fileNames(t, dir) {
		files = append(files, filepath.Join(dir, n))
	}
	for _, p := range files {
		if err := os.Chmod(p, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(dir, 0o700)
		for _, p := range files {
			os.Chmod(p, 0o600)
		}
	})
	enforced := os.Geteuid() != 0
	if !enforced {
		enforced = makeImmutable(t, append([]string{dir}, files...))
		if !enforced {
			t.Log("running as root without chattr +i: the read-only directory does not stop writes; checking open descriptors and the directory's contents instead")
		}
	}
	if enforced {
		// The directory really is read-only to this process.
		if f, err := os.OpenFile(seg, os.O_WRONLY, 0); err == nil {
			f.Close()
			t.Fatalf("opened %s for writing in a read-only directory", seg)
		}
		if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
			f.Close()
			os.Remove(filepath.Join(dir, "probe"))
			t.Fatalf("created a file in a read-only directory")
		}
	}

	j, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("OpenReadOnly of a read-only directory: %v", err)
	}
	if torn := j.Recovery().Torn; torn == nil || torn.File != seg || torn.Offset != at {
		t.Errorf("Recovery().Torn = %v, want the torn batch at %s offset %d", torn, seg, at)
	}
	if diff := cmp.Diff(records(1, 7), replayAll(t, j)); diff != "" {
		t.Errorf("Replay (-want +got):\n%s", diff)
	}
	if w := writableFDsIn(t, dir); len(w) > 0 {
		t.Errorf("while open read-only, the process holds %v open for writing", w)
	}
	closeJournal(t, j)
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("OpenReadOnly changed a read-only directory (-before +after):\n%s", diff)
	}
}

// makeImmutable sets the immutable flag on paths with chattr(1) and
// clears it when the test ends. It reports whether it could.
func makeImmutable(t *testing.T, paths []string) bool {
	t.Helper()
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		return false
	}
	if out, err := exec.Command(chattr, append([]string{"+i"}, paths...)...).CombinedOutput(); err != nil {
		t.Logf("chattr +i: %v: %s", err, out)
		exec.Command(chattr, append([]string{"-i"}, paths...)...).Run()
		return false
	}
	t.Cleanup(func() {
		if out, err := exec.Command(chattr, append([]string{"-i"}, paths...)...).CombinedOutput(); err != nil {
			t.Errorf("chattr -i: %v: %s", err, out)
		}
	})
	return true
}

// writableFDsIn returns the files in dir that this process has open for
// writing, from /proc/self/fd and /proc/self/fdinfo (nil where /proc is
// not there).
func writableFDsIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || (target != dir && filepath.Dir(target) != dir) {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		var flags uint64
		for _, line := range strings.Split(string(info), "\n") {
			if _, err := fmt.Sscanf(line, "flags:\t%o", &flags); err == nil {
				break
			}
		}
		if flags&(uint64(os.O_WRONLY)|uint64(os.O_RDWR)) != 0 {
			out = append(out, target)
		}
	}
	return out
}

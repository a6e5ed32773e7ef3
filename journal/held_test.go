package journal

import (
	"path/filepath"
	"testing"
)

// Held says whether a writer has the directory open, and leaves it free
// for a writer afterwards.
func TestHeldSaysWhetherAWriterHasTheDirectory(t *testing.T) {
	dir := t.TempDir()
	if held, err := Held(dir); err != nil || held {
		t.Fatalf("Held on a free directory = %v, %v; want false", held, err)
	}
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if held, err := Held(dir); err != nil || !held {
		t.Errorf("Held while a writer has it open = %v, %v; want true", held, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if held, err := Held(dir); err != nil || held {
		t.Errorf("Held after the writer closed = %v, %v; want false", held, err)
	}
	j, err = Open(dir, DefaultConfig())
	if err != nil {
		t.Fatalf("Open after Held: %v (Held kept the lock)", err)
	}
	j.Close()
	if _, err := Held(filepath.Join(dir, "missing")); err == nil {
		t.Error("Held on a missing directory = nil error")
	}
}

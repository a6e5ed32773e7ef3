package journal

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Repair cut (durably) first and wrote its RepairMark last. A Repair
// that stops in between (killed, power lost, or, as here, failing to write
// the mark) leaves a journal that opens cleanly with records removed and
// no mark, and running Repair again "changes nothing": the mark, whose
// whole point is that the Loader does not resolve LATEST afresh after lost
// decisions, was gone for good. The mark is now written before the cut
// (found by a review).
func TestARepairStoppedBeforeItsMarkStillLeavesAMark(t *testing.T) {
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

	// The repair stops after its cuts, before the mark is durable.
	block := filepath.Join(dir, repairMarkName+tempExt)
	if err := os.Mkdir(block, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Repair(dir); err == nil {
		t.Fatal("Repair wrote its mark through a directory in the way")
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	// The operator runs Repair again, as the doc allows.
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	got := openRecovery(t, dir, cfg)
	if got.Repaired == nil {
		t.Fatalf("records 15 to 20 were removed by Repair, but Open reports no RepairMark (Recovery %+v): the Loader will resolve LATEST afresh and skip what arrived since", got)
	}
	if got.Repaired.LastIndex > 14 {
		t.Fatalf("RepairMark.LastIndex = %d, want at most 14", got.Repaired.LastIndex)
	}
}

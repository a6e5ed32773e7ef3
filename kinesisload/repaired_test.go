package kinesisload

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// initialiseThenDie runs a Loader on dir until it has journaled its
// initialisation, with a Sink that refuses everything (so nothing is ever
// committed), puts "R4" after the resolved start, and stops it.
func initialiseThenDie(t *testing.T, s *stream, dir string) {
	t.Helper()
	ih := newInitHook()
	refusing := newRecorder()
	refusing.fail = func(Batch) error { return errBoom }
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	r := start(t, ctx, Config{Stream: s.name, Dir: dir, Sink: refusing, SinkRetries: 1000},
		WithClient(s.f), WithHooks(ih))
	ih.wait(t)
	s.put(shard0, "R4")
	abort()
	r.wait(t)
}

// damageFirstRecordOf flips a byte of the first journal record that names
// stream, so that Open refuses the journal there, and repairs it.
func damageFirstRecordOf(t *testing.T, dir, stream string) journal.RepairReport {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(segs)
	needle := []byte(`"stream":"` + stream + `"`)
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, needle); i >= 0 {
			b[i+len(`"stream":"`)] ^= 0x20
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := journal.Open(dir, journal.DefaultConfig()); !errors.Is(err, journal.ErrCorrupt) {
				t.Fatalf("Open of the damaged journal: %v, want ErrCorrupt", err)
			}
			rep, err := journal.Repair(dir)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			if rep.Mark == nil {
				t.Fatalf("Repair removed nothing: %+v", rep)
			}
			return rep
		}
	}
	t.Fatalf("no journal record names stream %s", stream)
	return journal.RepairReport{}
}

// TestRepairedJournalResumesBeforeTheLostDecision: a repair removed the
// record that held shard 0's resolved LATEST. Resolving LATEST again would
// start after R4, which arrived after the lost decision; the Loader must
// instead resume from before the last surviving write and deliver R4.
func TestRepairedJournalResumesBeforeTheLostDecision(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "old")
	dir := t.TempDir()
	// Another stream's progress in the same journal: it survives the
	// repair, and so does its write time.
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Save(context.Background(), "other", []ShardProgress{{ShardID: "shardId-x", State: StateActive, Position: scan.TrimHorizon()}}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	initialiseThenDie(t, s, dir)
	rep := damageFirstRecordOf(t, dir, s.name)
	if rep.Mark.LastWrite.IsZero() {
		t.Fatalf("repair mark %+v has no write time; the other stream's record should have survived", rep.Mark)
	}

	second := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Dir: dir, Sink: second}, WithClient(s.f))
	s.put(shard0, "R5")
	second.waitFor(t, "R5")
	r.stop(t)
	if !slices.Contains(second.delivered(), "R4") {
		t.Errorf("R4, put after the lost decision, was skipped: delivered %q", second.delivered())
	}
}

// TestRepairedJournalWithoutWriteTimeRefuses: when no write survived the
// repair, the Loader cannot know how far back the lost decision was; it
// refuses with an error naming the shard, and runs once the shard's start
// is set explicitly.
func TestRepairedJournalWithoutWriteTimeRefuses(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "old")
	dir := t.TempDir()
	initialiseThenDie(t, s, dir)
	rep := damageFirstRecordOf(t, dir, s.name)
	if !rep.Mark.LastWrite.IsZero() {
		t.Fatalf("repair mark %+v: want no surviving write time", rep.Mark)
	}

	r := start(t, context.Background(), Config{Stream: s.name, Dir: dir, Sink: newRecorder()}, WithClient(s.f))
	err := r.wait(t)
	var re *RepairedJournalError
	if !errors.As(err, &re) || !errors.Is(err, ErrJournalRepaired) || !slices.Equal(re.Shards, []string{shard0}) {
		t.Fatalf("Run: %v; want a *RepairedJournalError naming %s", err, shard0)
	}
	checkStop(t, err, s.name, "", "Load", ErrJournal)

	third := newRecorder()
	r = start(t, context.Background(), Config{Stream: s.name, Dir: dir, Sink: third,
		Shards: map[string]scan.Position{shard0: scan.TrimHorizon()}}, WithClient(s.f))
	third.waitFor(t, "old", "R4")
	r.stop(t)
}

// TestRepairMarkGoesAfterTheLoaderSnapshots: the mark stays until the
// Loader's store has snapshotted a state built on the repaired journal.
func TestRepairMarkGoesAfterTheLoaderSnapshots(t *testing.T) {
	s := newFakeStream(t, 1)
	dir := t.TempDir()
	initialiseThenDie(t, s, dir)
	damageFirstRecordOf(t, dir, s.name)

	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewJournalStore(context.Background(), j, 1) // a snapshot after every save
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateActive,
			Position: scan.AtTimestamp(time.Unix(int64(i), 0))}}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	r, err := journal.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if m := r.Recovery().Repaired; m != nil {
		t.Errorf("repair mark %+v still there after the store snapshotted past it", m)
	}
}

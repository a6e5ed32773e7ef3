package kinesisload

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

var positionCmp = cmp.Comparer(func(a, b scan.Position) bool { return a.Equal(b) })

func TestMergeNeverMovesBack(t *testing.T) {
	after := scan.AfterSequence
	tests := []struct {
		name       string
		stored, up ShardProgress
		want       ShardProgress
	}{
		{"resolved replaces LATEST", ShardProgress{ShardID: "s", Position: scan.Latest()}, ShardProgress{ShardID: "s", Position: after("10")}, ShardProgress{ShardID: "s", Position: after("10")}},
		{"LATEST never replaces a record position", ShardProgress{ShardID: "s", Position: after("10")}, ShardProgress{ShardID: "s", Position: scan.Latest()}, ShardProgress{ShardID: "s", Position: after("10")}},
		{"replayed resolution never moves progress back", ShardProgress{ShardID: "s", Position: after("50")}, ShardProgress{ShardID: "s", Position: after("10")}, ShardProgress{ShardID: "s", Position: after("50")}},
		{"progress moves forward", ShardProgress{ShardID: "s", Position: after("9")}, ShardProgress{ShardID: "s", Position: after("10")}, ShardProgress{ShardID: "s", Position: after("10")}},
		{"AFTER x is past AT x", ShardProgress{ShardID: "s", Position: scan.AtSequence("7")}, ShardProgress{ShardID: "s", Position: after("7")}, ShardProgress{ShardID: "s", Position: after("7")}},
		{"TRIM_HORIZON does not replace a record position", ShardProgress{ShardID: "s", Position: after("1")}, ShardProgress{ShardID: "s", Position: scan.TrimHorizon()}, ShardProgress{ShardID: "s", Position: after("1")}},
		{"a time is past TRIM_HORIZON", ShardProgress{ShardID: "s", Position: scan.TrimHorizon()}, ShardProgress{ShardID: "s", Position: scan.AtTimestamp(testTime)}, ShardProgress{ShardID: "s", Position: scan.AtTimestamp(testTime)}},
		{"a later time is further", ShardProgress{ShardID: "s", Position: scan.AtTimestamp(testTime.Add(time.Second))}, ShardProgress{ShardID: "s", Position: scan.AtTimestamp(testTime)}, ShardProgress{ShardID: "s", Position: scan.AtTimestamp(testTime.Add(time.Second))}},
		{"SHARD_END is final", ShardProgress{ShardID: "s", State: StateCompleted, Position: scan.ShardEnd()}, ShardProgress{ShardID: "s", State: StateActive, Position: after("99")}, ShardProgress{ShardID: "s", State: StateCompleted, Position: scan.ShardEnd()}},
		{"states only advance", ShardProgress{ShardID: "s", State: StateDraining}, ShardProgress{ShardID: "s", State: StatePendingParent}, ShardProgress{ShardID: "s", State: StateDraining}},
		{"zero update changes nothing", ShardProgress{ShardID: "s", State: StateActive, Position: after("3"), Parents: []string{"p"}}, ShardProgress{ShardID: "s"}, ShardProgress{ShardID: "s", State: StateActive, Position: after("3"), Parents: []string{"p"}}},
		{"parents accumulate", ShardProgress{ShardID: "s", Parents: []string{"b"}}, ShardProgress{ShardID: "s", Parents: []string{"a", "b"}}, ShardProgress{ShardID: "s", Parents: []string{"a", "b"}}},
	}
	for _, tt := range tests {
		got := merge(tt.stored, tt.up)
		if diff := cmp.Diff(tt.want, got, positionCmp); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tt.name, diff)
		}
		// Merge is commutative and idempotent: replay order does not matter.
		if diff := cmp.Diff(got, merge(tt.up, tt.stored), positionCmp); diff != "" {
			t.Errorf("%s: not commutative (-ab +ba):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(got, merge(got, tt.up), positionCmp); diff != "" {
			t.Errorf("%s: not idempotent (-once +twice):\n%s", tt.name, diff)
		}
	}
}

func TestJournalStoreReplaysAndSnapshots(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewJournalStore(ctx, j, 3)
	if err != nil {
		t.Fatal(err)
	}
	saves := [][]ShardProgress{
		{{ShardID: "a", State: StateActive, Position: scan.AfterSequence("5")}, {ShardID: "b", State: StateActive, Position: scan.TrimHorizon()}},
		{{ShardID: "a", Position: scan.AfterSequence("9")}},
		{{ShardID: "c", Parents: []string{"a"}, State: StatePendingParent, Position: scan.TrimHorizon()}},
		{{ShardID: "a", State: StateCompleted, Position: scan.ShardEnd()}},
		{{ShardID: "c", State: StateActive}},
		{{ShardID: "a", Position: scan.AfterSequence("1")}}, // a late, stale update
	}
	for _, u := range saves {
		if err := s.Save(ctx, "orders", u); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Save(ctx, "other", []ShardProgress{{ShardID: "x", State: StateActive, Position: scan.Latest()}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]ShardProgress{
		"a": {ShardID: "a", State: StateCompleted, Position: scan.ShardEnd()},
		"b": {ShardID: "b", State: StateActive, Position: scan.TrimHorizon()},
		"c": {ShardID: "c", Parents: []string{"a"}, State: StateActive, Position: scan.TrimHorizon()},
	}
	got, _ := s.Load(ctx, "orders")
	if diff := cmp.Diff(want, got, positionCmp); diff != "" {
		t.Fatalf("live state (-want +got):\n%s", diff)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j2, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	snapshots := 0
	if err := j2.Replay(ctx, func(e journal.Entry) error {
		if e.Snapshot {
			snapshots++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if snapshots != 1 {
		t.Errorf("replay saw %d snapshots, want 1 (one is taken every 3 saves)", snapshots)
	}
	s2, err := NewJournalStore(ctx, j2, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = s2.Load(ctx, "orders")
	if diff := cmp.Diff(want, got, positionCmp); diff != "" {
		t.Errorf("replayed state (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"orders", "other"}, s2.Streams()); diff != "" {
		t.Errorf("streams (-want +got):\n%s", diff)
	}
}

func TestJournalStoreRefusesBadUpdatesAndRecords(t *testing.T) {
	ctx := context.Background()
	s := memStore(t, journal.NewMemory())
	if err := s.Save(ctx, "orders", []ShardProgress{{State: StateActive}}); err == nil || !strings.Contains(err.Error(), "no shard ID") {
		t.Errorf("Save without shard ID = %v", err)
	}
	err := s.Save(ctx, "orders", []ShardProgress{{ShardID: "s9", Position: scan.AfterSequence("x1")}})
	if !errors.Is(err, scan.ErrInvalidPosition) || !strings.Contains(err.Error(), "s9") {
		t.Errorf("Save of an invalid position = %v, want ErrInvalidPosition naming the shard", err)
	}
	j := journal.NewMemory()
	if _, err := j.Append(ctx, []byte(`{"stream":"orders","updates":[{"id":"s1","pos":"NOWHERE"}]}`)); err != nil {
		t.Fatal(err)
	}
	_, err = NewJournalStore(ctx, j, 0)
	if !errors.Is(err, ErrStoreCorrupt) || !strings.Contains(err.Error(), "record 1") {
		t.Errorf("NewJournalStore over a bad record = %v, want ErrStoreCorrupt naming record 1", err)
	}
}

var testTime = scan.AtTimestamp(mustTime("2026-11-30T08:00:00Z")).Timestamp

func mustTime(s string) (t time.Time) {
	t, _ = time.Parse(time.RFC3339, s)
	return t
}

// In session.go, initialise: resolved positions are copied only
// into `updates`, which holds the fresh shards: a tracked shard whose
// stored position is LATEST (it is not fresh) is resolved, read from the
// resolved tip, but the resolved position is never journaled. A restart
// before its first commit resolves LATEST again and skips what arrived in
// between: the very bug tidemark exists to fix. A stored LATEST is
// reachable: observe saves the Config.Shards position (LATEST, or zero
// meaning StartPosition) of a selected shard first listed after
// initialisation without resolving it.
func TestStoredLatestIsJournaledOnceResolved(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "old")
	store := memStore(t, journal.NewMemory())
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.Latest()}}); err != nil {
		t.Fatal(err)
	}
	ih := newInitHook()
	first := newRecorder()
	first.fail = func(Batch) error { return errBoom } // aborts before any commit
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	r1 := start(t, ctx, Config{Stream: s.name, Sink: first, SinkRetries: 1000}, WithClient(s.f), WithStore(store), WithHooks(ih))
	if e := ih.wait(t); e.Resolved != 1 {
		t.Fatalf("resolved %d shards, want 1", e.Resolved)
	}
	p, _ := store.Load(context.Background(), s.name)
	if p[shard0].Position.Kind == scan.KindLatest {
		t.Errorf("after initialisation shard 0 is still journaled at LATEST; the resolved position was not saved")
	}
	s.put(shard0, "R4")
	abort()
	r1.wait(t)

	second := newRecorder()
	ih2 := newInitHook()
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: second}, WithClient(s.f), WithStore(store), WithHooks(ih2))
	ih2.wait(t)
	s.put(shard0, "R5")
	deadline := time.After(3 * time.Second)
	for !slices.Contains(second.delivered(), "R5") {
		select {
		case <-deadline:
			t.Fatalf("R5 not delivered; got %q", second.delivered())
		case <-time.After(10 * time.Millisecond):
		}
	}
	r2.stop(t)
	if !slices.Contains(second.delivered(), "R4") {
		t.Errorf("R4 (after the first resolved tip, before the restart) was lost: delivered %q", second.delivered())
	}
}

// In store.go, JournalStore.Save: Journal.Append may fail after
// the record was handed to the disk (the file journal returns ctx.Err()
// while waiting for its group fsync, with an index already taken). Save
// then never marks that index applied, so `done` stops below it for good:
// no snapshot is ever taken again (the journal grows without bound and
// `applied` grows by one entry per Save), and the in-memory state lacks a
// durable record.
func TestJournalStoreKeepsSnapshottingAfterAnUnknownAppend(t *testing.T) {
	j := &unknownAppendJournal{Journal: journal.NewMemory()}
	store, err := NewJournalStore(context.Background(), j, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	save := func(seq string) error {
		return store.Save(ctx, "orders", []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.AfterSequence(seq)}})
	}
	if err := save("1"); err != nil {
		t.Fatal(err)
	}
	j.failNext.Store(true) // durable, but the caller hears "context canceled"
	if err := save("2"); err == nil {
		t.Fatal("the unknown append did not fail")
	}
	for i := 3; i <= 20; i++ {
		if err := save(strconv.Itoa(i * 10)); err != nil {
			t.Fatal(err)
		}
	}
	if n := j.snapshots.Load(); n == 0 {
		t.Errorf("no snapshot in 19 saves with SnapshotEvery = 2 after one append of unknown outcome: `done` is stuck (%d indexes waiting in applied)", len(store.applied))
	}
}

type unknownAppendJournal struct {
	journal.Journal
	failNext  atomic.Bool
	snapshots atomic.Int64
}

func (j *unknownAppendJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	idx, err := j.Journal.Append(ctx, recs...)
	if err == nil && j.failNext.CompareAndSwap(true, false) {
		return 0, context.Canceled
	}
	return idx, err
}

func (j *unknownAppendJournal) Snapshot(ctx context.Context, index uint64, state []byte) error {
	err := j.Journal.Snapshot(ctx, index, state)
	if err == nil {
		j.snapshots.Add(1)
	}
	return err
}

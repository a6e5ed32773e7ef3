package kinesisload

import (
	"context"
	"errors"
	"strings"
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

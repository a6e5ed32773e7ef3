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

func openFileStore(t *testing.T, dir string, snapshotEvery uint64) (*JournalStore, func()) {
	t.Helper()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewJournalStore(context.Background(), j, snapshotEvery)
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	return s, func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}
}

func testRewind() Rewind {
	return Rewind{ID: "rw1", By: "ops@host", At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Reason: "reprocess"}
}

// TestJournalRewindMovesPositionsBackDurably: a rewind replaces positions
// a Save would never move back, a DRAINING shard reads again, the record
// says who, when, from and to, and all of it survives a reopen and a
// snapshot; a Save after it merges from the rewound position.
func TestJournalRewindMovesPositionsBackDurably(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, closeStore := openFileStore(t, dir, 2)
	if err := s.Save(ctx, "st", []ShardProgress{
		{ShardID: "a", State: StateActive, Position: scan.AfterSequence("500")},
		{ShardID: "b", State: StateDraining, Position: scan.AfterSequence("900"), Parents: []string{"p"}},
		{ShardID: "c", State: StateActive, Position: scan.AfterSequence("77")},
	}); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := s.Rewind(ctx, "st", testRewind(), map[string]scan.Position{
		"a": scan.AfterSequence("100"),
		"b": scan.AtTimestamp(ts),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Shard != "a" || !got[0].From.Equal(scan.AfterSequence("500")) || !got[0].SinkPending {
		t.Fatalf("Rewind returned %+v, want a from AFTER 500, pending", got)
	}
	want := map[string]ShardProgress{
		"a": {ShardID: "a", State: StateActive, Position: scan.AfterSequence("100")},
		"b": {ShardID: "b", State: StateActive, Position: scan.AtTimestamp(ts), Parents: []string{"p"}},
		"c": {ShardID: "c", State: StateActive, Position: scan.AfterSequence("77")},
	}
	check := func(s *JournalStore, when string) {
		t.Helper()
		p, err := s.Load(ctx, "st")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, p, positionCmp); diff != "" {
			t.Errorf("%s: progress (-want +got):\n%s", when, diff)
		}
		rws, err := s.Rewinds(ctx, "st")
		if err != nil {
			t.Fatal(err)
		}
		if rw := rws["b"]; rw.ID != "rw1" || rw.By != "ops@host" || !rw.At.Equal(testRewind().At) || rw.Reason != "reprocess" ||
			!rw.From.Equal(scan.AfterSequence("900")) || !rw.To.Equal(scan.AtTimestamp(ts)) {
			t.Errorf("%s: rewind of b = %+v", when, rw)
		}
		if _, ok := rws["c"]; ok {
			t.Errorf("%s: shard c has a rewind, but was not rewound", when)
		}
	}
	check(s, "at once")
	closeStore()

	s, closeStore = openFileStore(t, dir, 2)
	check(s, "after a reopen")
	// A later Save merges from the rewound position, forward only.
	if err := s.Save(ctx, "st", []ShardProgress{{ShardID: "a", Position: scan.AfterSequence("150")}}); err != nil {
		t.Fatal(err)
	}
	want["a"] = ShardProgress{ShardID: "a", State: StateActive, Position: scan.AfterSequence("150")}
	// Enough Saves for a snapshot (every 2): the rewinds are in it.
	for range 3 {
		if err := s.Save(ctx, "st", []ShardProgress{{ShardID: "c", Position: scan.AfterSequence("77")}}); err != nil {
			t.Fatal(err)
		}
	}
	closeStore()
	s, closeStore = openFileStore(t, dir, 2)
	defer closeStore()
	check(s, "after a snapshot")
}

// TestJournalRewindRefusesWithoutWriting: an unknown or COMPLETED shard,
// LATEST, SHARD_END, or a rewind without who or when refuses the whole
// rewind, naming the shard, and changes nothing.
func TestJournalRewindRefusesWithoutWriting(t *testing.T) {
	ctx := context.Background()
	s, err := NewJournalStore(ctx, journal.NewMemory(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "st", []ShardProgress{
		{ShardID: "a", State: StateActive, Position: scan.AfterSequence("500")},
		{ShardID: "done", State: StateCompleted, Position: scan.ShardEnd()},
	}); err != nil {
		t.Fatal(err)
	}
	noBy := testRewind()
	noBy.By = " "
	for _, tt := range []struct {
		name string
		r    Rewind
		to   map[string]scan.Position
		want string
	}{
		{"unknown shard", testRewind(), map[string]scan.Position{"a": scan.TrimHorizon(), "zz": scan.TrimHorizon()}, "shard zz has no stored progress"},
		{"completed shard", testRewind(), map[string]scan.Position{"done": scan.TrimHorizon()}, "shard done is COMPLETED"},
		{"LATEST", testRewind(), map[string]scan.Position{"a": scan.Latest()}, "shard a: LATEST is never stored"},
		{"SHARD_END", testRewind(), map[string]scan.Position{"a": scan.ShardEnd()}, "shard a: SHARD_END cannot be set"},
		{"no by", noBy, map[string]scan.Position{"a": scan.TrimHorizon()}, "does not say who"},
		{"nothing", testRewind(), nil, "no shard to rewind"},
	} {
		_, err := s.Rewind(ctx, "st", tt.r, tt.to)
		if !errors.Is(err, ErrRewindRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Rewind = %v, want ErrRewindRefused saying %q", tt.name, err, tt.want)
		}
	}
	p, _ := s.Load(ctx, "st")
	if !p["a"].Position.Equal(scan.AfterSequence("500")) {
		t.Errorf("a refused rewind moved shard a to %v", p["a"].Position)
	}
	if rws, _ := s.Rewinds(ctx, "st"); len(rws) != 0 {
		t.Errorf("a refused rewind was recorded: %+v", rws)
	}
}

// TestJournalRewindAckClearsSinkPendingOnce: AckRewind clears SinkPending
// of the named rewind only, durably; an ack of an older rewind does
// nothing.
func TestJournalRewindAckClearsSinkPendingOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, closeStore := openFileStore(t, dir, 0)
	if err := s.Save(ctx, "st", []ShardProgress{{ShardID: "a", State: StateActive, Position: scan.AfterSequence("500")}}); err != nil {
		t.Fatal(err)
	}
	first := testRewind()
	if _, err := s.Rewind(ctx, "st", first, map[string]scan.Position{"a": scan.AfterSequence("100")}); err != nil {
		t.Fatal(err)
	}
	second := testRewind()
	second.ID = "rw2"
	if _, err := s.Rewind(ctx, "st", second, map[string]scan.Position{"a": scan.AfterSequence("50")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AckRewind(ctx, "st", "a", "rw1"); err != nil {
		t.Fatal(err)
	}
	if rw, _ := s.Rewinds(ctx, "st"); !rw["a"].SinkPending || rw["a"].ID != "rw2" {
		t.Fatalf("after an ack of the older rewind: %+v, want rw2 still pending", rw["a"])
	}
	if err := s.AckRewind(ctx, "st", "a", "rw2"); err != nil {
		t.Fatal(err)
	}
	closeStore()
	s, closeStore = openFileStore(t, dir, 0)
	defer closeStore()
	if rw, _ := s.Rewinds(ctx, "st"); rw["a"].SinkPending || rw["a"].ID != "rw2" {
		t.Fatalf("after the ack and a reopen: %+v, want rw2 acknowledged", rw["a"])
	}
}

// TestJournalRewindForgottenByStartOver: a stream started over keeps no
// rewind of the old stream's shards.
func TestJournalRewindForgottenByStartOver(t *testing.T) {
	ctx := context.Background()
	s, err := NewJournalStore(ctx, journal.NewMemory(), 0)
	if err != nil {
		t.Fatal(err)
	}
	old := StreamIdentity{ARN: "arn:old", Created: time.Unix(100, 0)}
	if err := s.SetIdentity(ctx, "st", old); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "st", []ShardProgress{{ShardID: "a", State: StateActive, Position: scan.AfterSequence("500")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rewind(ctx, "st", testRewind(), map[string]scan.Position{"a": scan.TrimHorizon()}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartOver(ctx, "st", StreamIdentity{ARN: "arn:new", Created: time.Unix(200, 0)}); err != nil {
		t.Fatal(err)
	}
	if rws, _ := s.Rewinds(ctx, "st"); len(rws) != 0 {
		t.Errorf("rewinds after a start-over: %+v, want none", rws)
	}
}

package kinesisload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

var (
	idOld = StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:000000000000:stream/orders", Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	idNew = StreamIdentity{ARN: idOld.ARN, Created: idOld.Created.Add(time.Hour)}
)

// A journal written before identities were journaled: records and a
// snapshot exactly as the store wrote them then.
func legacyJournal(t *testing.T) journal.Journal {
	t.Helper()
	ctx := context.Background()
	j := journal.NewMemory()
	for _, rec := range []string{
		`{"stream":"orders","updates":[{"id":"shardId-000000000000","state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:5"}]}`,
		`{"stream":"orders","updates":[{"id":"shardId-000000000001","state":"ACTIVE","pos":"TRIM_HORIZON"}]}`,
	} {
		if _, err := j.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Snapshot(ctx, 2, []byte(`{"streams":{"orders":{"shardId-000000000000":{"id":"shardId-000000000000","state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:5"},`+
		`"shardId-000000000001":{"id":"shardId-000000000001","state":"ACTIVE","pos":"TRIM_HORIZON"}}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, []byte(`{"stream":"orders","updates":[{"id":"shardId-000000000000","pos":"AFTER_SEQUENCE_NUMBER:9"}]}`)); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestJournalStoreLoadsLegacyJournalWithoutIdentity(t *testing.T) {
	ctx := context.Background()
	s := memStore(t, legacyJournal(t))
	got, err := s.Load(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ShardProgress{
		shard0: {ShardID: shard0, State: StateActive, Position: scan.AfterSequence("9")},
		shard1: {ShardID: shard1, State: StateActive, Position: scan.TrimHorizon()},
	}
	if d := cmp.Diff(want, got, positionCmp); d != "" {
		t.Errorf("Load (-want +got):\n%s", d)
	}
	if id, err := s.Identity(ctx, "orders"); err != nil || !id.IsZero() {
		t.Errorf("Identity of a legacy journal = %v, %v; want zero, nil", id, err)
	}
	if a := s.Archives("orders"); len(a) != 0 {
		t.Errorf("Archives of a legacy journal = %v, want none", a)
	}
}

func TestJournalStoreIdentity(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	s := memStore(t, j)
	if err := s.SetIdentity(ctx, "orders", idOld); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity(ctx, "orders", idOld); err != nil {
		t.Errorf("SetIdentity of the stored identity again: %v, want nil", err)
	}
	err := s.SetIdentity(ctx, "orders", idNew)
	var mm *StreamMismatchError
	if !errors.As(err, &mm) || !errors.Is(err, ErrStreamMismatch) || !mm.Stored.Equal(idOld) || !mm.Current.Equal(idNew) {
		t.Errorf("SetIdentity of another identity = %v, want a *StreamMismatchError from %v to %v", err, idOld, idNew)
	}
	// Durable: a store replayed from the journal has it, in UTC or not.
	s2 := memStore(t, j)
	if id, err := s2.Identity(ctx, "orders"); err != nil || !id.Equal(idOld) {
		t.Errorf("Identity after replay = %v, %v; want %v", id, err, idOld)
	}
	if id, _ := s2.Identity(ctx, "other"); !id.IsZero() {
		t.Errorf("Identity of a stream never stored = %v, want zero", id)
	}
	if got := s2.Streams(); !cmp.Equal(got, []string{"orders"}) {
		t.Errorf("Streams = %v, want [orders] (a stream with an identity and no progress yet)", got)
	}
}

// StartOver archives the old stream's progress under its identity, never
// deleting it, and leaves the new stream with nothing; the archive and the
// new progress survive replays, snapshots included, and a Save of the old
// stream that lands after StartOver goes to the archive.
func TestJournalStoreStartOverArchives(t *testing.T) {
	ctx := context.Background()
	for _, every := range []uint64{1, 2, 3, 1000} {
		j := journal.NewMemory()
		s, err := NewJournalStore(ctx, j, every)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetIdentity(ctx, "orders", idOld); err != nil {
			t.Fatal(err)
		}
		old := []ShardProgress{{ShardID: shard0, State: StateCompleted, Position: scan.ShardEnd()}, {ShardID: shard1, State: StateActive, Position: scan.AfterSequence("7")}}
		if err := s.Save(ctx, "orders", old); err != nil {
			t.Fatal(err)
		}
		if err := s.StartOver(ctx, "orders", idNew); err != nil {
			t.Fatal(err)
		}
		// A Save of the old stream written before StartOver was applied
		// (generation 0), replayed after it.
		late, err := json.Marshal(storeRecord{Stream: "orders", Updates: []ShardProgress{{ShardID: shard1, Position: scan.AfterSequence("8")}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Append(ctx, late); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, "orders", []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.TrimHorizon()}}); err != nil {
			t.Fatal(err)
		}
		if err := s.StartOver(ctx, "orders", idNew); err != nil {
			t.Errorf("StartOver to the stored identity again: %v", err)
		}
		wantLive := map[string]ShardProgress{shard0: {ShardID: shard0, State: StateActive, Position: scan.TrimHorizon()}}
		wantArchive := []ArchivedProgress{{Identity: idOld, ReplacedBy: idNew, Shards: map[string]ShardProgress{
			shard0: {ShardID: shard0, State: StateCompleted, Position: scan.ShardEnd()},
			shard1: {ShardID: shard1, State: StateActive, Position: scan.AfterSequence("8")},
		}}}
		replayed := memStore(t, j)
		live, err := replayed.Load(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(wantLive, live, positionCmp); d != "" {
			t.Errorf("every %d: Load after StartOver, replayed (-want +got):\n%s", every, d)
		}
		if d := cmp.Diff(wantArchive, replayed.Archives("orders"), positionCmp); d != "" {
			t.Errorf("every %d: Archives, replayed (-want +got):\n%s", every, d)
		}
		if id, _ := replayed.Identity(ctx, "orders"); !id.Equal(idNew) {
			t.Errorf("every %d: Identity, replayed = %v, want %v", every, id, idNew)
		}
		// The live store, which never saw the late record, agrees on the
		// new stream.
		live, _ = s.Load(ctx, "orders")
		if d := cmp.Diff(wantLive, live, positionCmp); d != "" {
			t.Errorf("every %d: live Load after StartOver (-want +got):\n%s", every, d)
		}
	}
}

// A Save too large for one record, written as parts and a commit after a
// StartOver, belongs to the new stream when replayed: the commit carries
// the generation of its parts.
func TestJournalStoreStartOverThenBatchedSave(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	s := memStore(t, j)
	s.partBytes = 200 // a few updates per part
	if err := s.SetIdentity(ctx, "orders", idOld); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "orders", []ShardProgress{{ShardID: shard0, State: StateCompleted, Position: scan.ShardEnd()}}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartOver(ctx, "orders", idNew); err != nil {
		t.Fatal(err)
	}
	var updates []ShardProgress
	want := map[string]ShardProgress{}
	for i := range 20 {
		u := ShardProgress{ShardID: fmt.Sprintf("shardId-%012d", i), State: StateActive, Position: scan.TrimHorizon()}
		updates = append(updates, u)
		want[u.ShardID] = u
	}
	if err := s.Save(ctx, "orders", updates); err != nil {
		t.Fatal(err)
	}
	commits := 0
	if err := j.Replay(ctx, func(e journal.Entry) error {
		var r storeRecord
		if err := json.Unmarshal(e.Data, &r); err != nil {
			return err
		}
		if r.Commit != "" {
			commits++
			if r.Gen != 1 {
				t.Errorf("the commit of the batched Save has generation %d, want 1", r.Gen)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if commits != 1 {
		t.Fatalf("%d commits in the journal, want the Save written as one batch of parts", commits)
	}
	replayed := memStore(t, j)
	live, _ := replayed.Load(ctx, "orders")
	if d := cmp.Diff(want, live, positionCmp); d != "" {
		t.Errorf("the new stream's progress, replayed (-want +got):\n%s", d)
	}
	a := replayed.Archives("orders")
	if len(a) != 1 || len(a[0].Shards) != 1 || a[0].Shards[shard0].State != StateCompleted {
		t.Errorf("archives, replayed = %+v, want only the old stream's COMPLETED shard 0", a)
	}
}

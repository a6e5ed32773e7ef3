package kinesisload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

const shard2 = "shardId-000000000002"

// identity returns the stream's identity as Kinesis reports it now.
func (s *stream) identity() StreamIdentity {
	s.t.Helper()
	id, err := describeStream(context.Background(), s.f, s.name, 10*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// recreate deletes the stream and creates it again under the same name with
// shards shards.
func (s *stream) recreate(shards int) {
	s.t.Helper()
	if _, err := s.f.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(s.name)}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.f.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String(s.name), ShardCount: aws.Int32(int32(shards))}); err != nil {
		s.t.Fatal(err)
	}
}

// readOldStream reads a one-shard stream that is split while it is read,
// so that its progress holds shard 0 COMPLETED and its children 1 and 2
// ACTIVE at record positions; it returns the progress.
func readOldStream(t *testing.T, s *stream, store PositionStore) map[string]ShardProgress {
	t.Helper()
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), ListShardsInterval: 50 * time.Millisecond},
		WithClient(s.f), WithStore(store), WithHooks(ih))
	ih.wait(t)
	s.put(shard0, "a0")
	s.split(shard0)
	s.put(shard1, "a1")
	s.put(shard2, "a2")
	rec.waitFor(t, "a0", "a1", "a2")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run on the old stream = %v, want ErrClosed", err)
	}
	p, err := store.Load(context.Background(), s.name)
	if err != nil {
		t.Fatal(err)
	}
	if p[shard0].State != StateCompleted || p[shard1].Position.Kind != scan.KindAfterSequence || p[shard2].Position.Kind != scan.KindAfterSequence {
		t.Fatalf("progress of the old stream = %v, want shard 0 COMPLETED and 1, 2 at records", p)
	}
	return p
}

// A stream deleted and created again under the same name reuses the shard
// IDs: without the identity check the new shard 0 would never be read (the
// journal says COMPLETED) and shards 1 and 2 would resume at the old
// stream's sequence numbers. Run stops instead, with a typed error that
// names both identities and the way out, and reads and changes nothing.
func TestRecreatedStreamStopsRun(t *testing.T) {
	s := newFakeStream(t, 1)
	j := journal.NewMemory()
	store := memStore(t, j)
	oldID := s.identity()
	before := readOldStream(t, s, store)

	s.recreate(3)
	newID := s.identity()
	for _, sh := range []string{shard0, shard1, shard2} {
		s.put(sh, "b-"+sh)
	}
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()}, WithClient(s.f), WithStore(store))
	err := r.wait(t)
	var mm *StreamMismatchError
	if !errors.As(err, &mm) || !errors.Is(err, ErrStreamMismatch) {
		t.Fatalf("Run on the re-created stream = %v, want a *StreamMismatchError", err)
	}
	if !mm.Stored.Equal(oldID) || !mm.Current.Equal(newID) || mm.Stream != s.name {
		t.Errorf("StreamMismatchError = %+v, want stream %s from %v to %v", mm, s.name, oldID, newID)
	}
	for _, want := range []string{oldID.String(), newID.String(), "OnStreamRecreated", "StreamRecreatedStartOver", "deleted and created again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Errorf("delivered %q from the re-created stream, want nothing", got)
	}
	after, _ := store.Load(context.Background(), s.name)
	if d := cmp.Diff(before, after, positionCmp); d != "" {
		t.Errorf("the stored progress changed (-before +after):\n%s", d)
	}
}

// With OnStreamRecreated = StreamRecreatedStartOver the old progress is
// archived in the journal under the old identity, never deleted, and the
// new stream is read where the configured start means relative to the
// first Run's T0: from TRIM_HORIZON completely, and with LATEST from its
// beginning too, since every record of it arrived after T0. (Before the
// fix, LATEST was resolved anew at the restart and skipped the records the
// new stream received before it: 0 of 3.)
func TestRecreatedStreamStartOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start scan.Position
		early bool // records put before the Run are delivered
	}{
		{"TRIM_HORIZON", scan.TrimHorizon(), true},
		{"LATEST", scan.Latest(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			j := journal.NewMemory()
			store := memStore(t, j)
			oldID := s.identity()
			old := readOldStream(t, s, store)

			s.recreate(3)
			newID := s.identity()
			var early []string
			for _, sh := range []string{shard0, shard1, shard2} {
				d := "b-" + sh[len(sh)-1:]
				s.put(sh, d)
				early = append(early, d)
			}
			s.settle()
			rec := newRecorder()
			ih := newInitHook()
			r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: tc.start, OnStreamRecreated: StreamRecreatedStartOver},
				WithClient(s.f), WithStore(store), WithHooks(ih))
			ih.wait(t)
			var late []string
			for _, sh := range []string{shard0, shard1, shard2} {
				d := "c-" + sh[len(sh)-1:]
				s.put(sh, d)
				late = append(late, d)
			}
			want := late
			if tc.early {
				want = append(early, late...)
			}
			rec.waitFor(t, want...)
			if err := r.stop(t); !errors.Is(err, ErrClosed) {
				t.Fatalf("Run = %v, want ErrClosed", err)
			}
			got := rec.delivered()
			slices.Sort(got)
			slices.Sort(want)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("delivered from the re-created stream (-want +got):\n%s", d)
			}

			// The journal, replayed: the new identity, the new stream's
			// progress, and the old progress archived under its identity.
			replayed := memStore(t, j)
			if id, _ := replayed.Identity(context.Background(), s.name); !id.Equal(newID) {
				t.Errorf("journaled identity = %v, want the new stream's %v", id, newID)
			}
			wantArchive := []ArchivedProgress{{Identity: oldID, ReplacedBy: newID, Shards: old}}
			if d := cmp.Diff(wantArchive, replayed.Archives(s.name), positionCmp); d != "" {
				t.Errorf("archived progress (-want +got):\n%s", d)
			}
			live, _ := replayed.Load(context.Background(), s.name)
			for _, sh := range []string{shard0, shard1, shard2} {
				if p := live[sh]; p.State != StateActive || p.Position.Kind != scan.KindAfterSequence {
					t.Errorf("progress of the new stream's %s = %+v, want ACTIVE at a record", sh, p)
				}
			}
		})
	}
}

// A stream re-created while the Loader reads it: Run stops with the typed
// error (found by the periodic ListShards or by the failing shard), or,
// with StreamRecreatedStartOver, archives and reads the new stream.
func TestRecreatedWhileReading(t *testing.T) {
	for _, policy := range []StreamRecreated{StreamRecreatedStop, StreamRecreatedStartOver} {
		t.Run(policy.String(), func(t *testing.T) {
			s := newFakeStream(t, 1)
			store := memStore(t, journal.NewMemory())
			oldID := s.identity()
			rec := newRecorder()
			ih := newInitHook()
			r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(),
				ListShardsInterval: 50 * time.Millisecond, OnStreamRecreated: policy}, WithClient(s.f), WithStore(store), WithHooks(ih))
			ih.wait(t)
			s.put(shard0, "a")
			rec.waitFor(t, "a")
			s.recreate(1)
			newID := s.identity()
			s.put(shard0, "b")
			if policy == StreamRecreatedStop {
				err := r.wait(t)
				var mm *StreamMismatchError
				if !errors.As(err, &mm) || !mm.Stored.Equal(oldID) || !mm.Current.Equal(newID) {
					t.Fatalf("Run = %v, want a *StreamMismatchError from %v to %v", err, oldID, newID)
				}
				if got := rec.delivered(); !slices.Equal(got, []string{"a"}) {
					t.Errorf("delivered %q, want [a]", got)
				}
				return
			}
			ih.wait(t) // initialised again, on the new stream
			rec.waitFor(t, "b")
			if err := r.stop(t); !errors.Is(err, ErrClosed) {
				t.Fatalf("Run = %v, want ErrClosed", err)
			}
			if a := store.Archives(s.name); len(a) != 1 || !a[0].Identity.Equal(oldID) || !a[0].ReplacedBy.Equal(newID) {
				t.Errorf("archives = %+v, want one, of %v replaced by %v", a, oldID, newID)
			}
		})
	}
}

// Progress stored before identities were journaled still loads: the
// Loader adopts the stream's current identity, journals it, and resumes
// where the progress says.
func TestLegacyProgressAdoptsIdentity(t *testing.T) {
	s := newFakeStream(t, 1)
	seq := s.put(shard0, "old")
	j := journal.NewMemory()
	legacy, err := json.Marshal(storeRecord{Stream: s.name, Updates: []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.AfterSequence(seq)}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(legacy), "identity") || strings.Contains(string(legacy), "gen") {
		t.Fatalf("a progress record %s is not in the legacy format", legacy)
	}
	if _, err := j.Append(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	store := memStore(t, j)
	s.put(shard0, "new")
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store))
	rec.waitFor(t, "new")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if got := rec.delivered(); !slices.Equal(got, []string{"new"}) {
		t.Errorf("delivered %q, want [new]", got)
	}
	if id, _ := memStore(t, j).Identity(context.Background(), s.name); !id.Equal(s.identity()) {
		t.Errorf("journaled identity = %v, want the adopted %v", id, s.identity())
	}
}

// A shard the store holds as COMPLETED that Kinesis lists open is a
// contradiction (here: progress stored before identities were journaled,
// of a stream re-created since): a lineage error, never a silent skip.
func TestCompletedShardListedOpenIsLineageError(t *testing.T) {
	s := newFakeStream(t, 1)
	store := memStore(t, journal.NewMemory())
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateCompleted, Position: scan.ShardEnd()}}); err != nil {
		t.Fatal(err)
	}
	s.put(shard0, "x")
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store))
	err := r.wait(t)
	if !errors.Is(err, ErrLineage) {
		t.Fatalf("Run = %v, want ErrLineage", err)
	}
	for _, want := range []string{shard0, "COMPLETED", "lists it open"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A stored sequence number that Kinesis refuses (InvalidArgumentException:
// it did not come from this stream) stops Run with an error that names the
// shard and says what it means.
func TestForeignSequenceNumberNamesShard(t *testing.T) {
	s := newFakeStream(t, 1)
	seq := s.put(shard0, "old")
	store := memStore(t, journal.NewMemory())
	// Progress without an identity, as stored before identities were.
	if err := store.Save(context.Background(), s.name, []ShardProgress{{ShardID: shard0, State: StateActive, Position: scan.AfterSequence(seq)}}); err != nil {
		t.Fatal(err)
	}
	s.recreate(1)
	s.put(shard0, "b1")
	s.put(shard0, "b2")
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store))
	err := r.wait(t)
	if err == nil {
		t.Fatal("Run = nil, want an error")
	}
	for _, want := range []string{"shard " + shard0, scan.AfterSequence(seq).String(), "not one of this shard's", "another stream"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Errorf("delivered %q, want nothing", got)
	}
}

// The regression of the issue: a TransactionalSink must hold the whole
// truth. Kill the Loader after initialisation and before its first
// delivery, put 50 records, delete the journal, restart: all 50 are
// delivered, because the Sink stored the resolved starts.
func TestTransactionalSinkHoldsStartsWithoutJournal(t *testing.T) {
	s := newFakeStream(t, 2)
	last := map[string]string{}
	for i := range 5 {
		for _, sh := range []string{shard0, shard1} {
			last[sh] = s.put(sh, fmt.Sprintf("history-%s-%d", sh[len(sh)-1:], i))
		}
	}
	s.settle()
	tx := &txSink{recorder: *newRecorder()}
	dir := t.TempDir()
	ih := newInitHook()
	ctx, kill := context.WithCancel(context.Background())
	r := start(t, ctx, Config{Stream: s.name, Sink: tx, Dir: dir}, WithClient(s.f), WithHooks(ih))
	ih.wait(t)
	kill() // before the first delivery: no record has arrived yet
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	cps, _ := tx.Checkpoints(context.Background(), s.name)
	want := map[string]scan.Position{shard0: scan.AfterSequence(last[shard0]), shard1: scan.AfterSequence(last[shard1])}
	if d := cmp.Diff(want, cps, positionCmp); d != "" {
		t.Errorf("the sink's stored starts (-want +got):\n%s", d)
	}

	var put []string
	for i := range 25 {
		for _, sh := range []string{shard0, shard1} {
			d := fmt.Sprintf("new-%s-%02d", sh[len(sh)-1:], i)
			s.put(sh, d)
			put = append(put, d)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: tx, Dir: dir}, WithClient(s.f))
	tx.waitFor(t, put...)
	if err := r2.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	got := tx.delivered()
	slices.Sort(got)
	slices.Sort(put)
	if d := cmp.Diff(put, got); d != "" {
		t.Errorf("delivered (-want +got):\n%s", d)
	}
}

// Starting over with a TransactionalSink that holds the old stream's
// checkpoints would apply them to the new stream's shards: Run refuses,
// archives nothing, and starts over once they are removed.
func TestStartOverRefusedWhileSinkHoldsOldCheckpoints(t *testing.T) {
	s := newFakeStream(t, 1)
	store := memStore(t, journal.NewMemory())
	tx := &txSink{recorder: *newRecorder()}
	ih := newInitHook()
	cfg := Config{Stream: s.name, Sink: tx, StartPosition: scan.TrimHorizon(), OnStreamRecreated: StreamRecreatedStartOver}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(store), WithHooks(ih))
	ih.wait(t)
	s.put(shard0, "a")
	tx.waitFor(t, "a")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	s.recreate(1)
	s.put(shard0, "b")
	r = start(t, context.Background(), cfg, WithClient(s.f), WithStore(store))
	err := r.wait(t)
	if !errors.Is(err, ErrStreamMismatch) || !strings.Contains(err.Error(), "checkpoints") {
		t.Fatalf("Run = %v, want ErrStreamMismatch naming the sink's checkpoints", err)
	}
	if a := store.Archives(s.name); len(a) != 0 {
		t.Errorf("archived %d times, want nothing archived", len(a))
	}
	tx.cmu.Lock()
	tx.cps = nil // the operator removes the old checkpoints
	tx.cmu.Unlock()
	r = start(t, context.Background(), cfg, WithClient(s.f), WithStore(store))
	tx.waitFor(t, "b")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if a := store.Archives(s.name); len(a) != 1 {
		t.Errorf("archived %d times, want once", len(a))
	}
}

// parentLastSink refuses, permanently, the start batch of one shard, after
// waiting a while for the other starts: a crash inside initialisation
// between the start batches of a TransactionalSink, at the worst moment.
type parentLastSink struct {
	*txSink
	refuse string
}

func (s parentLastSink) Deliver(ctx context.Context, b Batch) error {
	if b.ShardID == s.refuse && len(b.Records) == 0 {
		select {
		case <-time.After(250 * time.Millisecond): // the other starts land meanwhile, if they may
		case <-ctx.Done():
		}
		return Permanent(errors.New("the start batch is refused"))
	}
	return s.txSink.Deliver(ctx, b)
}

// A TransactionalSink never holds a child's start without its parent's:
// the starts are stored parents first. Otherwise an initialisation that
// stopped between them, with its journal lost, left the child's start
// (read as begun) and no row for a parent closed before T0, which the next
// Run read from TRIM_HORIZON after the child: a ParentAfterChildError at
// every start (simulation seed 110017179, where the fleet's init item,
// holding T0, was deleted by hand).
func TestTheSinkNeverHoldsAChildsStartWithoutItsParents(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "history-parent")
	s.split(shard0)
	for _, c := range []string{shard1, shard2} {
		s.put(c, "history-"+c)
	}
	s.settle()
	tx := &txSink{recorder: *newRecorder()}
	dir := t.TempDir()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: parentLastSink{txSink: tx, refuse: shard0}, Dir: dir}, WithClient(s.f))
	if err := r.wait(t); !errors.Is(err, ErrPermanent) {
		t.Fatalf("Run = %v, want the Sink's permanent refusal", err)
	}
	if cps, _ := tx.Checkpoints(context.Background(), s.name); len(cps) != 0 {
		t.Fatalf("the sink holds the starts %v without the parent's", cps)
	}

	// The journal is lost; the Sink is whole again.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	var put []string
	for _, c := range []string{shard1, shard2} {
		d := "new-" + c
		s.put(c, d)
		put = append(put, d)
	}
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: tx, Dir: dir}, WithClient(s.f))
	tx.waitFor(t, put...)
	if err := r2.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
}

package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// bigStream makes a fake stream of n shards and puts one record on each,
// so that every shard's LATEST resolves to a record position (the longest
// entry a start-up batch has).
func bigStream(t *testing.T, n int) *stream {
	t.Helper()
	clk := &offsetClock{}
	f := kinesistest.New(kinesistest.WithoutLimits(), kinesistest.WithShardLimit(n), kinesistest.WithClock(clk))
	kinesistest.NewStream(t, f, "orders", n)
	s := &stream{t: t, f: f, name: "orders", clock: clk}
	ctx := context.Background()
	var keys []string
	in := &kinesis.ListShardsInput{StreamName: aws.String(s.name)}
	for {
		out, err := f.ListShards(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range out.Shards {
			keys = append(keys, aws.ToString(sh.HashKeyRange.StartingHashKey))
		}
		if out.NextToken == nil {
			break
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
	if len(keys) != n {
		t.Fatalf("listed %d shards, want %d", len(keys), n)
	}
	for len(keys) > 0 {
		batch := keys[:min(500, len(keys))]
		keys = keys[len(batch):]
		var entries []types.PutRecordsRequestEntry
		for _, k := range batch {
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(k), Data: []byte("old")})
		}
		out, err := f.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(s.name), Records: entries})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			t.Fatalf("PutRecords: %v, %v failed", err, out)
		}
	}
	s.settle() // the "old" records are more than a second before any start
	return s
}

// The start-up batch of a big stream (20,000 shards) is larger than one
// journal record (4 MiB): it is saved as several parts and one commit, and
// a fresh store on the journal replays every shard at its resolved
// position. With -short: 2,000 shards and parts a tenth as large. (A
// crash between the parts and the commit: TestJournalStoreBatchIsAllOrNothing
// and the crash points below.)
func TestInitialisesAHugeStreamInOneDurableBatch(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000 // the same path, a tenth of the shards
	}
	s := bigStream(t, n)
	ctx := context.Background()
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	store := memStore(t, j)
	if testing.Short() {
		store.partBytes = defaultPartBytes / 10
	}
	ih := newInitHook()
	rec := newRecorder()
	r := start(t, ctx, Config{Stream: s.name, Sink: rec, ListShardsInterval: 1 << 40}, WithClient(s.f), WithStore(store), WithHooks(ih))
	var e InitResolved
	select {
	case e = <-ih.ch:
	case err := <-r.done:
		t.Fatalf("Run = %v before initialisation", err)
	}
	if e.Resolved != n || len(e.Positions) != n {
		t.Fatalf("init resolved %d shards and reads %d, want %d and %d", e.Resolved, len(e.Positions), n, n)
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Errorf("delivered %d records from before the start", len(got))
	}
	// The batch is durable and whole: a fresh store on the same journal
	// has every shard at its resolved position.
	again := memStore(t, j)
	got, err := again.Load(ctx, s.name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("replayed %d shards, want %d", len(got), n)
	}
	for id, p := range got {
		if p.Position.Kind != scan.KindAfterSequence || !p.Position.Equal(e.Positions[id]) || p.State != StateActive {
			t.Fatalf("shard %s replayed as %v %v, want ACTIVE at %v", id, p.State, p.Position, e.Positions[id])
		}
	}
}

// stepJournal counts appends and can hold the first one whose record
// contains a marker until released.
type stepJournal struct {
	journal.Journal
	marker  string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stepJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	for _, r := range recs {
		if s.marker != "" && strings.Contains(string(r), s.marker) {
			s.once.Do(func() {
				close(s.reached)
				<-s.release
			})
		}
	}
	return s.Journal.Append(ctx, recs...)
}

func updatesFor(n int, prefix string) []ShardProgress {
	var us []ShardProgress
	for i := range n {
		us = append(us, ShardProgress{ShardID: fmt.Sprintf("%s-%04d", prefix, i), State: StateActive,
			Position: scan.AfterSequence(fmt.Sprintf("49590338271490256608559692538361571095921575989136588%03d", i))})
	}
	return us
}

func TestJournalStoreSplitsALargeSave(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	s := memStore(t, j)
	s.partBytes = 1000
	us := updatesFor(40, "s")
	if err := s.Save(ctx, "orders", us); err != nil {
		t.Fatal(err)
	}
	var parts, commits int
	if err := j.Replay(ctx, func(e journal.Entry) error {
		switch {
		case strings.Contains(string(e.Data), `"commit"`):
			commits++
		case strings.Contains(string(e.Data), `"batch"`):
			parts++
			if len(e.Data) > 1000 {
				t.Errorf("part of %d bytes, want at most 1000", len(e.Data))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if parts < 4 || commits != 1 {
		t.Errorf("journal holds %d parts and %d commits, want several parts and one commit", parts, commits)
	}
	got, _ := memStore(t, j).Load(ctx, "orders")
	if len(got) != len(us) {
		t.Errorf("replayed %d shards, want %d", len(got), len(us))
	}
}

// A journal whose records are smaller than the store's parts refuses them
// as too large: the store splits again rather than failing.
func TestJournalStoreSplitsForASmallMaxRecordSize(t *testing.T) {
	ctx := context.Background()
	cfg := journal.DefaultConfig()
	cfg.MaxRecordSize = 2000
	j, err := journal.Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s := memStore(t, j)
	us := updatesFor(100, "s")
	if err := s.Save(ctx, "orders", us); err != nil {
		t.Fatalf("Save of %d updates into 2,000-byte records: %v", len(us), err)
	}
	got, _ := memStore(t, j).Load(ctx, "orders")
	if len(got) != len(us) {
		t.Errorf("replayed %d shards, want %d", len(got), len(us))
	}
	// A further small Save and a snapshot leave the state whole.
	if err := s.Save(ctx, "orders", []ShardProgress{{ShardID: "x", State: StateActive}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := memStore(t, j).Load(ctx, "orders"); len(got) != len(us)+1 {
		t.Errorf("replayed %d shards after one more Save, want %d", len(got), len(us)+1)
	}
}

// A crash at any append of a batched Save, before or after that append is
// durable, leaves all of it or none of it: none until the commit is
// durable.
func TestJournalStoreBatchIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	us := updatesFor(40, "s")
	points := 0
	for failAt := 1; ; failAt++ {
		crashed := false
		for _, after := range []bool{false, true} {
			inner := journal.NewMemory()
			base := memStore(t, inner)
			if err := base.Save(ctx, "orders", []ShardProgress{{ShardID: "before", State: StateActive, Position: scan.TrimHorizon()}}); err != nil {
				t.Fatal(err)
			}
			cj := &crashJournal{Journal: inner, failAt: failAt, after: after}
			s := memStore(t, cj)
			s.partBytes = 1000
			err := s.Save(ctx, "orders", us)
			if err == nil {
				continue
			}
			crashed = true
			if !errors.Is(err, errCrash) {
				t.Fatalf("crash at append %d: Save = %v", failAt, err)
			}
			got, err := memStore(t, inner).Load(ctx, "orders")
			if err != nil {
				t.Fatalf("crash at append %d (after=%v): replay: %v", failAt, after, err)
			}
			committed := isLastAppend(t, inner) // the commit is durable
			want := 1
			if committed {
				want += len(us)
			}
			if len(got) != want {
				t.Errorf("crash at append %d (after=%v): replayed %d shards, want %d", failAt, after, len(got), want)
			}
		}
		if !crashed {
			break
		}
		points++
	}
	if points < 4 {
		t.Fatalf("only %d crash points: the Save was not split", points)
	}
}

// isLastAppend reports whether the last record of j is a commit.
func isLastAppend(t *testing.T, j journal.Journal) bool {
	t.Helper()
	var last []byte
	if err := j.Replay(context.Background(), func(e journal.Entry) error {
		// The record that clears T0 follows the batch: not a decision.
		if !strings.Contains(string(e.Data), `"t0done"`) {
			last = append(last[:0], e.Data...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(last), `"commit"`)
}

// A snapshot taken while a batch's parts are durable and its commit is
// not must not cover the parts, or the commit would find them gone.
func TestJournalStoreSnapshotWaitsForTheCommit(t *testing.T) {
	ctx := context.Background()
	inner := journal.NewMemory()
	sj := &stepJournal{Journal: inner, marker: `"commit"`, reached: make(chan struct{}), release: make(chan struct{})}
	s, err := NewJournalStore(ctx, sj, 1) // a snapshot after every Save
	if err != nil {
		t.Fatal(err)
	}
	s.partBytes = 1000
	us := updatesFor(40, "s")
	saved := make(chan error, 1)
	go func() { saved <- s.Save(ctx, "orders", us) }()
	<-sj.reached
	if err := s.Save(ctx, "orders", []ShardProgress{{ShardID: "other", State: StateActive, Position: scan.TrimHorizon()}}); err != nil {
		t.Fatal(err)
	}
	close(sj.release)
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	again, err := NewJournalStore(ctx, inner, 1)
	if err != nil {
		t.Fatalf("replay after a snapshot during a batch: %v", err)
	}
	if got, _ := again.Load(ctx, "orders"); len(got) != len(us)+1 {
		t.Errorf("replayed %d shards, want %d", len(got), len(us)+1)
	}
}

// Journals written before batches existed hold one record per Save,
// however large: they replay as before.
func TestJournalStoreReplaysSingleRecordSaves(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	for _, rec := range []string{
		`{"stream":"orders","updates":[{"id":"a","state":"ACTIVE","pos":"TRIM_HORIZON"},{"id":"b","state":"ACTIVE","pos":"AFTER_SEQUENCE_NUMBER:12"}]}`,
		`{"stream":"orders","updates":[{"id":"a","pos":"AFTER_SEQUENCE_NUMBER:7"}]}`,
	} {
		if _, err := j.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := memStore(t, j).Load(ctx, "orders")
	if len(got) != 2 || !got["a"].Position.Equal(scan.AfterSequence("7")) || !got["b"].Position.Equal(scan.AfterSequence("12")) {
		t.Errorf("replayed %v", got)
	}
}

// A commit whose parts are missing is corruption, not a silent partial
// batch.
func TestJournalStoreRefusesACommitWithoutItsParts(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	for _, rec := range []string{
		`{"stream":"orders","updates":[{"id":"a","state":"ACTIVE","pos":"TRIM_HORIZON"}],"batch":"b1","part":1}`,
		`{"stream":"orders","commit":"b1","parts":2}`,
	} {
		if _, err := j.Append(ctx, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := NewJournalStore(ctx, j, 0)
	if !errors.Is(err, ErrStoreCorrupt) || !strings.Contains(err.Error(), "b1") {
		t.Errorf("NewJournalStore = %v, want ErrStoreCorrupt naming batch b1", err)
	}
}

// The Loader's start-up batch, written in parts: a crash at any of its
// appends, before or after that append is durable, publishes nothing until
// the commit is durable, and the next run initialises from scratch and
// misses nothing put after its start.
func TestCrashDuringABatchedInitialisation(t *testing.T) {
	const n = 30
	ctx := context.Background()
	points := 0
	for failAt := 1; ; failAt++ {
		crashed := false
		for _, after := range []bool{false, true} {
			s := bigStream(t, n)
			inner := journal.NewMemory()
			store1 := memStore(t, &crashJournal{Journal: inner, failAt: failAt, after: after})
			store1.partBytes = 1000
			ih1 := newInitHook()
			r1 := start(t, ctx, Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f), WithStore(store1), WithResolver(fastResolver(t)), WithHooks(ih1))
			var err error
			select {
			case err = <-r1.done:
				r1.done <- err
			case <-ih1.ch:
				// failAt is past the batch: it was saved whole.
				r1.stop(t)
				continue
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("crash at append %d (after=%v): Run = %v, want the crash", failAt, after, err)
			}
			got, err := memStore(t, inner).Load(ctx, s.name)
			if err != nil {
				t.Fatal(err)
			}
			if isLastAppend(t, inner) {
				// The commit was durable: the batch is published whole.
				if len(got) != n {
					t.Errorf("crash after the commit: %d shards published, want %d", len(got), n)
				}
				continue
			}
			crashed = true
			if len(got) != 0 {
				t.Errorf("crash at append %d (after=%v), before the commit: %d shards published, want none", failAt, after, len(got))
			}
			// The next run starts over, and reads what comes after it.
			ih := newInitHook()
			rec2 := newRecorder()
			r2 := start(t, ctx, Config{Stream: s.name, Sink: rec2}, WithClient(s.f), WithStore(memStore(t, inner)), WithResolver(fastResolver(t)), WithHooks(ih))
			if e := ih.wait(t); e.Resolved != n {
				t.Errorf("crash at append %d (after=%v): the next run resolved %d shards, want %d", failAt, after, e.Resolved, n)
			}
			s.put(shard0, "new")
			rec2.waitFor(t, "new")
			if err := r2.stop(t); !errors.Is(err, ErrClosed) {
				t.Errorf("Run = %v", err)
			}
			if got := rec2.delivered(); len(got) != 1 {
				t.Errorf("crash at append %d (after=%v): the next run delivered %q, want only new", failAt, after, got)
			}
		}
		if !crashed {
			break
		}
		points++
	}
	if points < 3 {
		t.Fatalf("only %d crash points before the commit: the batch was not split", points)
	}
	t.Logf("%d crash points before the commit", points)
}

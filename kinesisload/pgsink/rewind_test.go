package pgsink

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// After RewindCheckpoint the records up to the checkpoint it set back,
// which the Loader delivers again, are stored once each (the rows stay as
// they were), the records after it are stored, and the duplicate check
// holds again once the checkpoint passes it. Without a Rewinder, the
// Loader stopped with a RewindError, and the operator who set the
// checkpoint back as it says met ErrDuplicate for good (found by a
// review).
func TestRewindCheckpointStoresWhatComesAgainOnce(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	s := testSinkOf(db)
	if err := s.Deliver(ctx, fleetBatch(shard0, 1, 0, 5)); err != nil {
		t.Fatal(err)
	}
	to := scan.AfterSequence(seqOf(2))
	for range 2 { // idempotent: a crash before the Loader records it calls it again
		if err := s.RewindCheckpoint(ctx, streamName, shard0, to, 2); err != nil {
			t.Fatalf("RewindCheckpoint: %v", err)
		}
	}
	checkShard(t, db, shard0, span(0, 5), to, 2)
	if err := s.Deliver(ctx, fleetBatch(shard0, 2, 3, 4)); err != nil {
		t.Fatalf("records 3 and 4 delivered again: %v", err)
	}
	if err := s.Deliver(ctx, fleetBatch(shard0, 2, 5, 7)); err != nil {
		t.Fatalf("record 5 again, then 6 and 7: %v", err)
	}
	checkShard(t, db, shard0, span(0, 7), scan.AfterSequence(seqOf(7)), 2)
	// Past the rewound checkpoint, a record stored twice is a bug again.
	bad := fleetBatch(shard0, 2, 8, 8)
	bad.Records = append(fleetBatch(shard0, 2, 7, 7).Records, bad.Records...)
	if err := s.Deliver(ctx, bad); !errors.Is(err, ErrOverlap) && !errors.Is(err, ErrDuplicate) {
		t.Errorf("a batch that overlaps the checkpoint after the replay = %v, want ErrOverlap or ErrDuplicate", err)
	}
}

// A rewind to TRIM_HORIZON, and a second rewind while the first is being
// read again: every record is stored once, whatever comes again.
func TestRewindCheckpointTwiceInARow(t *testing.T) {
	db := startPostgres(t)
	ctx := context.Background()
	s := testSinkOf(db)
	if err := s.Deliver(ctx, fleetBatch(shard0, 1, 0, 5)); err != nil {
		t.Fatal(err)
	}
	if err := s.RewindCheckpoint(ctx, streamName, shard0, scan.TrimHorizon(), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, fleetBatch(shard0, 2, 0, 2)); err != nil {
		t.Fatalf("records 0 to 2 again: %v", err)
	}
	if err := s.RewindCheckpoint(ctx, streamName, shard0, scan.AfterSequence(seqOf(0)), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, fleetBatch(shard0, 3, 1, 6)); err != nil {
		t.Fatalf("records 1 to 5 again, then 6: %v", err)
	}
	checkShard(t, db, shard0, span(0, 6), scan.AfterSequence(seqOf(6)), 3)
}

// A Loader whose journal an operator rewound (tidemark rewind) reads the
// shard again into pgsink: the Sink's checkpoint is set back, the records
// after the rewind come again and are stored once, and the ones put since
// are stored. It stopped with a RewindError (pgsink was no Rewinder).
func TestALoaderRewoundReadsTheShardAgainIntoPostgres(t *testing.T) {
	loaderRewoundReadsTheShardAgain(t, func(s *Sink) kinesisload.TransactionalSink { return s }) // the Sink itself: a Rewinder
}

// loaderRewoundReadsTheShardAgain runs a Loader into the Sink as sinkOf
// gives it until the shard's 6 records are stored, rewinds the shard in
// its journal to after the third, puts 2 more, and wants the 8 records
// stored once each after the next run.
func loaderRewoundReadsTheShardAgain(t *testing.T, sinkOf func(*Sink) kinesisload.TransactionalSink) {
	t.Helper()
	db := startPostgres(t)
	f := newStream(t, 1)
	want := put(t, f, "", "r", 6)
	shard := want[0].Shard
	sink := testSinkOf(db)
	dir := t.TempDir()
	newLoader := func() (*kinesisload.Loader, error) {
		cfg := baseConfig(sinkOf(sink), 2)
		cfg.Dir = dir
		return kinesisload.New(cfg, kinesisload.WithClient(f), kinesisload.WithLogger(testLogger()))
	}
	if err := runUntil(t, newLoader, func() bool { return count(t, db) == 6 }); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	to := scan.AfterSequence(want[2].Seq)
	if _, err := st.Rewind(context.Background(), streamName, kinesisload.Rewind{ID: "rw1", By: "ops", At: time.Now()}, map[string]scan.Position{shard: to}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	more := put(t, f, "", "s", 2)
	last := scan.AfterSequence(more[1].Seq)
	if err := runUntil(t, newLoader, func() bool {
		got, _ := sink.Checkpoints(context.Background(), streamName)
		return got[shard].Equal(last)
	}); err != nil {
		t.Fatalf("the run after the rewind: %v", err)
	}
	if n := count(t, db); n != 8 {
		t.Errorf("%d rows after the rewind, want the 8 records once each", n)
	}
}

// runUntil runs a Loader until done holds (then closes it) or Run
// returns, and returns Run's error (nil after the Close).
func runUntil(t *testing.T, newLoader func() (*kinesisload.Loader, error), done func() bool) error {
	t.Helper()
	l, err := newLoader()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run(context.Background()) }()
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		if err := <-ran; !errors.Is(err, kinesisload.ErrClosed) {
			return err
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		select {
		case err := <-ran:
			return err
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = stop()
			t.Fatal("the condition never held in 30 s")
		}
	}
	return stop()
}

package kinesisload_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

// shardRow is what a database holds per shard, written in the same
// transaction as the records.
type shardRow struct {
	checkpoint scan.Position
	epoch      uint64
	stored     []kinesisload.Record
}

// fencedSink is a TransactionalSink that a fleet of Loaders can share: an
// in-memory stand-in for a database whose transaction checks the shard's
// stored checkpoint and epoch before it stores anything.
type fencedSink struct {
	mu   sync.Mutex             // the shard row's lock: SELECT ... FOR UPDATE
	rows map[shardKey]*shardRow // by stream and shard: shard IDs repeat across streams
}

// shardKey is the key of a shard's row.
type shardKey struct{ stream, shard string }

func (s *fencedSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.rows[shardKey{b.Stream, b.ShardID}]
	if row == nil {
		row = &shardRow{}
		s.rows[shardKey{b.Stream, b.ShardID}] = row
	}
	if row.checkpoint.Kind != 0 {
		c, err := scan.Compare(b.Checkpoint, row.checkpoint)
		if err != nil {
			return err
		}
		if c <= 0 {
			return nil // (a) stored already
		}
	}
	if b.Epoch < row.epoch { // (b) the sender lost the lease
		return fmt.Errorf("shard %s is held at epoch %d, not %d: %w", b.ShardID, row.epoch, b.Epoch, kinesisload.ErrLeaseLost)
	}
	var keep []kinesisload.Record
	for _, r := range b.Records {
		if row.checkpoint.Kind != 0 {
			c, err := scan.Compare(scan.AfterSequence(r.SequenceNumber), row.checkpoint)
			if err != nil {
				return err
			}
			if c <= 0 {
				if b.Epoch == row.epoch {
					// (d) a bug no retry fixes: permanent.
					return kinesisload.Permanent(fmt.Errorf("shard %s: record %s overlaps checkpoint %v at epoch %d", b.ShardID, r.SequenceNumber, row.checkpoint, b.Epoch))
				}
				continue // (c) a new owner's overlap: stored already
			}
		}
		keep = append(keep, r)
	}
	row.stored = append(row.stored, keep...)
	row.checkpoint, row.epoch = b.Checkpoint, b.Epoch
	return nil
}

// data returns the data of the records stored.
func (r *shardRow) data() []string {
	var out []string
	for _, rec := range r.stored {
		out = append(out, string(rec.Data))
	}
	return out
}

func (s *fencedSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]scan.Position{}
	for k, row := range s.rows {
		if k.stream == stream {
			out[k.shard] = row.checkpoint
		}
	}
	return out, nil
}

// The checks a TransactionalSink shared by a fleet makes, on the batches a
// zombie host and the shard's new owner deliver. Host a holds the shard at
// epoch 1 and stores records 1 and 2; it is paused past its lease, and host
// b takes the shard at epoch 2 from the fleet's table, which still says
// "from the start": b's first batch overlaps what the Sink holds. Then a
// wakes up and delivers record 3 and 4 under its lost lease.
func ExampleTransactionalSink_fleet() {
	ctx := context.Background()
	sink := &fencedSink{rows: map[shardKey]*shardRow{}}
	rec := func(seq string) kinesisload.Record {
		return kinesisload.Record{SequenceNumber: seq, Data: []byte("r" + seq)}
	}
	batch := func(epoch uint64, seqs ...string) kinesisload.Batch {
		b := kinesisload.Batch{Stream: "orders", ShardID: "shardId-000000000000", Epoch: epoch,
			Checkpoint: scan.AfterSequence(seqs[len(seqs)-1])}
		for _, s := range seqs {
			b.Records = append(b.Records, rec(s))
		}
		return b
	}
	start := kinesisload.Batch{Stream: "orders", ShardID: "shardId-000000000000", Checkpoint: scan.TrimHorizon()}
	show := func(who string, err error) {
		fmt.Printf("%-34s err=%v lease lost=%v\n", who, err != nil, errors.Is(err, kinesisload.ErrLeaseLost))
	}
	show("start batch (epoch 0)", sink.Deliver(ctx, start))
	show("a: 1..2 at epoch 1", sink.Deliver(ctx, batch(1, "1", "2")))
	show("b: 1..3 at epoch 2 (overlap)", sink.Deliver(ctx, batch(2, "1", "2", "3")))
	show("a: 3..4 at epoch 1 (zombie)", sink.Deliver(ctx, batch(1, "3", "4")))
	show("b: 1..3 again (lost COMMIT answer)", sink.Deliver(ctx, batch(2, "1", "2", "3")))
	show("b: 4 at epoch 2", sink.Deliver(ctx, batch(2, "4")))
	row := sink.rows[shardKey{"orders", "shardId-000000000000"}]
	fmt.Println(row.data(), row.checkpoint, "epoch", row.epoch)
	// Output:
	// start batch (epoch 0)              err=false lease lost=false
	// a: 1..2 at epoch 1                 err=false lease lost=false
	// b: 1..3 at epoch 2 (overlap)       err=false lease lost=false
	// a: 3..4 at epoch 1 (zombie)        err=true lease lost=true
	// b: 1..3 again (lost COMMIT answer) err=false lease lost=false
	// b: 4 at epoch 2                    err=false lease lost=false
	// [r1 r2 r3 r4] AFTER_SEQUENCE_NUMBER:4 epoch 2
}

// A host that lost the lease stores a batch after the new owner found its
// own first batch stored whole (check (a)): the records are still stored
// once, since the new owner then finds that batch stored too, and the old
// host is refused as soon as the new owner stores anything.
func ExampleTransactionalSink_fleetStoredWhole() {
	ctx := context.Background()
	sink := &fencedSink{rows: map[shardKey]*shardRow{}}
	batch := func(epoch uint64, seqs ...string) kinesisload.Batch {
		b := kinesisload.Batch{Stream: "orders", ShardID: "shardId-000000000000", Epoch: epoch,
			Checkpoint: scan.AfterSequence(seqs[len(seqs)-1])}
		for _, s := range seqs {
			b.Records = append(b.Records, kinesisload.Record{SequenceNumber: s, Data: []byte("r" + s)})
		}
		return b
	}
	show := func(who string, err error) {
		fmt.Printf("%-28s err=%v lease lost=%v\n", who, err != nil, errors.Is(err, kinesisload.ErrLeaseLost))
	}
	show("a: 1..2 at epoch 1", sink.Deliver(ctx, batch(1, "1", "2")))
	show("b: 1..2 at epoch 2", sink.Deliver(ctx, batch(2, "1", "2")))
	show("a: 3 at epoch 1 (zombie)", sink.Deliver(ctx, batch(1, "3")))
	show("b: 3..4 at epoch 2", sink.Deliver(ctx, batch(2, "3", "4")))
	show("a: 4..5 at epoch 1 (zombie)", sink.Deliver(ctx, batch(1, "4", "5")))
	row := sink.rows[shardKey{"orders", "shardId-000000000000"}]
	fmt.Println(row.data(), row.checkpoint, "epoch", row.epoch)
	// Output:
	// a: 1..2 at epoch 1           err=false lease lost=false
	// b: 1..2 at epoch 2           err=false lease lost=false
	// a: 3 at epoch 1 (zombie)     err=false lease lost=false
	// b: 3..4 at epoch 2           err=false lease lost=false
	// a: 4..5 at epoch 1 (zombie)  err=true lease lost=true
	// [r1 r2 r3 r4] AFTER_SEQUENCE_NUMBER:4 epoch 2
}

// fencedHarness is the conformance suite's view of a fencedSink: every
// host shares it, as one database.
type fencedHarness struct{ s *fencedSink }

func (h fencedHarness) Sink(string) kinesisload.TransactionalSink { return h.s }

func (h fencedHarness) Stored(_ context.Context, stream, shard string) ([]kinesisload.Record, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	row := h.s.rows[shardKey{stream, shard}]
	if row == nil {
		return nil, nil
	}
	return slices.Clone(row.stored), nil
}

// The Example's Sink keeps the contract it shows: sinktest's conformance
// suite passes it.
func TestExampleFencedSinkConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return fencedHarness{&fencedSink{rows: map[shardKey]*shardRow{}}} })
}

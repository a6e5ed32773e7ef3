package sinktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The conformance suite on the reference implementation.
func TestConformanceMemory(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return sinktest.NewMemory().Harness() })
}

func rec(seq string) kinesisload.Record {
	return kinesisload.Record{SequenceNumber: seq, Data: []byte("r" + seq)}
}

func batch(shard string, epoch uint64, seqs ...string) kinesisload.Batch {
	b := kinesisload.Batch{Stream: "orders", ShardID: shard, Epoch: epoch, Checkpoint: scan.AfterSequence(seqs[len(seqs)-1])}
	for _, s := range seqs {
		b.Records = append(b.Records, rec(s))
	}
	return b
}

// The accessors show what a Deliver did: Store's count of records stored,
// the records per shard in order with their epoch, the row, the refused
// batches and the shards of a stream.
func TestMemoryAccessors(t *testing.T) {
	ctx := context.Background()
	m := sinktest.NewMemory()
	if _, ok := m.Checkpoint("orders", "s0"); ok {
		t.Fatal("Checkpoint of an empty Memory: found")
	}
	steps := []struct {
		b    kinesisload.Batch
		n    int
		lost bool
	}{
		{batch("s0", 1, "1", "2"), 2, false},
		{batch("s0", 2, "2", "3", "4"), 2, false}, // (c)
		{batch("s0", 2, "3", "4"), 0, false},      // (a)
		{batch("s0", 1, "5"), 0, true},            // (b)
		{batch("s1", 0, "7"), 1, false},
	}
	for i, s := range steps {
		n, err := m.Store(ctx, s.b)
		if n != s.n || errors.Is(err, kinesisload.ErrLeaseLost) != s.lost || err != nil && !s.lost {
			t.Fatalf("step %d: Store = %d, %v; want %d records, lease lost %v", i, n, err, s.n, s.lost)
		}
	}
	var got []string
	for _, r := range m.Stored("orders", "s0") {
		got = append(got, fmt.Sprintf("%s@%d", r.SequenceNumber, r.Epoch))
	}
	if want := []string{"1@1", "2@1", "3@2", "4@2"}; !slices.Equal(got, want) {
		t.Errorf("Stored(s0) = %v, want %v", got, want)
	}
	if row, ok := m.Checkpoint("orders", "s0"); !ok || !row.Position.Equal(scan.AfterSequence("4")) || row.Epoch != 2 {
		t.Errorf("Checkpoint(s0) = %v, %v; want AFTER_SEQUENCE_NUMBER:4 at epoch 2", row, ok)
	}
	refused := m.Refused()
	if len(refused) != 1 || refused[0].Batch.Epoch != 1 || refused[0].Held.Epoch != 2 || len(refused[0].Batch.Records) != 1 {
		t.Errorf("Refused() = %+v, want the batch of epoch 1 held at epoch 2", refused)
	}
	if got := m.Shards("orders"); !slices.Equal(got, []string{"s0", "s1"}) {
		t.Errorf("Shards = %v, want [s0 s1]", got)
	}
	if got := m.Shards("other"); len(got) != 0 {
		t.Errorf("Shards(other) = %v, want none", got)
	}
}

// A batch the Loader never makes, or one delivered with an ended ctx,
// stores nothing and is an error naming the stream and shard.
func TestMemoryRefusesMalformed(t *testing.T) {
	ok := batch("s0", 0, "10", "20")
	cases := map[string]func(b *kinesisload.Batch){
		"no stream":            func(b *kinesisload.Batch) { b.Stream = "" },
		"no shard":             func(b *kinesisload.Batch) { b.ShardID = "" },
		"LATEST":               func(b *kinesisload.Batch) { b.Checkpoint = scan.Latest() },
		"invalid checkpoint":   func(b *kinesisload.Batch) { b.Checkpoint = scan.Position{} },
		"bad sequence":         func(b *kinesisload.Batch) { b.Records[0].SequenceNumber = "x" },
		"out of order":         func(b *kinesisload.Batch) { b.Records[0], b.Records[1] = b.Records[1], b.Records[0] },
		"checkpoint too early": func(b *kinesisload.Batch) { b.Checkpoint = scan.AfterSequence("10") },
		"sub-sequence repeated": func(b *kinesisload.Batch) {
			b.Records[1].SequenceNumber = "10"
			b.Checkpoint = scan.AfterSequence("10")
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := sinktest.NewMemory()
			b := ok
			b.Records = slices.Clone(ok.Records)
			mutate(&b)
			err := m.Deliver(context.Background(), b)
			if !errors.Is(err, sinktest.ErrBadBatch) || !strings.Contains(err.Error(), "shard "+b.ShardID) {
				t.Errorf("Deliver = %v, want an error wrapping ErrBadBatch naming the shard", err)
			}
			if got, _ := m.Checkpoints(context.Background(), b.Stream); len(got) != 0 {
				t.Errorf("a malformed batch stored checkpoints %v", got)
			}
		})
	}
	m := sinktest.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Deliver(ctx, ok); !errors.Is(err, context.Canceled) {
		t.Errorf("Deliver with an ended ctx = %v, want context.Canceled", err)
	}
	if _, ok := m.Checkpoint("orders", "s0"); ok {
		t.Error("Deliver with an ended ctx stored a checkpoint")
	}
}

// An overlap at the stored epoch wraps ErrOverlap, not ErrLeaseLost.
func TestMemoryOverlapError(t *testing.T) {
	m := sinktest.NewMemory()
	ctx := context.Background()
	if err := m.Deliver(ctx, batch("s0", 3, "1", "2")); err != nil {
		t.Fatal(err)
	}
	err := m.Deliver(ctx, batch("s0", 3, "2", "3"))
	if !errors.Is(err, sinktest.ErrOverlap) || errors.Is(err, kinesisload.ErrLeaseLost) {
		t.Errorf("Deliver of an overlap at the same epoch = %v, want ErrOverlap and not ErrLeaseLost", err)
	}
}

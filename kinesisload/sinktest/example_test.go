package sinktest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

// A Memory shared by two hosts of a fleet: host a stores records 1 and 2
// at epoch 1 and is paused past its lease; host b takes the shard at epoch
// 2 from a table that lags, so its first batch overlaps; then a wakes up
// and delivers record 3 under its lost lease.
func ExampleMemory() {
	ctx := context.Background()
	m := sinktest.NewMemory()
	batch := func(epoch uint64, seqs ...string) kinesisload.Batch {
		b := kinesisload.Batch{Stream: "orders", ShardID: "shardId-000000000000", Epoch: epoch,
			Checkpoint: scan.AfterSequence(seqs[len(seqs)-1])}
		for _, s := range seqs {
			b.Records = append(b.Records, kinesisload.Record{SequenceNumber: s, Data: []byte("r" + s)})
		}
		return b
	}
	show := func(who string, n int, err error) {
		fmt.Printf("%-26s stored %d, lease lost %v\n", who, n, errors.Is(err, kinesisload.ErrLeaseLost))
	}
	n, err := m.Store(ctx, batch(1, "1", "2"))
	show("a: 1..2 at epoch 1", n, err)
	n, err = m.Store(ctx, batch(2, "1", "2", "3"))
	show("b: 1..3 at epoch 2", n, err)
	n, err = m.Store(ctx, batch(1, "3", "4"))
	show("a: 3..4 at epoch 1", n, err)

	for _, r := range m.Stored("orders", "shardId-000000000000") {
		fmt.Printf("%s at epoch %d\n", r.Data, r.Epoch)
	}
	row, _ := m.Checkpoint("orders", "shardId-000000000000")
	fmt.Println(row.Position, "epoch", row.Epoch, "refused", len(m.Refused()))
	// Output:
	// a: 1..2 at epoch 1         stored 2, lease lost false
	// b: 1..3 at epoch 2         stored 1, lease lost false
	// a: 3..4 at epoch 1         stored 0, lease lost true
	// r1 at epoch 1
	// r2 at epoch 1
	// r3 at epoch 2
	// AFTER_SEQUENCE_NUMBER:3 epoch 2 refused 1
}

package kinesisload

import (
	"errors"
	"fmt"
)

// This file is the Loader's side of a fleet's [TransactionalSink]: the
// Sink is the last fence. It stores each shard's checkpoint with the epoch
// of the batch that wrote it, and refuses a batch of an older epoch with
// an error wrapping [ErrLeaseLost] (a host that lost the lease while it
// was delivering); the Loader then stops that shard as a lost lease.

// sinkFenced returns what a Deliver error that wraps [ErrLeaseLost] means
// for b: in a fleet (b.Epoch > 0) the shard's lease is lost, as a
// [*LeaseLostError] of reason [LostSinkFenced] (not retried, and Run goes
// on); without a fleet's lease (epoch 0) the Sink refuses what no newer
// owner can have written, so Run stops with a [*RunError] of class
// [ErrSink] naming the shard rather than retrying a refusal that cannot end.
func sinkFenced(b Batch, err error) error {
	if b.Epoch == 0 {
		return &RunError{Stream: b.Stream, Shard: b.ShardID, Op: "Deliver", Kind: ErrSink,
			Err: fmt.Errorf("the sink refused the batch of %d records ending at %v as delivered under a lost lease, but it carries no fleet's lease (epoch 0; does the sink hold the shard under a fleet's epoch?): %w",
				len(b.Records), b.Checkpoint, err)}
	}
	return &LeaseLostError{Stream: b.Stream, Shard: b.ShardID, Epoch: b.Epoch, Why: LostSinkFenced,
		Reason: fmt.Sprintf("the sink refused the batch of %d records ending at %v: %v", len(b.Records), b.Checkpoint, err)}
}

// isSinkFenced reports whether err is the loss [sinkFenced] returns.
func isSinkFenced(err error) bool {
	lost, ok := errors.AsType[*LeaseLostError](err)
	return ok && lost.Why == LostSinkFenced
}

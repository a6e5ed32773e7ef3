package kinesisload

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark/tidemark/scan"
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

// releaseFenced gives up the lease of a shard the Sink fenced. The
// coordinator may not know the lease is lost yet: Release, conditional on
// the lease's owner and epoch, then writes nothing (another host owns the
// shard), or frees a shard the fleet's table still gives this host, so
// that no host holds it without reading it. Its failure is not one of the
// Loader: the coordinator finds the loss on its own.
func (s *session) releaseFenced(hctx context.Context, ls Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), s.l.cfg.CallTimeout)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		s.l.log.Debug("releasing a lease the sink fenced", "shard", ls.Shard(), "epoch", ls.Epoch(), "err", err)
	}
}

// sinkCheckpoints returns, for the shards of leases just granted in a
// fleet, the checkpoints a [TransactionalSink] holds: one Checkpoints call
// per acquisition round, none without a fleet (the Sink's checkpoints were
// merged at initialisation and only this process moves them) or without
// a TransactionalSink. A shard then resumes from the furthest of its
// lease's progress and the Sink's checkpoint, so a new owner does not read
// again what the Sink already stored (a coordinator whose commits lag, as
// with a CheckpointInterval, or a host that stored a batch but died before
// its commit). It is an optimisation: a Sink that keeps the contract of
// [TransactionalSink] stores nothing twice without it. So a failure is
// logged and the leases' progress stands. SHARD_END is left out: the
// shard's loop reads to its end and commits COMPLETED, which the fleet
// needs to release its children, while the Sink stores nothing again.
func (s *session) sinkCheckpoints(ctx context.Context, leases []Lease) map[string]scan.Position {
	l := s.l
	if l.tx == nil || !s.shared || len(leases) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.CallTimeout)
	defer cancel()
	cps, err := l.tx.Checkpoints(cctx, l.cfg.Stream)
	if err != nil {
		if ctx.Err() == nil { // not stopping (a call that timed out is logged)
			l.log.Warn("loading the sink's checkpoints for the leases acquired; resuming from the fleet's progress", "err", err)
		}
		return nil
	}
	out := make(map[string]scan.Position, len(leases))
	for _, ls := range leases {
		id := ls.Shard()
		pos, ok := cps[id]
		if !ok || pos.Kind == scan.KindShardEnd {
			continue
		}
		if err := pos.Validate(); err != nil || pos.Kind == scan.KindLatest {
			l.log.Warn("the sink's checkpoint is not a position; resuming from the fleet's progress", "shard", id, "checkpoint", pos, "err", err)
			continue
		}
		out[id] = pos
	}
	return out
}

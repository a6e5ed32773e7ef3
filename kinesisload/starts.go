package kinesisload

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/scan"
)

// startStoreParallelism bounds the concurrent Deliver calls that hand the
// starts of initialisation to a TransactionalSink.
const startStoreParallelism = 16

// storeStarts hands a [TransactionalSink] the start of every shard that it
// holds no checkpoint for (inSink), each as a Batch with no records whose
// Checkpoint is the start, so that the Sink alone knows where every shard
// starts: a lost or deleted journal then never makes the Loader resolve
// LATEST again, later. It runs after the initialisation batch is journaled
// (a crash before it is done is repaired by the next initialisation, from
// the journal) and before any shard is read.
func (s *session) storeStarts(ctx context.Context, t *topology, inSink map[string]bool) (int, error) {
	if s.l.tx == nil {
		return 0, nil
	}
	// In a fleet's later generation, above every epoch of the earlier
	// ones: see StartEpocher.
	var epoch uint64
	if se, ok := s.m.(StartEpocher); ok {
		epoch = se.StartEpoch()
	}
	var batches []Batch
	for _, id := range sortedKeys(t.nodes) {
		n := t.nodes[id]
		if !n.listed || !t.tracked(id) || inSink[id] || n.Position.Kind == 0 || n.Position.Kind == scan.KindLatest {
			continue
		}
		batches = append(batches, Batch{Stream: t.stream, ShardID: id, Checkpoint: n.Position, Epoch: epoch})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(startStoreParallelism)
	for _, b := range batches {
		g.Go(func() error {
			_, err := s.deliverRetrying(gctx, b, nil)
			initProgress(s.store)
			if isSinkFenced(err) {
				// No lease was given for a start batch: a refusal as
				// from a lost one is the Sink's failure, not the loss
				// of the fleet's initialisation lock.
				return &RunError{Stream: b.Stream, Shard: b.ShardID, Op: "Deliver", Kind: ErrSink,
					Err: fmt.Errorf("the sink refused the start batch (checkpoint %v, epoch %d) as delivered under a lost lease: does it hold the shard under an epoch of another lease table?: %w",
						b.Checkpoint, b.Epoch, err)}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	return len(batches), nil
}

package kinesisload

import (
	"context"

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
	var batches []Batch
	for _, id := range sortedKeys(t.nodes) {
		n := t.nodes[id]
		if !n.listed || !t.tracked(id) || inSink[id] || n.Position.Kind == 0 || n.Position.Kind == scan.KindLatest {
			continue
		}
		batches = append(batches, Batch{Stream: t.stream, ShardID: id, Checkpoint: n.Position})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(startStoreParallelism)
	for _, b := range batches {
		g.Go(func() error {
			_, err := s.deliverRetrying(gctx, b)
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

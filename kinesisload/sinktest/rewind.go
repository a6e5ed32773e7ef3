package sinktest

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

var _ kinesisload.Rewinder = (*Memory)(nil)

// RewindCheckpoint implements [kinesisload.Rewinder]: the shard's row
// becomes (to, epoch), whatever the stored checkpoint, and its records
// stay (the records after to are stored again when they are delivered
// again: [Memory.Stored] shows them twice). A shard with no row gets one.
// It is idempotent.
func (m *Memory) RewindCheckpoint(ctx context.Context, stream, shard string, to scan.Position, epoch uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stream == "" || shard == "" {
		return errors.New("sinktest: RewindCheckpoint: no stream or shard")
	}
	if err := kinesisload.CheckRewindPosition(to); err != nil {
		return err
	}
	if m.flaws.has(flawRewindNoop) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := shardKey{stream, shard}
	s := m.shards[key]
	if s == nil {
		s = &shardRows{}
		m.shards[key] = s
	}
	if m.flaws.has(flawRewindKeepsEpoch) && s.row.Position.Kind != 0 {
		epoch = s.row.Epoch
	}
	s.row, s.removed = Checkpoint{Position: to, Epoch: epoch}, false
	return nil
}

package pgsink

import (
	"context"
	"fmt"
	"math"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

var _ kinesisload.Rewinder = (*Sink)(nil)

// RewindCheckpoint implements [kinesisload.Rewinder]: after an operator's
// rewind (tidemark rewind), the Loader sets the shard's checkpoint to the
// rewind's position to, at the epoch of the lease it reads the shard
// under, in one transaction. The records stored are kept; the checkpoint
// it sets back is kept too, as replay_until: the records up to it, which
// the Loader delivers again, are each stored once (a record the table
// holds is left as it is), and the duplicate check ([ErrDuplicate]) holds
// again for the records after it. Calling it again with the same
// arguments changes nothing more.
func (s *Sink) RewindCheckpoint(ctx context.Context, stream, shard string, to scan.Position, epoch uint64) (err error) {
	b := kinesisload.Batch{Stream: stream, ShardID: shard, Checkpoint: to, Epoch: epoch}
	defer func() {
		if err != nil {
			err = classify(fmt.Errorf("pgsink: stream %s: shard %s: rewinding the checkpoint to %v: %w", stream, shard, to, err))
		}
	}()
	if stream == "" || shard == "" {
		return kinesisload.Permanent(fmt.Errorf("no stream or shard"))
	}
	if err := kinesisload.CheckRewindPosition(to); err != nil {
		return kinesisload.Permanent(err)
	}
	if epoch > math.MaxInt64 {
		return kinesisload.Permanent(fmt.Errorf("epoch %d does not fit the epoch column (bigint)", epoch))
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the first error is what matters
	rows, err := lockCheckpoints(ctx, tx, []kinesisload.Batch{b})
	if err != nil {
		return err
	}
	replay := replayUntil(rows[0], to)
	if _, err := tx.Exec(ctx, `
		UPDATE tidemark_checkpoints SET position = $3, epoch = $4, position_epoch = $4, replay_until = $5, updated_at = now()
		WHERE stream = $1 AND shard = $2`, stream, shard, to.String(), int64(epoch), replay); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// replayUntil returns the replay_until a rewind to to leaves on row: the
// furthest of the checkpoint it sets back and an earlier rewind's
// replay_until (rewinds in a row), when that is a sequence position or
// SHARD_END (every record of the shard is stored) further than to; ""
// otherwise (no record up to it is stored).
func replayUntil(row checkpointRow, to scan.Position) string {
	var best scan.Position
	for _, p := range []scan.Position{row.replayUntil, row.position} {
		if !row.found || p.Kind != scan.KindAfterSequence && p.Kind != scan.KindAtSequence && p.Kind != scan.KindShardEnd {
			continue
		}
		if best.Kind == 0 {
			best = p
		} else if c, err := scan.Compare(p, best); err == nil && c > 0 {
			best = p
		}
	}
	if best.Kind == 0 {
		return ""
	}
	if best.Kind != scan.KindShardEnd && (to.Kind == scan.KindAfterSequence || to.Kind == scan.KindAtSequence) {
		if c := scan.CompareSequence(to.Sequence, best.Sequence); c > 0 || c == 0 && to.Kind == scan.KindAfterSequence {
			return "" // a rewind forward: nothing stored is delivered again
		}
	}
	return best.String()
}

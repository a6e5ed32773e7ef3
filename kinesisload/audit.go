package kinesisload

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tidemark/tidemark/scan"
)

// This file is the shard audit of a fleet: a shard Kinesis lists, that
// the fleet's shared progress held, and whose entry is gone (deleted by
// hand from the table) would never be granted to any host again, and no
// host would say why. The Loader notices it, and recovers it from a
// TransactionalSink's checkpoint, or stops naming it.

// MissingShardError stops Run when shards that Kinesis lists, and that
// the fleet's shared progress held, are missing from it (their items were
// deleted by hand): their positions are lost, and no host would read them
// again. Without a [TransactionalSink] holding their checkpoints, the
// Loader cannot tell where they resume. errors.Is(err, ErrShardMissing)
// holds. Restore the items (from an export made before, with the tidemark
// command's import), then run again.
type MissingShardError struct {
	Stream string
	// Shards are the shards missing, sorted.
	Shards []string
}

func (e *MissingShardError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: shards %s are listed by Kinesis and were in the fleet's table, but their progress is gone from it (deleted by hand?): "+
		"no host would read them again, and no TransactionalSink holds their checkpoints; restore them from an export (tidemark import) or a backup of the table, then run again",
		e.Stream, strings.Join(e.Shards, ", "))
}

// Unwrap returns [ErrShardMissing].
func (e *MissingShardError) Unwrap() error { return ErrShardMissing }

// audit compares the shared progress a fleet loaded (stored) with the
// topology: a tracked shard that Kinesis lists, that is not COMPLETED,
// that this session saw stored, and that stored lacks now, is missing. It
// is saved again from the Sink's checkpoint when a TransactionalSink holds
// one; otherwise audit returns a [*MissingShardError].
//
// At initialisation (a host starting) nothing was seen stored yet: a
// listed shard with no progress, none of whose parents has any, in a
// stream whose progress holds others, was there when the stream was
// initialised (or the selection was widened to it): its item may have
// been deleted. It starts at TRIM_HORIZON, as a shard born later (records
// may be delivered again, none is lost); audit says so in the log. (With
// a TransactionalSink its checkpoint was merged already.)
func (s *session) audit(ctx context.Context, t *topology, stored map[string]ShardProgress, initialising bool) error {
	if !s.shared || len(stored) == 0 {
		return nil
	}
	var missing, orphans []string
	for id, n := range t.nodes {
		if _, ok := stored[id]; ok || !n.listed || n.State == StateCompleted || !t.tracked(id) {
			continue
		}
		switch {
		case n.saved != 0 && !initialising:
			missing = append(missing, id)
		case initialising && !slices.ContainsFunc(n.Parents, func(p string) bool { _, ok := stored[p]; return ok }):
			if _, selected := t.selected[id]; !selected {
				orphans = append(orphans, id)
			}
		}
	}
	if len(orphans) > 0 {
		slices.Sort(orphans)
		s.l.log.Warn("shards listed by Kinesis have no progress in the fleet's table, nor have their parents, though the stream's progress holds others: "+
			"if their items were deleted by hand they are read from TRIM_HORIZON (records delivered again); restore them from an export to resume where they were",
			"shards", orphans)
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	var cps map[string]scan.Position
	if s.l.tx != nil {
		cctx, cancel := context.WithTimeout(ctx, s.l.cfg.CallTimeout)
		var err error
		cps, err = s.l.tx.Checkpoints(cctx, t.stream)
		cancel()
		if err != nil && ctx.Err() == nil {
			return stopError(t.stream, missing[0], "Checkpoints", ErrSink, fmt.Errorf("loading the sink's checkpoints to recover shards missing from the fleet's table: %w", err))
		}
	}
	var recover []ShardProgress
	var lost []string
	for _, id := range missing {
		pos, ok := cps[id]
		if !ok || pos.Validate() != nil || pos.Kind == scan.KindLatest {
			lost = append(lost, id)
			continue
		}
		u := ShardProgress{ShardID: id, Parents: t.nodes[id].Parents, Position: pos, State: StateActive}
		if pos.Kind == scan.KindShardEnd {
			u.State = StateCompleted
		}
		recover = append(recover, u)
	}
	if len(lost) > 0 {
		return stopError(t.stream, lost[0], "Load", ErrJournal, &MissingShardError{Stream: t.stream, Shards: lost})
	}
	s.l.log.Warn("shards missing from the fleet's table (deleted by hand?): saved again from the TransactionalSink's checkpoints", "shards", missing)
	return s.save(ctx, t, recover)
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// Import writes progress into table for stream, which no host of the
// fleet has started on: the identity item (when id is not zero) and one
// shard item per element of shards, unowned, at the first generation's
// first epoch, with the progress as given (state, position, parents). The
// first host that joins then initialises the stream as usual (it resolves
// only the shards Kinesis lists that shards leaves out) and every host
// resumes each imported shard from its position. It is how a fleet
// starts from a journal's progress, another table's, or a KCL lease
// table's (cmd/tidemark import and import-kcl).
//
// Import refuses, writing nothing, when the stream's identity item names
// another stream or a later generation, when the stream's initialisation
// item exists (a host started on it), or when a shard item exists that is
// not the one Import would write (an error wrapping [ErrNotEmpty]); and
// when a shard has no ID, is listed twice, or has progress that cannot be
// restored ([kinesisload.CheckRestore]: LATEST, an invalid position,
// SHARD_END without COMPLETED or the reverse). An Import that failed part-way
// can be run again: the items it wrote already are the ones it would
// write.
func Import(ctx context.Context, table Table, stream string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress) error {
	if stream == "" {
		return errors.New("fleet: Import: the stream name is empty")
	}
	seen := map[string]bool{}
	for i, p := range shards {
		switch {
		case p.ShardID == "":
			return fmt.Errorf("fleet: import into stream %s: shard %d of %d has no ID", stream, i+1, len(shards))
		case seen[p.ShardID]:
			return fmt.Errorf("fleet: import into stream %s: shard %s is listed twice", stream, p.ShardID)
		}
		seen[p.ShardID] = true
		if err := kinesisload.CheckRestore(p); err != nil {
			return fmt.Errorf("fleet: import into stream %s: shard %s: %w", stream, p.ShardID, err)
		}
	}
	it, err := table.Get(ctx, stream, keyIdentity)
	if err != nil {
		return fmt.Errorf("fleet: stream %s: reading the identity item: %w", stream, err)
	}
	ident, err := decodeIdentity(it)
	if err != nil {
		return err
	}
	switch {
	case ident.gen > 0:
		return fmt.Errorf("%w: stream %s: its progress is at generation %d (the fleet started over on a re-created stream): import into a table that never held the stream", ErrNotEmpty, stream, ident.gen)
	case it.Exists() && !ident.id.IsZero() && !id.IsZero() && !ident.id.Equal(id):
		return fmt.Errorf("%w: stream %s: the table's identity item names %s, the import %s", ErrNotEmpty, stream, ident.id, id)
	}
	snap, err := query(ctx, table, stream)
	if err != nil {
		return fmt.Errorf("fleet: stream %s: reading the table: %w", stream, err)
	}
	if snap.init.item.Exists() {
		return fmt.Errorf("%w: stream %s: hosts have started on it (the initialisation item exists, lock held by %q): to move the positions of a fleet, rewind them (cmd/tidemark rewind --from FILE)",
			ErrNotEmpty, stream, snap.init.lockOwner)
	}
	floor := createEpoch(0, time.Now())
	want := make(map[string]*shardItem, len(shards))
	for _, p := range shards {
		p.Parents = slices.Sorted(slices.Values(p.Parents))
		// Epochs above those of the table (or journal) the positions
		// come from, which a TransactionalSink may hold: see epochFloor.
		s := &shardItem{id: p.ShardID, item: Item{Partition: stream, Key: prefixShard + p.ShardID}, epoch: floor, base: floor, prog: p}
		if got, ok := snap.shards[p.ShardID]; ok && !sameImport(got, s) {
			return fmt.Errorf("%w: stream %s: shard %s has an item already (owner %q, epoch %d, progress %+v)", ErrNotEmpty, stream, p.ShardID, got.owner, got.epoch, got.prog)
		}
		want[p.ShardID] = s
	}
	if ident.id.IsZero() && !id.IsZero() {
		next := ident
		next.id = id
		if err := putOnce(ctx, table, next.encode(stream), func(got Item) (bool, error) {
			gi, err := decodeIdentity(got)
			return err == nil && gi.gen == 0 && gi.id.Equal(id), err
		}); err != nil {
			return fmt.Errorf("fleet: stream %s: writing the identity item: %w", stream, err)
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(want)) {
		s := want[shard]
		if _, ok := snap.shards[shard]; ok {
			continue // written by an earlier run of the import
		}
		if err := putOnce(ctx, table, s.encode(stream), func(got Item) (bool, error) {
			gs, err := decodeShard(got)
			return err == nil && sameImport(gs, s), err
		}); err != nil {
			return fmt.Errorf("fleet: stream %s: writing shard %s: %w", stream, shard, err)
		}
	}
	return nil
}

// sameImport reports whether the stored item got is the item Import
// writes for s.
func sameImport(got, s *shardItem) bool {
	return got.owner == "" && got.handoff == "" && got.epoch == got.base && len(got.pend) == 0 && same(got.prog, s.prog)
}

// putOnce writes it, which must not exist: an unknown outcome or a
// conflict is read back, and landed (the item as stored) decides whether
// it is the write's.
func putOnce(ctx context.Context, table Table, it Item, landed func(Item) (bool, error)) error {
	for attempt := 0; ; attempt++ {
		_, err := table.Put(ctx, it)
		if err == nil {
			return nil
		}
		if fatal(err) {
			return err
		}
		got, gerr := table.Get(ctx, it.Partition, it.Key)
		if gerr == nil && got.Exists() {
			ok, derr := landed(got)
			switch {
			case derr != nil:
				return derr
			case ok:
				return nil
			}
			return fmt.Errorf("%w: %s/%s was written by another meanwhile", ErrNotEmpty, it.Partition, it.Key)
		}
		if gerr != nil && fatal(gerr) {
			return gerr
		}
		if attempt >= 8 {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

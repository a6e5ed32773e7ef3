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
	if err := checkShards("import", stream, shards); err != nil {
		return err
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
	// An identity item deleted (or restored) while later generations
	// hold the progress names generation 0 wrongly: an import there
	// would send the fleet back to it.
	if later, err := laterGeneration(ctx, table, stream, ident.gen); err != nil {
		return err
	} else if later > ident.gen {
		return fmt.Errorf("%w: stream %s: its progress is at generation %d (partition %s; the fleet started over on a re-created stream), though the identity item names generation %d or is gone: import into a table that never held the stream",
			ErrNotEmpty, stream, later, partition(stream, later), ident.gen)
	}
	snap, err := query(ctx, table, stream)
	if err != nil {
		return fmt.Errorf("fleet: stream %s: reading the table: %w", stream, err)
	}
	if snap.init.item.Exists() {
		return fmt.Errorf("%w: stream %s: hosts have started on it (the initialisation item exists, lock held by %q): to move the positions of a fleet, rewind them (cmd/tidemark rewind --from FILE); to write again shard items deleted by hand, RestoreMissing (cmd/tidemark import --missing)",
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
		if err := putImported(ctx, table, stream, s); err != nil {
			return fmt.Errorf("fleet: stream %s: writing shard %s: %w", stream, shard, err)
		}
	}
	return nil
}

// checkShards refuses a list of progress to op ("import", "restore")
// into stream that holds a shard without an ID, a shard twice, or
// progress that cannot be restored ([kinesisload.CheckRestore]).
func checkShards(op, stream string, shards []kinesisload.ShardProgress) error {
	seen := map[string]bool{}
	for i, p := range shards {
		switch {
		case p.ShardID == "":
			return fmt.Errorf("fleet: %s into stream %s: shard %d of %d has no ID", op, stream, i+1, len(shards))
		case seen[p.ShardID]:
			return fmt.Errorf("fleet: %s into stream %s: shard %s is listed twice", op, stream, p.ShardID)
		}
		seen[p.ShardID] = true
		if err := kinesisload.CheckRestore(p); err != nil {
			return fmt.Errorf("fleet: %s into stream %s: shard %s: %w", op, stream, p.ShardID, err)
		}
	}
	return nil
}

// putImported writes s, unowned at its first epoch, into partition part
// on condition that it is absent (see putOnce): an item found there is
// the write's when it is the one Import would write.
func putImported(ctx context.Context, table Table, part string, s *shardItem) error {
	return putOnce(ctx, table, s.encode(part), func(got Item) (bool, error) {
		gs, err := decodeShard(got)
		return err == nil && sameImport(gs, s), err
	})
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

// RestoreMissing writes again, from an export, the shard items of stream
// that were deleted from table by hand while its fleet ran: for each
// element of shards whose item the generation in force lacks, an item
// with that progress, unowned, its epochs above any the deleted item had
// (as for any item saved again after a deletion: see [Import]'s epochs),
// written on condition that it is still absent. Items present are left as
// they are (a host may have written one again meanwhile, with a position
// further than the export's). It returns the shards it wrote, sorted.
//
// It is the way back from a [kinesisload.MissingShardError] that a plain
// Sink's Loader stops with: restore the items, then start the Loaders
// again. The export is older than the deletion, so the records after its
// positions are delivered again; none is lost. An operator's rewind that
// lived in a deleted item is lost with it (rewind again).
//
// It refuses, writing nothing, when the export names another stream
// incarnation than the fleet's identity item, or names none while the
// fleet has one (an error wrapping [ErrNotEmpty]); when the stream's
// initialisation has not committed (use [Import] on a fleet that never
// started); and when a shard has no ID, is listed twice, or has progress
// that cannot be restored ([kinesisload.CheckRestore]). It can be run
// again: what it wrote is then present, and left.
func RestoreMissing(ctx context.Context, table Table, stream string, id kinesisload.StreamIdentity, shards []kinesisload.ShardProgress) ([]string, error) {
	if stream == "" {
		return nil, errors.New("fleet: RestoreMissing: the stream name is empty")
	}
	if err := checkShards("restore", stream, shards); err != nil {
		return nil, err
	}
	ident, err := generationInForce(ctx, table, stream)
	if err != nil {
		return nil, err
	}
	switch {
	case !ident.id.IsZero() && id.IsZero():
		return nil, fmt.Errorf("%w: stream %s: the export names no stream incarnation, the table's identity item names %s: restore from an export of this fleet", ErrNotEmpty, stream, ident.id)
	case !ident.id.IsZero() && !ident.id.Equal(id):
		return nil, fmt.Errorf("%w: stream %s: the table's identity item names %s (generation %d), the export %s: its positions are another stream's", ErrNotEmpty, stream, ident.id, ident.gen, id)
	}
	part := partition(stream, ident.gen)
	snap, err := query(ctx, table, part)
	if err != nil {
		return nil, fmt.Errorf("fleet: stream %s: reading the table: %w", stream, err)
	}
	if snap.init.committed == "" {
		return nil, fmt.Errorf("fleet: stream %s: its initialisation has not committed (partition %s): nothing to restore into; a fleet that never started takes an export by Import", stream, part)
	}
	// Epochs above the deleted item's: the floor of an item created now,
	// or above every lease a host committed the shard under (its
	// positions), should this machine's clock be behind the hosts'.
	above, err := leaseEpochs(ctx, table, part, snap.roster)
	if err != nil {
		return nil, fmt.Errorf("fleet: stream %s: reading the hosts' positions: %w", stream, err)
	}
	floor := createEpoch(ident.gen, time.Now())
	var wrote []string
	for _, p := range shards {
		if _, ok := snap.shards[p.ShardID]; ok {
			continue
		}
		p.Parents = slices.Sorted(slices.Values(p.Parents))
		epoch := max(floor, above[p.ShardID]+1)
		s := &shardItem{id: p.ShardID, item: Item{Partition: part, Key: prefixShard + p.ShardID}, epoch: epoch, base: epoch, prog: p}
		err := putImported(ctx, table, part, s)
		switch {
		case errors.Is(err, ErrNotEmpty):
			continue // a host wrote it again meanwhile: its position is the further
		case err != nil:
			return wrote, fmt.Errorf("fleet: stream %s: writing shard %s: %w", stream, p.ShardID, err)
		}
		wrote = append(wrote, p.ShardID)
	}
	slices.Sort(wrote)
	return wrote, nil
}

// leaseEpochs returns, per shard, the highest epoch under which a host of
// roster r committed a position of it (its positions in partition part).
func leaseEpochs(ctx context.Context, table Table, part string, r roster) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := eachHostsPositions(ctx, table, part, r, func(_ string, items []Item) bool {
		entries, _ := decodePositions(items) // what decodes
		for id, e := range entries {
			out[id] = max(out[id], e.epoch)
		}
		return true
	})
	return out, err
}

package kinesisload

import (
	"context"
	"slices"
)

// Pruner is a [PositionStore] that can drop the progress of shards. The
// Loader prunes a shard that is COMPLETED and that ListShards no longer
// returns (its records have expired), so that a stream that reshards every
// day does not grow its store for ever. A store that is not a Pruner keeps
// every shard. [JournalStore] is a Pruner.
type Pruner interface {
	// Prune durably drops the progress of shardIDs of stream; an unknown
	// shard ID is not an error. The Loader prunes only COMPLETED shards
	// and saves nothing for them afterwards. After Prune returns nil, Load
	// no longer returns them; after a crash during Prune, Load returns
	// each of them or not.
	Prune(ctx context.Context, stream string, shardIDs []string) error
}

var _ Pruner = (*JournalStore)(nil)

// pruneChunk is the most shard IDs one prune record names: prunes need no
// atomicity, so a long list is written as several small records.
const pruneChunk = 4096

// Prune implements [Pruner]. Each record names at most pruneChunk shards;
// the next snapshot no longer holds them.
func (s *JournalStore) Prune(ctx context.Context, stream string, shardIDs []string) error {
	for ids := range slices.Chunk(shardIDs, pruneChunk) {
		s.mu.Lock()
		gen := s.gen(stream)
		s.mu.Unlock()
		if err := s.write(ctx, stream, storeRecord{Stream: stream, Prune: ids, Gen: gen}); err != nil {
			return err
		}
	}
	return nil
}

// prunable returns the shards the Loader no longer needs to remember: those
// COMPLETED and no longer listed (expired by retention, so never listed
// again). Called after a complete ListShards result was observed, when
// every listed child is known with its parents. Forgetting one changes no
// decision: a child's unknown parent does not hold it back, as a COMPLETED
// one would not, and the lineage check concerns only shards not COMPLETED. With a Config.Shards selection, a descendant of a selected
// shard is tracked through its ancestors, so the selected shards and the
// ancestors that a tracked shard still needs for that are kept.
func (t *topology) prunable() []string {
	cand := map[string]bool{}
	for id, n := range t.nodes {
		// A selected shard stays: Run checks that it exists.
		if _, selected := t.selected[id]; n.State == StateCompleted && !n.listed && !selected {
			cand[id] = true
		}
	}
	if len(cand) == 0 {
		return nil
	}
	if t.selected != nil {
		t.keepTracking(cand)
	}
	return sortedKeys(cand)
}

// keepTracking removes from cand every ancestor that a tracked shard left
// in the topology needs to stay tracked: the shards on its ancestry up to a
// selected shard.
func (t *topology) keepTracking(cand map[string]bool) {
	for changed := true; changed; {
		changed = false
		for id, n := range t.nodes {
			if cand[id] || !t.tracked(id) || t.trackedWithout(id, cand) {
				continue
			}
			// Keep every candidate ancestor of n: conservative, and
			// enough, since tracked did find a path through them.
			for _, a := range t.ancestors(n) {
				if cand[a] {
					delete(cand, a)
					changed = true
				}
			}
		}
	}
}

// ancestors returns the IDs of every known ancestor of n.
func (t *topology) ancestors(n *node) []string {
	var out []string
	seen := map[string]bool{}
	queue := slices.Clone(n.Parents)
	for len(queue) > 0 && len(seen) <= 10000 {
		id := queue[0]
		queue = queue[1:]
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
		if a := t.nodes[id]; a != nil {
			queue = append(queue, a.Parents...)
		}
	}
	return out
}

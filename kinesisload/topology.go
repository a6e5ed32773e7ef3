package kinesisload

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/scan"
)

// ParentAfterChildError is returned by Run, before anything is read or
// saved, when reading a shard would deliver its records after records of
// one of its children (or a later descendant) that an earlier run already
// read: typically a selection (Config.Shards) widened to a parent whose
// child was followed. errors.Is(err, ErrLineage) holds. Run returns it as
// the Err of a [*RunError] (Op "Lineage", Shard the parent).
//
// There are two ways out, both explicit: set Config.Shards[Parent] to
// SHARD_END to skip the parent's remaining records, or name the parent in
// Config.OutOfOrderShards to deliver them after the child's.
type ParentAfterChildError struct {
	Stream string
	// Parent is the shard that would be read; Child is a shard descended
	// from it that has already been read.
	Parent, Child string
}

// Error names the parent and the child read before it.
func (e *ParentAfterChildError) Error() string {
	return fmt.Sprintf("kinesisload: stream %s: shard %s would be read after its descendant %s was read, delivering a parent's records after its child's; "+
		"to skip %s's remaining records set Config.Shards[%s] = SHARD_END, or to deliver them out of order add %s to Config.OutOfOrderShards",
		e.Stream, e.Parent, e.Child, e.Parent, e.Parent, e.Parent)
}

// Unwrap returns [ErrLineage].
func (e *ParentAfterChildError) Unwrap() error { return ErrLineage }

// node is one shard of the topology.
type node struct {
	ShardProgress
	closed bool       // ListShards gave it an ending sequence number
	listed bool       // it was in the last ListShards
	keys   hashRange  // its hash key range, from ListShards
	saved  ShardState // the state last made durable; 0 for a new shard
	// begun says an earlier run may have delivered records of the shard:
	// its stored state was ACTIVE or later, or a TransactionalSink holds
	// a checkpoint after a record of it.
	begun bool
}

// topology is the lineage graph of the tracked shards. It is owned by one
// goroutine (the Loader's scheduler) and needs no lock.
type topology struct {
	stream   string
	start    scan.Position            // Config.StartPosition
	selected map[string]scan.Position // Config.Shards; nil = all
	// outOfOrder holds Config.OutOfOrderShards: parents that may be read
	// after a child of theirs was.
	outOfOrder map[string]bool
	nodes      map[string]*node
	// initial is true while no progress of a tracked shard is stored:
	// the first run on the stream, when every shard takes the start
	// position. Later-born shards start at TRIM_HORIZON.
	initial bool
	// resolving is true until the initialisation batch is saved: shards
	// seen until then may start at a configured position (even LATEST,
	// which the batch resolves); shards seen later were born later.
	resolving bool
}

// shardError is an error about one shard: the RunError that stops Run
// with it names the shard.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string { return e.err.Error() }
func (e *shardError) Unwrap() error { return e.err }

func newTopology(stream string, start scan.Position, selected map[string]scan.Position, stored map[string]ShardProgress) *topology {
	t := &topology{stream: stream, start: start, selected: selected, nodes: map[string]*node{}}
	for id, p := range stored {
		p.ShardID = id
		begun := p.State >= StateActive || p.Position.Kind == scan.KindAfterSequence || p.Position.Kind == scan.KindShardEnd
		t.nodes[id] = &node{ShardProgress: p, saved: p.State, begun: begun}
	}
	t.initial, t.resolving = true, true
	for id := range t.nodes {
		if t.tracked(id) {
			t.initial = false
			break
		}
	}
	return t
}

// tracked reports whether the Loader reads shard id: every shard when no
// selection is given, else a selected shard or a descendant of one.
func (t *topology) tracked(id string) bool {
	return t.selected == nil || t.trackedWithout(id, nil)
}

// trackedWithout tells whether id or one of its ancestors is selected,
// walking the lineage without the shards in gone. Each shard is visited
// once, however many paths lead to it through merges.
func (t *topology) trackedWithout(id string, gone map[string]bool) bool {
	seen := map[string]bool{}
	queue := []string{id}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if seen[cur] || gone[cur] {
			continue
		}
		seen[cur] = true
		if _, ok := t.selected[cur]; ok {
			return true
		}
		if n := t.nodes[cur]; n != nil {
			queue = append(queue, n.Parents...)
		}
	}
	return false
}

// observe merges a complete ListShards result into the topology and
// returns the updates to save: new shards with their lineage, start and
// state. It fails with ErrLineage when a tracked shard that is not
// COMPLETED is missing from the list.
func (t *topology) observe(shards []types.Shard) ([]ShardProgress, error) {
	for _, n := range t.nodes {
		n.listed = false
	}
	var fresh []string
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		n := t.nodes[id]
		if n == nil {
			n = &node{ShardProgress: ShardProgress{ShardID: id}}
			t.nodes[id] = n
			fresh = append(fresh, id)
		}
		for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			if p != nil && *p != "" && !slices.Contains(n.Parents, *p) {
				n.Parents = append(n.Parents, *p)
			}
		}
		slices.Sort(n.Parents)
		n.listed = true
		n.closed = shardClosed(s)
		n.keys = shardHashRange(s)
	}
	for _, id := range sortedKeys(t.nodes) {
		// A shard whose end was read and committed cannot be open again:
		// the progress belongs to another stream (one deleted and created
		// again under the name reuses the shard IDs). Skipping the shard
		// would skip the new one's records.
		if n := t.nodes[id]; n.listed && !n.closed && n.State == StateCompleted && t.tracked(id) {
			return nil, &shardError{shard: id, err: fmt.Errorf("%w: stream %s: shard %s is COMPLETED (at %v) in the stored progress, but Kinesis lists it open: "+
				"the progress belongs to another stream (was the stream deleted and created again under the same name, "+
				"or the journal or the sink's checkpoints copied from another stream?); nothing of it was skipped",
				ErrLineage, t.stream, id, n.Position)}
		}
	}
	for id, n := range t.nodes {
		// A shard known by a state, or only by a TransactionalSink's
		// position, that is gone before it was completed.
		known := n.State != 0 || n.Position.Kind != 0
		if !n.listed && known && n.State != StateCompleted && n.Position.Kind != scan.KindShardEnd && t.tracked(id) {
			return nil, &shardError{shard: id, err: fmt.Errorf("%w: stream %s: shard %s is no longer listed but was %s at %v: its unread records have expired",
				ErrLineage, t.stream, id, n.State, n.Position)}
		}
	}
	// A listed shard known only by a position (a TransactionalSink's
	// checkpoint, with no journal behind it) gets its state decided too.
	for id, n := range t.nodes {
		if n.listed && (n.State == 0 || n.State == StateDiscovered) && !slices.Contains(fresh, id) {
			fresh = append(fresh, id)
		}
	}
	// Parents first, so a child's state can depend on its parents'.
	slices.SortFunc(fresh, func(a, b string) int {
		if d := cmpDepth(t, a, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var updates []ShardProgress
	for _, id := range fresh {
		if !t.tracked(id) {
			delete(t.nodes, id)
			continue
		}
		n := t.nodes[id]
		if n.Position.Kind == 0 {
			n.Position = t.startOf(id)
		}
		// A closed shard whose start is LATEST is resolved at T0 like an
		// open one: it may have closed after T0 (a split or merge during
		// the start-up, or before a restart or a takeover that reuses
		// T0), with records at or after T0 still to deliver. The batch
		// completes it when its scan proves there are none (see
		// resolved).
		switch {
		case n.Position.Kind == scan.KindShardEnd:
			// Config.Shards says so: complete without reading.
			n.State = StateCompleted
		case t.ready(id):
			n.State = StateActive
		default:
			n.State = StatePendingParent
		}
		updates = append(updates, n.ShardProgress)
	}
	// An explicit SHARD_END also completes a shard known before.
	if t.resolving {
		for _, id := range sortedKeys(t.selected) {
			n := t.nodes[id]
			if t.selected[id].Kind != scan.KindShardEnd || n == nil || !n.listed || n.State == StateCompleted || slices.Contains(fresh, id) {
				continue
			}
			n.State, n.Position = StateCompleted, scan.ShardEnd()
			updates = append(updates, ShardProgress{ShardID: id, State: StateCompleted, Position: scan.ShardEnd()})
		}
	}
	return updates, nil
}

// checkOrder returns a [ParentAfterChildError] when a tracked shard that is
// still to be read has a descendant that was read already, unless the
// shard is named in Config.OutOfOrderShards. Call it after observe, before
// anything is saved.
func (t *topology) checkOrder() error {
	children := map[string][]string{}
	for id, n := range t.nodes {
		for _, p := range n.Parents {
			children[p] = append(children[p], id)
		}
	}
	for _, id := range sortedKeys(t.nodes) {
		n := t.nodes[id]
		if !n.listed || n.State == StateCompleted || t.outOfOrder[id] || !t.tracked(id) {
			continue
		}
		// Breadth first, in ID order, so the nearest descendant is named.
		seen := map[string]bool{id: true}
		queue := []string{id}
		for len(queue) > 0 {
			kids := slices.Clone(children[queue[0]])
			queue = queue[1:]
			slices.Sort(kids)
			for _, c := range kids {
				if seen[c] {
					continue
				}
				seen[c] = true
				if t.nodes[c].begun {
					return &ParentAfterChildError{Stream: t.stream, Parent: id, Child: c}
				}
				queue = append(queue, c)
			}
		}
	}
	return nil
}

// cmpDepth orders shards by the length of their known ancestry.
func cmpDepth(t *topology, a, b string) int {
	return t.depth(a, map[string]int{}) - t.depth(b, map[string]int{})
}

// depth returns the number of generations above id (0 for a shard with no
// known parent). memo holds the depths computed so far, so that each shard
// is computed once however many merge paths lead to it.
func (t *topology) depth(id string, memo map[string]int) int {
	if d, ok := memo[id]; ok {
		return d
	}
	memo[id] = 0 // a cycle (never in Kinesis) ends here
	n := t.nodes[id]
	if n == nil {
		return 0
	}
	best := 0
	for _, p := range n.Parents {
		best = max(best, t.depth(p, memo)+1)
	}
	memo[id] = best
	return best
}

// startOf is where a newly tracked shard starts. Only a shard first seen
// while initialising takes a configured start (its own from Config.Shards,
// or StartPosition on the first run); a shard born later starts at
// TRIM_HORIZON, where its parents' records end. So does a shard whose start
// would be LATEST while a parent of it is still to be read: the child's
// records must follow the parent's without a gap. An explicit LATEST for
// the shard itself is the caller's choice and is kept.
func (t *topology) startOf(id string) scan.Position {
	p, selected := t.selected[id]
	switch {
	case !t.resolving:
		return scan.TrimHorizon()
	case p.Kind != 0:
		return p
	case !t.initial && !selected:
		return scan.TrimHorizon()
	case t.start.Kind == scan.KindLatest && !t.readyAtT0(id):
		return scan.TrimHorizon()
	}
	return t.start
}

// readyAtT0 reports whether every tracked parent of id is COMPLETED, or is
// itself to be resolved at T0 in this batch (its start is LATEST): the
// shard may then be resolved at T0 too, and [topology.resolved] decides
// once the parents' scans say whether they have records after T0.
func (t *topology) readyAtT0(id string) bool {
	for _, p := range t.nodes[id].Parents {
		pn := t.nodes[p]
		if pn != nil && t.tracked(p) && pn.State != StateCompleted && pn.Position.Kind != scan.KindLatest {
			return false
		}
	}
	return true
}

// resolved applies the batch's results to the topology and returns the
// updates to save. A shard listed closed whose scan proved that it holds no
// record at or after T0 ([scan.ShardResult.Ended]), and whose parents are
// complete, is COMPLETED at SHARD_END without being read. A shard resolved
// at T0 while a parent of
// it still has records to deliver (the parent closed after T0, so the
// child was born after it) starts at TRIM_HORIZON instead, so that its
// records follow the parent's with no gap whatever the arrival times say;
// an explicit start in Config.Shards is kept.
func (t *topology) resolved(results []scan.ShardResult) []ShardProgress {
	ids := make([]string, 0, len(results))
	ended := map[string]bool{}
	for _, r := range results {
		n := t.nodes[r.Shard]
		n.Position = r.Position
		// Only for a shard ListShards lists closed: an odd endpoint may
		// end an open shard's iterator too (that shard is read, and its
		// end confirmed, as any other).
		ended[r.Shard] = r.Ended && n.closed
		ids = append(ids, r.Shard)
	}
	// Parents first: whether a shard is ready depends on its parents'
	// results.
	slices.SortFunc(ids, func(a, b string) int {
		if d := cmpDepth(t, a, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	updates := make([]ShardProgress, 0, len(ids))
	for _, id := range ids {
		n := t.nodes[id]
		if ended[id] && t.ready(id) {
			// No record at or after T0, and its parents complete: done.
			// (An empty child of a parent still to read waits for it,
			// as any child: completed now, its own children would be
			// read before the parent's records.)
			n.Position, n.State = scan.ShardEnd(), StateCompleted
		}
		if _, explicit := t.selected[id]; !explicit && n.State != StateCompleted && !t.ready(id) {
			n.Position = scan.TrimHorizon()
		}
		u := ShardProgress{ShardID: id, Position: n.Position}
		if n.State == StateCompleted {
			u.State = StateCompleted
		}
		updates = append(updates, u)
	}
	return updates
}

// ready reports whether every tracked parent of id is COMPLETED. A parent
// that is unknown (expired before it was seen) or not tracked does not hold
// its child back.
func (t *topology) ready(id string) bool {
	for _, p := range t.nodes[id].Parents {
		pn := t.nodes[p]
		if pn != nil && t.tracked(p) && pn.State != StateCompleted {
			return false
		}
	}
	return true
}

// unresolved returns the tracked shards, open or closed, whose position
// is still LATEST: the batch to resolve at T0 before anything is read.
func (t *topology) unresolved() []string {
	var ids []string
	for id, n := range t.nodes {
		if n.listed && n.State != StateCompleted && n.Position.Kind == scan.KindLatest && t.tracked(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// runnable returns the tracked, listed shards that may be read now:
// ACTIVE or DRAINING (a crash before its completion was durable), and whose
// tracked parents are all COMPLETED: a child read already whose parent is
// read out of order (Config.OutOfOrderShards) waits for it.
func (t *topology) runnable() []string {
	var ids []string
	for id, n := range t.nodes {
		if n.listed && (n.State == StateActive || n.State == StateDraining) && t.tracked(id) && t.ready(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// activate moves every PENDING_PARENT or DISCOVERED shard whose parents are
// all COMPLETED to ACTIVE and returns the updates to save.
func (t *topology) activate() []ShardProgress {
	var updates []ShardProgress
	for id, n := range t.nodes {
		if (n.State == StatePendingParent || n.State == StateDiscovered) && n.listed && t.tracked(id) && t.ready(id) {
			updates = append(updates, ShardProgress{ShardID: id, State: StateActive})
		}
	}
	slices.SortFunc(updates, func(a, b ShardProgress) int { return strings.Compare(a.ShardID, b.ShardID) })
	return updates
}

// shardClosed reports whether a listing shows s closed: it has an ending
// sequence number.
func shardClosed(s types.Shard) bool {
	return s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil
}

// completedNow returns the topology's shards, each with whether it is
// COMPLETED: what a listing made from now on is checked against (see
// outdates).
func (t *topology) completedNow() map[string]bool {
	m := make(map[string]bool, len(t.nodes))
	for id, n := range t.nodes {
		m[id] = n.State == StateCompleted
	}
	return m
}

// outdates reports whether the topology changed since began (its
// completedNow when shards were listed) in a way that makes the listing
// older than the topology, which observe would take for a broken
// lineage: a shard the listing has open completed since (its end was
// read, so it closed after the listing), or a shard the listing lacks
// was added since (another host's progress named it).
func (t *topology) outdates(began map[string]bool, shards []types.Shard) bool {
	listed := make(map[string]bool, len(shards))
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		listed[id] = true
		if n := t.nodes[id]; n != nil && !shardClosed(s) && n.State == StateCompleted && !began[id] {
			return true
		}
	}
	for id := range t.nodes {
		if _, known := began[id]; !known && !listed[id] {
			return true
		}
	}
	return false
}

// apply merges durable updates into the topology.
func (t *topology) apply(updates []ShardProgress) {
	for _, u := range updates {
		n := t.nodes[u.ShardID]
		if n == nil {
			n = &node{}
			t.nodes[u.ShardID] = n
		}
		n.ShardProgress = merge(n.ShardProgress, u)
		n.saved = n.State
	}
}

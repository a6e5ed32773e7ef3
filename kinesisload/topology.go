package kinesisload

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/scan"
)

// ErrLineage is wrapped by the error that stops the Loader when a shard it
// tracks disappears from ListShards before it was COMPLETED (its records
// expired unread), so that data is never skipped silently.
var ErrLineage = errors.New("kinesisload: shard lineage broken")

// node is one shard of the topology.
type node struct {
	ShardProgress
	closed bool       // ListShards gave it an ending sequence number
	listed bool       // it was in the last ListShards
	saved  ShardState // the state last made durable; 0 for a new shard
}

// topology is the lineage graph of the tracked shards. It is owned by one
// goroutine (the Loader's scheduler) and needs no lock.
type topology struct {
	stream   string
	start    scan.Position            // Config.StartPosition
	selected map[string]scan.Position // Config.Shards; nil = all
	nodes    map[string]*node
	// initial is true while no progress of a tracked shard is stored:
	// the first run on the stream, when every shard takes the start
	// position. Later-born shards start at TRIM_HORIZON.
	initial bool
	// resolving is true until the initialisation batch is saved: shards
	// seen until then may start at a configured position (even LATEST,
	// which the batch resolves); shards seen later were born later.
	resolving bool
}

func newTopology(stream string, start scan.Position, selected map[string]scan.Position, stored map[string]ShardProgress) *topology {
	t := &topology{stream: stream, start: start, selected: selected, nodes: map[string]*node{}}
	for id, p := range stored {
		p.ShardID = id
		t.nodes[id] = &node{ShardProgress: p, saved: p.State}
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
	return t.trackedDepth(id, 0)
}

func (t *topology) trackedDepth(id string, depth int) bool {
	if t.selected == nil {
		return true
	}
	if _, ok := t.selected[id]; ok {
		return true
	}
	n := t.nodes[id]
	if n == nil || depth > 10000 {
		return false
	}
	for _, p := range n.Parents {
		if t.trackedDepth(p, depth+1) {
			return true
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
		n.closed = s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil
	}
	for id, n := range t.nodes {
		// A shard known by a state, or only by a TransactionalSink's
		// position, that is gone before it was completed.
		known := n.State != 0 || n.Position.Kind != 0
		if !n.listed && known && n.State != StateCompleted && n.Position.Kind != scan.KindShardEnd && t.tracked(id) {
			return nil, fmt.Errorf("%w: stream %s: shard %s is no longer listed but was %s at %v: its unread records have expired",
				ErrLineage, t.stream, id, n.State, n.Position)
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
		switch {
		case n.Position.Kind == scan.KindLatest && n.closed:
			// Nothing arrives in a closed shard after LATEST.
			n.Position, n.State = scan.ShardEnd(), StateCompleted
		case t.ready(id):
			n.State = StateActive
		default:
			n.State = StatePendingParent
		}
		updates = append(updates, n.ShardProgress)
	}
	return updates, nil
}

// cmpDepth orders shards by the length of their known ancestry.
func cmpDepth(t *topology, a, b string) int {
	return t.depth(a, 0) - t.depth(b, 0)
}

func (t *topology) depth(id string, d int) int {
	n := t.nodes[id]
	if n == nil || d > 10000 {
		return d
	}
	best := d
	for _, p := range n.Parents {
		best = max(best, t.depth(p, d+1))
	}
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
	case t.start.Kind == scan.KindLatest && !t.ready(id):
		return scan.TrimHorizon()
	}
	return t.start
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

// unresolved returns the tracked open shards whose position is still
// LATEST: the batch to resolve before anything is read.
func (t *topology) unresolved() []string {
	var ids []string
	for id, n := range t.nodes {
		if n.listed && !n.closed && n.State != StateCompleted && n.Position.Kind == scan.KindLatest && t.tracked(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// runnable returns the tracked, listed shards that may be read now:
// ACTIVE or DRAINING (a crash before its completion was durable).
func (t *topology) runnable() []string {
	var ids []string
	for id, n := range t.nodes {
		if n.listed && (n.State == StateActive || n.State == StateDraining) && t.tracked(id) {
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
